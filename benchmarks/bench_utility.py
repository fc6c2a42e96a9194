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
    python benchmarks/bench_utility.py --block --w8a PATH/w8a.svm           # block vs sequential, k = 2..20
    python benchmarks/bench_utility.py --auto --w8a PATH/w8a.svm --epsilons 1 2   # auto against both mechanisms

``--block`` compares the block version (``mechanism="adaptive-power-block"``: T releases of a d×k block) with the
sequential one (``"adaptive-power"``: k runs of T releases) at equal (ε, δ), for k ∈ {2, 5, 10, 20}, on w8a (when
given) and on a generated sparse matrix with a planted rank-20 spectrum. Error is the subspace error
``1 − ‖V Uᵀ‖_F²/k`` (the mean sin² of the principal angles) against the exact top-k right singular vectors of the
clipped matrix, median over repetitions; both spend the whole budget on the components.

``--auto`` runs ``mechanism="auto"`` (a pilot from 10% of the budget decides between block adaptive power and
Analyze Gauss) against adaptive power (sequential and block) and Analyze Gauss, each with the whole budget, on the
low- and high-coherence data (smaller than above: d = 1,000) and on w8a (when given, at c = 1 and at ``--bound``),
uncentred, k = 1. The last line is ``ratio <the largest auto error / best other error over all regimes and ε>``.
"""

from __future__ import annotations

import _common  # noqa: F401  (thread environment first)

import argparse
import time
import warnings
from typing import Any

import numpy as np

from dppca_dask import accounting
from dppca_dask.methods.adaptive_power.calibration import calibrate_adaptive_power
from dppca_dask.methods.adaptive_power.sequential import adaptive_power_run, default_top_m
from dppca_dask.methods.analyze_gauss.algorithm import analyze_gauss_run
from dppca_dask.methods.exact.algorithm import top_eigenpairs
from dppca_dask.coordinator.requests import GramMatrix
from dppca_dask.api import DEFAULT_N_ITER, DEFAULT_SVT_SHARE
from dppca_dask.coordinator import LocalExecutor, as_source, run_algorithm
from dppca_dask.datasets import PlantedSpec, low_coherence_matrix
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.mechanisms import NoiseSource, svt_cutoff

DELTA = 1e-6


class _CachedGram(LocalExecutor):
    """The regime's executor for Analyze Gauss runs, reusing one exact Gram matrix (the noise differs per run); its
    partitions are the regime's, so ``run_algorithm``'s checks of every partition run on them as for any run."""

    def __init__(self, executor: LocalExecutor, gram: np.ndarray) -> None:
        self.source, self._parts, self.gram = executor.source, executor._parts, gram

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
    cal = calibrate_adaptive_power(epsilon=epsilon, delta=DELTA, n_iter=n_iter, svt_share=SVT_SHARE)
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


def gauss_errors(executor: LocalExecutor, gram: np.ndarray, truth: np.ndarray, *, epsilon: float, repeats: int,
                 seed: int) -> list[float]:
    multiplier = accounting.calibrate_gaussian(epsilon=epsilon, delta=DELTA)
    cached = _CachedGram(executor, gram)
    errors = []
    for r in range(repeats):
        out = run_algorithm(cached, analyze_gauss_run(
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
        g = _common.median(gauss_errors(executor, gram, truth, epsilon=eps, repeats=repeats, seed=1))
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


def subspace_error(estimate: np.ndarray, truth: np.ndarray) -> float:
    """Mean sin² of the principal angles between the row spaces of two k×d orthonormal matrices."""
    k = truth.shape[0]
    return float(max(0.0, 1.0 - float(np.sum((estimate @ truth.T) ** 2)) / k))


def planted_rank_matrix(n: int, d: int, rank: int, *, seed: int) -> Any:
    """Sparse rows (about 30 entries each) plus a planted rank-``rank`` part with decaying strengths on 200 columns."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    noise = sp.random(n, d, density=30 / d, random_state=rng, format="csr", data_rvs=rng.standard_normal) * 0.15
    support = rng.choice(d, size=200, replace=False)
    basis = np.linalg.qr(rng.standard_normal((200, rank)))[0]
    strengths = 0.9 * 0.85 ** np.arange(rank)
    scores = rng.standard_normal((n, rank)) * strengths
    planted = sp.csr_array((n, d))
    dense = scores @ basis.T
    dense[np.abs(dense) < 0.02] = 0.0
    planted = sp.csr_array((dense.ravel()[np.flatnonzero(dense)],
                            (np.repeat(np.arange(n), (dense != 0).sum(axis=1)), support[np.nonzero(dense)[1]])),
                           shape=(n, d))
    return sp.csr_array(noise + planted)


