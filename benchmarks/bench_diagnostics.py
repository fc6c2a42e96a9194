"""Calibration of the reliability diagnostic (``result.diagnostics``) on planted data: its false-alarm and miss rates.

Planted data (d = 60 and 200 columns, n = 1,000 to 20,000 rows, ε = 0.1, 0.5, 2, k = 1 or 3 components, two
strengths; pca's auto, block and sequential adaptive power, Analyze Gauss; lowrank's randomized response and private
low-rank approximation at ε = 1.6, 8 and 32, where their noise leaves some runs accurate): n rows of d columns, each row ``Σ_j s_j z_j u_j + g`` (k planted orthonormal directions u_j of
decreasing strength s_j, z_j ~ N(0, 1), g isotropic Gaussian background), scaled so that rows have norm about 1
and clipped to ``row_norm_bound=1``. For every setting (mechanism × n × ε × k × strength) one private run releases
k components; the truth is the exact top-k subspace of the same clipped (and, for centred runs, centred) rows, and
its error is the largest principal angle's sin² between the released and the true subspace.

A run counts as

- **bad** when that sin² is above 0.5, **good** when it is below 0.05 (runs in between are not scored);
- a **false alarm** when it is good but ``diagnostics.reliable`` is false;
- a **miss** when it is bad but ``diagnostics.reliable`` is true.

    python benchmarks/bench_diagnostics.py              # the full sweep (about 15 minutes on one core)
    python benchmarks/bench_diagnostics.py --quick      # a handful of runs: seconds
    python benchmarks/bench_diagnostics.py --thresholds 0.3 0.4 0.5 0.6 0.7   # the rates at other thresholds

Prints one line per run (mechanism, n, ε, k, strength, sin², worst noise_to_signal, reliable) and then, per
threshold, ``false_alarm <rate> (<count>/<good runs>) miss <rate> (<count>/<bad runs>)``.
"""

from __future__ import annotations

import _common  # noqa: F401  (thread environment first)

import argparse
import itertools
import warnings
from typing import Any

import numpy as np


def planted(n: int, d: int, k: int, strength: float, rng: np.random.Generator) -> tuple[np.ndarray, float]:
    """Rows with k planted directions (strengths ``strength·0.7^j``) over an isotropic background, norms ≈ 1."""
    basis, _ = np.linalg.qr(rng.standard_normal((d, k)))
    weights = strength * 0.7 ** np.arange(k)
    rows = (rng.standard_normal((n, k)) * weights) @ basis.T + rng.standard_normal((n, d)) / np.sqrt(d)
    rows /= np.sqrt(1.0 + float(np.sum(weights**2)))  # E‖row‖² = 1
    return rows, float(weights[-1])


def truth(rows: np.ndarray, k: int, centred: bool) -> np.ndarray:
    """The exact top-k right singular vectors (k×d) of the rows clipped to norm 1 (centred at their mean)."""
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    clipped = rows / np.maximum(norms, 1.0)
    if centred:
        clipped = clipped - clipped.mean(axis=0)
    return np.linalg.svd(clipped, full_matrices=False)[2][:k]


def subspace_sin2(released: np.ndarray, exact: np.ndarray) -> float:
    """sin² of the largest principal angle between the row spaces of ``released`` and ``exact`` (both k×d)."""
    q, _ = np.linalg.qr(np.asarray(released).T)
    cosines = np.linalg.svd(exact @ q, compute_uv=False)
    return float(1.0 - min(1.0, float(np.min(cosines))) ** 2)


MECHANISMS: dict[str, dict[str, Any]] = {
    "auto": {"mechanism": "auto", "center": "private"},
    "adaptive-power-block": {"mechanism": "adaptive-power-block", "center": "private"},
    "analyze-gauss": {"mechanism": "analyze-gauss", "center": False},
    "adaptive-power": {"mechanism": "adaptive-power", "center": False},
    "lowrank:randomized-response": {"mechanism": "randomized-response", "center": False},
    "lowrank:private-low-rank": {"mechanism": "private-low-rank", "center": False},
}


def release(name: str, rows: np.ndarray, epsilon: float, k: int) -> tuple[np.ndarray, Any]:
    """The released components (k×d) and diagnostics of one private run of ``name``."""
    from dppca_dask import lowrank, pca

    options = MECHANISMS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name.startswith("lowrank:"):
            result = lowrank(rows, rank=k, epsilon=epsilon, delta=1e-6, mechanism=options["mechanism"],
                             client="local")
            # the top-k right singular vectors of B = left @ right (left has orthonormal columns)
            q, r = np.linalg.qr(result.left)
            return np.linalg.svd(r @ result.right, full_matrices=False)[2][:k], result.diagnostics
        result = pca(rows, epsilon=epsilon, delta=1e-6, n_components=k, client="local", progress=False, **options)
    return result.components, result.diagnostics


def sweep(quick: bool, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    if quick:
        grid = list(itertools.product(["auto"], [60], [2000], [0.3, 3.0], [1], [1.5]))
    else:
        grid = list(itertools.product(list(MECHANISMS), [60, 200], [1000, 5000, 20000], [0.1, 0.5, 2.0], [1, 3],
                                      [0.8, 2.0]))
    runs = []
    for name, d, n, epsilon, k, strength in grid:
        if name == "lowrank:randomized-response" and n * d > 1_000_000:
            continue  # it releases the whole n×d matrix: the small sizes show its regime
        if name.startswith("lowrank:"):
            epsilon *= 16.0  # its noise is larger (a row change, a whole matrix released): ε = 1.6, 8, 32
        rows, _ = planted(n, d, k, strength, rng)
        components, diag = release(name, rows, epsilon, k)
        error = subspace_sin2(components, truth(rows, k, bool(MECHANISMS[name]["center"])))
        runs.append({"mechanism": name, "d": d, "n": n, "epsilon": epsilon, "k": k, "strength": strength,
                     "sin2": error, "worst": diag.worst, "reliable": diag.reliable})
        print(f"{name:28s} d={d:3d} n={n:6d} eps={epsilon:4.1f} k={k} strength={strength:3.1f} sin2={error:.3f} "
              f"noise_to_signal={diag.worst:.3f} reliable={diag.reliable}", flush=True)
    return runs


def rates(runs: list[dict[str, Any]], threshold: float) -> str:
    good = [r for r in runs if r["sin2"] < 0.05]
    bad = [r for r in runs if r["sin2"] > 0.5]
    alarms = sum(1 for r in good if r["worst"] > threshold)
    misses = sum(1 for r in bad if r["worst"] <= threshold)
    fa = alarms / len(good) if good else float("nan")
    mi = misses / len(bad) if bad else float("nan")
    return (f"threshold {threshold:.2f}: false_alarm {fa:.3f} ({alarms}/{len(good)}) "
            f"miss {mi:.3f} ({misses}/{len(bad)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="two runs of auto: seconds")
    parser.add_argument("--seed", type=int, default=0, help="seed of the planted data (the noise is fresh)")
    parser.add_argument("--thresholds", type=float, nargs="*", default=None,
                        help="noise_to_signal thresholds to score (default: the library's)")
    args = parser.parse_args()
    from dppca_dask.diagnostics import DEFAULT_THRESHOLD

    runs = sweep(args.quick, args.seed)
    for threshold in args.thresholds or [DEFAULT_THRESHOLD]:
        print(rates(runs, threshold))


if __name__ == "__main__":
    main()
