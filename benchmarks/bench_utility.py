"""Utility at a privacy budget: adaptive private power iteration against Analyze Gauss, at equal (ε, δ).

Two generated regimes (``dppca_dask.datasets.PlantedSpec``):
- low coherence (seed 004 spec §5): the top direction carries a small share of every row's energy;
- high coherence: it carries half of every row's energy (σ₁²/n ≈ 0.5), where the spec expects Analyze Gauss
  to win because θ stays near c² and the √T composition cost dominates.

Error is the median over repetitions of sin²(v₁, x) against the exact top right singular vector of the (clipped)
matrix. Runs are in-process over the same partitions the cluster would use (utility does not depend on the
executor); noise comes from seeded sources so the table is reproducible (such runs are not private, which is
irrelevant for measuring error). The last line is ``ratio <Analyze Gauss error / adaptive error>`` in the low-
coherence regime at ε = 1 with the default T.

    python benchmarks/bench_utility.py --quick
    python benchmarks/bench_utility.py --iters 3 5 8 10 --repeats 5      # the sweep behind DEFAULT_N_ITER
"""

from __future__ import annotations

import _common  # noqa: F401  (thread environment first)

import argparse
import time
import warnings
from typing import Any

import numpy as np

from dppca_dask import accounting
from dppca_dask.algorithms.adaptive_power import adaptive_power_run, default_top_m
from dppca_dask.algorithms.analyze_gauss import analyze_gauss_run
from dppca_dask.algorithms.exact import top_eigenpairs
from dppca_dask.algorithms.requests import GramMatrix
from dppca_dask.api import DEFAULT_N_ITER, DEFAULT_SVT_SHARE
from dppca_dask.coordinator import LocalExecutor, as_source, run_algorithm
from dppca_dask.datasets import PlantedSpec, low_coherence_matrix
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.mechanisms import NoiseSource, svt_cutoff

DELTA = 1e-6


class _CachedGram:
    """Executor for Analyze Gauss runs that reuses one exact Gram matrix (the noise differs per run)."""

    def __init__(self, gram: np.ndarray) -> None:
        self.gram = gram

    def execute(self, request: Any) -> Any:
        assert isinstance(request, GramMatrix)
        return self.gram


def _noise(seed: int) -> NoiseSource:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return NoiseSource.from_seed(seed)


SVT_SHARE = DEFAULT_SVT_SHARE


def adaptive_errors(executor: LocalExecutor, truth: np.ndarray, *, epsilon: float, n_iter: int, repeats: int,
                    seed: int) -> tuple[list[float], list[float]]:
    d = truth.shape[0]
    cal = accounting.calibrate_adaptive_power(epsilon=epsilon, delta=DELTA, n_iter=n_iter, svt_share=SVT_SHARE)
    cutoff = svt_cutoff(cal.epsilon_svt, 0.05)
    grid = ThresholdGrid.for_bound(1.0)
    errors, thetas = [], []
    for r in range(repeats):
        out = run_algorithm(executor, adaptive_power_run(
            n_cols=d, n_iter=n_iter, n_components=1, row_norm_bound=1.0, epsilon_svt=cal.epsilon_svt,
            noise_multiplier=cal.noise_multiplier, cutoff=cutoff, grid=grid, noise=_noise(seed * 1000 + r),
            top_m=default_top_m(cutoff=cutoff, epsilon_svt=cal.epsilon_svt)))
        errors.append(_common.sin2(out.components[0], truth))
        thetas.append(float(out.thresholds[0, -1]))
    return errors, thetas


def gauss_errors(gram: np.ndarray, truth: np.ndarray, *, epsilon: float, repeats: int, seed: int) -> list[float]:
    multiplier = accounting.calibrate_gaussian(epsilon=epsilon, delta=DELTA)
    executor = _CachedGram(gram)
    errors = []
    for r in range(repeats):
        out = run_algorithm(executor, analyze_gauss_run(
            n_cols=gram.shape[0], n_components=1, row_norm_bound=1.0, noise_multiplier=multiplier,
            noise=_noise(seed * 1000 + 500 + r), max_dense_dim=gram.shape[0]))
        errors.append(_common.sin2(out.components[0], truth))
    return errors