def block_vs_sequential(name: str, matrix: Any, *, ks: list[int], epsilon: float, repeats: int, bound: float,
                        n_iter: int) -> None:
    from dppca_dask.methods.adaptive_power.block_plan import BLOCK_POWER, plan_block_power
    from dppca_dask.api import validate_parameters
    from dppca_dask.api._pca import _plan
    from dppca_dask.kernels.power import gram_matrix

    norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
    gram = gram_matrix(matrix, norms, row_norm_bound=bound)
    _values, vectors = top_eigenpairs(gram, max(ks))
    executor = LocalExecutor(as_source(matrix))
    print(f"\n## block vs sequential on {name}: n={matrix.shape[0]}, d={matrix.shape[1]}, nnz={matrix.nnz:,}, "
          f"row_norm_bound={bound}, epsilon={epsilon}, delta={DELTA}, T={n_iter}, {repeats} runs; the whole budget "
          "on the components (no explained variance, no centring)")
    rows = []
    for k in ks:
        truth = vectors[:k]
        row: dict[str, Any] = {"k": k}
        for mechanism in ("adaptive-power", BLOCK_POWER):
            params = validate_parameters(mechanism=mechanism, epsilon=epsilon, delta=DELTA, n_components=k,
                                         n_iter=n_iter, row_norm_bound=bound, svt_share=SVT_SHARE, beta=0.05,
                                         grid_per_octave=4, grid_octaves=24, calibration="standard",
                                         max_dense_dim=4096)
            plan = (plan_block_power(params, matrix.shape[1], explained_variance=False) if mechanism == BLOCK_POWER
                    else _plan(params, matrix.shape[1]))
            errors, seconds = [], []
            for r in range(repeats):
                t = time.perf_counter()
                out = run_algorithm(executor, plan.make_run(_noise(1000 * k + r), None, None))
                seconds.append(time.perf_counter() - t)
                errors.append(subspace_error(out.components, truth))
            label = "block" if mechanism == BLOCK_POWER else "sequential"
            row[label] = _common.median(errors)
            row[f"{label} s"] = _common.median(seconds)
        row["sequential/block"] = row["sequential"] / row["block"] if row["block"] > 0 else float("inf")
        rows.append(row)
    print("median subspace error 1 - |V U^T|_F^2 / k")
    print(_common.table(rows, ["k", "sequential", "block", "sequential/block", "sequential s", "block s"]))


def block_main(args: argparse.Namespace) -> None:
    ks = args.ks
    repeats = args.repeats or 3
    if args.w8a:
        from sklearn.datasets import load_svmlight_file

        import scipy.sparse as sp

        features, _labels = load_svmlight_file(args.w8a, n_features=300)
        block_vs_sequential("w8a", sp.csr_array(features, dtype=np.float64), ks=ks, epsilon=args.epsilons[0],
                            repeats=repeats, bound=args.bound, n_iter=DEFAULT_N_ITER)
    n = 20_000 if args.quick else 50_000
    block_vs_sequential(f"a planted rank-20 sparse matrix", planted_rank_matrix(n, 500, 20, seed=5), ks=ks,
                        epsilon=args.epsilons[0], repeats=repeats, bound=1.0, n_iter=DEFAULT_N_ITER)


def auto_vs_both(name: str, matrix: Any, *, epsilons: list[float], repeats: int, bound: float,
                 n_components: int = 1) -> list[tuple[str, float, float, float]]:
    """Median subspace error of ``mechanism="auto"`` against adaptive power (sequential and block) and Analyze Gauss
    at equal (ε, δ), each run as :func:`dppca_dask.pca` plans it (uncentred, fixed bound). Returns
    ``(name, ε, auto error, best other error)`` per ε."""
    from dppca_dask.api import validate_parameters
    from dppca_dask.kernels.power import gram_matrix
    from dppca_dask.methods import get_mechanism

    norms = np.sqrt(np.asarray(matrix.multiply(matrix).sum(axis=1)).ravel())
    gram = gram_matrix(matrix, norms, row_norm_bound=bound)
    values, vectors = top_eigenpairs(gram, n_components + 1)
    truth = vectors[:n_components]
    executor = LocalExecutor(as_source(matrix))
    n, d = matrix.shape
    print(f"\n## auto on {name}: n={n}, d={d}, nnz={matrix.nnz:,}, row_norm_bound={bound}, k={n_components}, "
          f"sigma1^2/n={values[0] / n:.4f}, "
          f"gap (sigma1^2-sigma2^2)/sigma1^2={(values[0] - values[1]) / values[0]:.3f}, "
          f"delta={DELTA}, T={DEFAULT_N_ITER}, {repeats} runs")
    mechanisms = ("adaptive-power", "adaptive-power-block", "analyze-gauss", "auto")
    rows, out = [], []
    for eps in epsilons:
        row: dict[str, Any] = {"epsilon": eps}
        chosen: list[str] = []
        for mechanism in mechanisms:
            params = validate_parameters(mechanism=mechanism, epsilon=eps, delta=DELTA, n_components=n_components,
                                         n_iter=None, row_norm_bound=bound, svt_share=SVT_SHARE, beta=0.05,
                                         grid_per_octave=4, grid_octaves=24, calibration="standard",
                                         max_dense_dim=4096)
            plan = get_mechanism(mechanism, "pca").plan(params, n_cols=d)
            errors = []
            for r in range(repeats):
                result = run_algorithm(executor, plan.make_run(_noise(7919 * r + int(100 * eps)), None, None))
                errors.append(subspace_error(result.components, truth))
                if mechanism == "auto":
                    chosen.append("B" if result.mechanism == "adaptive-power-block" else "G")
            row[mechanism] = _common.median(errors)
        best = min(row[m] for m in mechanisms[:3])
        row["auto/best"] = row["auto"] / best if best > 0 else float("inf")
        row["auto chose"] = "".join(chosen)
        rows.append(row)
        out.append((name, eps, row["auto"], best))
    print("median subspace error (sin^2 for k = 1); auto chose: B = adaptive-power-block, G = analyze-gauss")
    print(_common.table(rows, ["epsilon", *mechanisms, "auto/best", "auto chose"]))
    return out


def auto_main(args: argparse.Namespace) -> None:
    repeats = args.repeats or 5
    if args.quick:
        low = PlantedSpec(n_rows=60_000, n_cols=600, nnz_per_row=30, support=60, signal_share=0.015, seed=11)
        high = PlantedSpec(n_rows=20_000, n_cols=600, nnz_per_row=30, support=60, signal_share=0.5, seed=12)
    else:
        low = PlantedSpec(n_rows=300_000, n_cols=1_000, nnz_per_row=30, support=100, signal_share=0.005, seed=11)
        high = PlantedSpec(n_rows=100_000, n_cols=1_000, nnz_per_row=30, support=100, signal_share=0.5, seed=12)
    results = []
    for name, spec in (("low coherence", low), ("high coherence", high)):
        results += auto_vs_both(f"{name} (signal share {spec.signal_share})", low_coherence_matrix(spec),
                                epsilons=args.epsilons, repeats=repeats, bound=1.0)
    if args.w8a:
        from sklearn.datasets import load_svmlight_file

        import scipy.sparse as sp

        features, _labels = load_svmlight_file(args.w8a, n_features=300)
        matrix = sp.csr_array(features, dtype=np.float64)
        results += auto_vs_both("w8a", matrix, epsilons=args.epsilons, repeats=repeats, bound=1.0)
        results += auto_vs_both("w8a", matrix, epsilons=args.epsilons, repeats=repeats, bound=args.bound)
    worst = max(a / b if b > 0 else float("inf") for _n, _e, a, b in results)
    print(f"auto within {worst:.3g}x of the better mechanism in every regime" + (" (target 1.5x)"))
    print(f"ratio {worst:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller data, fewer runs (< 1 minute)")
    parser.add_argument("--iters", type=int, nargs="+", default=None, help="values of T to compare")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--svt-share", type=float, default=None, help="share of the budget for the SVT steps")
    parser.add_argument("--low-only", action="store_true", help="only the low-coherence regime")
    parser.add_argument("--block", action="store_true", help="block vs sequential for several k (see above)")
    parser.add_argument("--ks", type=int, nargs="+", default=[2, 5, 10, 20])
    parser.add_argument("--w8a", default=None, help="path of w8a.svm (LIBSVM) for --block")
    parser.add_argument("--bound", type=float, default=4.0, help="row_norm_bound on w8a for --block (default 4)")
    parser.add_argument("--auto", action="store_true",
                        help="mechanism='auto' against adaptive power and Analyze Gauss (see above)")
    args = parser.parse_args()
    if args.auto:
        auto_main(args)
        return
    if args.block:
        block_main(args)
        return
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