def regime(name: str, spec: PlantedSpec, *, epsilons: list[float], iters: list[int], repeats: int) -> dict:
    t = time.perf_counter()
    matrix = low_coherence_matrix(spec)
    executor = LocalExecutor(as_source(matrix))
    gram = executor.execute(GramMatrix(row_norm_bound=1.0))
    values, vectors = top_eigenpairs(gram, 2)
    truth = vectors[0]
    print(f"\n## {name}: n={spec.n_rows}, d={spec.n_cols}, nnz={matrix.nnz:,}, signal share {spec.signal_share}; "
          f"sigma1^2={values[0]:.1f}, sigma2^2={values[1]:.1f}, sigma1^2/n={values[0] / spec.n_rows:.4f} "
          f"(prepared in {time.perf_counter() - t:.1f} s)")
    rows, summary = [], {}
    for eps in epsilons:
        row: dict[str, Any] = {"epsilon": eps}
        for T in iters:
            errs, thetas = adaptive_errors(executor, truth, epsilon=eps, n_iter=T, repeats=repeats, seed=T)
            row[f"adaptive T={T}"] = _common.median(errs)
            row[f"theta T={T}"] = _common.median(thetas)
            summary[(eps, T)] = _common.median(errs)
        g = _common.median(gauss_errors(gram, truth, epsilon=eps, repeats=repeats, seed=1))
        row["analyze-gauss"] = g
        summary[(eps, "gauss")] = g
        best = min(row[f"adaptive T={T}"] for T in iters)
        row["gauss/best adaptive"] = g / best if best > 0 else float("inf")
        rows.append(row)
    columns = ["epsilon"] + [f"adaptive T={T}" for T in iters] + [f"theta T={T}" for T in iters] + \
        ["analyze-gauss", "gauss/best adaptive"]
    print(f"median sin^2(v1, x) over {repeats} runs, delta={DELTA}")
    print(_common.table(rows, columns))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller data, fewer runs (< 1 minute)")
    parser.add_argument("--iters", type=int, nargs="+", default=None, help="values of T to compare")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--svt-share", type=float, default=None, help="share of the budget for the SVT steps")
    parser.add_argument("--low-only", action="store_true", help="only the low-coherence regime")
    args = parser.parse_args()
    global SVT_SHARE
    if args.svt_share is not None:
        SVT_SHARE = args.svt_share
    print(f"svt_share={SVT_SHARE}")
    iters = args.iters or sorted({DEFAULT_N_ITER, 10} if not args.quick else {DEFAULT_N_ITER})
    if DEFAULT_N_ITER not in iters:
        iters.append(DEFAULT_N_ITER)
    if args.quick:
        low = PlantedSpec(n_rows=60_000, n_cols=600, nnz_per_row=30, support=60, signal_share=0.015, seed=11)
        high = PlantedSpec(n_rows=20_000, n_cols=600, nnz_per_row=30, support=60, signal_share=0.5, seed=12)
        repeats = args.repeats or 3
    else:
        low = PlantedSpec(n_rows=300_000, n_cols=3_000, nnz_per_row=30, support=200, signal_share=0.003, seed=11)
        high = PlantedSpec(n_rows=100_000, n_cols=3_000, nnz_per_row=30, support=200, signal_share=0.5, seed=12)
        repeats = args.repeats or 3
    low_summary = regime("low coherence", low, epsilons=args.epsilons, iters=iters, repeats=repeats)
    eps1 = 1.0 if 1.0 in args.epsilons else args.epsilons[0]
    ratio = low_summary[(eps1, "gauss")] / low_summary[(eps1, DEFAULT_N_ITER)]
    if args.low_only:
        print(f"ratio {ratio:.3f}")
        return
    high_summary = regime("high coherence", high, epsilons=args.epsilons, iters=iters, repeats=repeats)
    for eps in args.epsilons:
        h = high_summary[(eps, "gauss")] / high_summary[(eps, DEFAULT_N_ITER)]
        print(f"high coherence, epsilon={eps}: Analyze Gauss error / adaptive (T={DEFAULT_N_ITER}) error = {h:.3g}"
              + ("  (adaptive loses here)" if h < 1 else ""))
    print(f"ratio {ratio:.3f}")


if __name__ == "__main__":
    main()
