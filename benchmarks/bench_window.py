"""Error of each window release (Gaussian / Analyze Gauss, Wishart, JL) against the exact window answer, across ε.

The window is W rows of LIBSVM's w8a (binary web-page keyword features, 300 columns; the label is the last
column for regression), clipped to ‖(x, y)‖ ≤ 1 — the same exact Gram the Dask path computes. Each release is
drawn ``--repeats`` times per ε from the mechanisms of :mod:`dppca_dask.mechanisms.wishart`; the figures are
medians:

- covariance: spectral error ``‖C̃ − K‖₂ / ‖K‖₂`` of the debiased release (features only);
- PCA: ``sin²`` between the top eigenvector of the release and of the exact window covariance;
- regression: excess mean squared error over the exact least-squares fit, on the window's clipped rows.

A second table measures the regression (``WindowRelease.regression``, default ridge against none) on two planted
designs of seven days of 3,000 rows: ``ill`` (d = 100, rank 5 plus small isotropic noise, random β: 95 directions
lie below the noise) and ``well`` (d = 20, isotropic): the median relative coefficient error to the exact window
least squares (predicting zero scores 1) and the excess RSS over the exact fit as a share of predicting zero's
(``(RSS − RSS_exact)/(RSS_zero − RSS_exact)``: 0 is the exact fit, 1 is no better than zero).

Usage: ``python benchmarks/bench_window.py [--quick] [--rows W] [--data shared/data/w8a.svm]``; writes
``benchmarks/results/window.md`` and ``benchmarks/results/window_error.png``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import median, sin2, table  # noqa: E402

import numpy as np  # noqa: E402

from dppca_dask.accounting import calibrate_gaussian  # noqa: E402
from dppca_dask.mechanisms import NoiseSource  # noqa: E402
from dppca_dask.mechanisms.wishart import (  # noqa: E402
    jl_gram_mechanism,
    symmetric_gaussian_mechanism,
    wishart_mechanism,
)
from dppca_dask.methods.window.release import WindowRelease  # noqa: E402
from dppca_dask.methods.window.tasks import psd_projection  # noqa: E402

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def load(path: str, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``rows`` rows of a LIBSVM file as a dense (x, y) array, clipped jointly to norm 1."""
    from sklearn.datasets import load_svmlight_file

    x, y = load_svmlight_file(path, n_features=300)
    x = x[:rows].toarray()
    y = np.asarray(y[:rows], dtype=np.float64)
    z = np.hstack([x, 0.5 * y[:, None]])
    norms = np.linalg.norm(z, axis=1)
    return z / np.maximum(norms, 1.0)[:, None], norms


def raw_release(kind: str, gram: np.ndarray, epsilon: float, delta: float, noise: NoiseSource,
                key: str) -> WindowRelease:
    """The release as :func:`dppca_dask.window` returns it (a time window of unit-bounded rows with labels), for
    its post-processing (the regression's default ridge)."""
    if kind == "gaussian":
        multiplier = calibrate_gaussian(epsilon=epsilon, delta=delta)
        noisy, _ = symmetric_gaussian_mechanism(gram, row_norm_bound=1.0, noise_multiplier=multiplier, noise=noise,
                                                release=key)
        cal = {"noise_multiplier": multiplier, "l2_sensitivity": 1.0, "row_norm_bound": 1.0}
        return WindowRelease(noisy, 0.0, kind, None, None, True, cal)  # type: ignore[arg-type]
    if kind == "wishart":
        noisy, tau, _ = wishart_mechanism(gram, row_norm_bound=1.0, epsilon=epsilon, delta=delta, noise=noise,
                                          release=key)
        return WindowRelease(noisy, tau, kind, None, None, True, {"tau": tau})  # type: ignore[arg-type]
    noisy, sigma, _ = jl_gram_mechanism(gram, row_norm_bound=1.0, epsilon=epsilon, delta=delta,
                                        sketch_rows=gram.shape[0], noise=noise, release=key)
    return WindowRelease(noisy, sigma**2, kind, None, None, True,  # type: ignore[arg-type]
                         {"sigma": sigma, "sketch_rows": gram.shape[0]})


def planted_design(kind: str, *, days: int = 7, rows: int = 3000, seed: int = 0) -> np.ndarray:
    """``days × rows`` rows ``(x, y)`` of :func:`~dppca_dask.datasets.regression_design` (the designs of
    tests/window/test_window_regression.py), clipped jointly to norm 1."""
    from dppca_dask.datasets import regression_design

    x, y = regression_design(kind, days * rows, seed=seed)
    z = np.hstack([x, y[:, None]])
    return z / np.maximum(np.linalg.norm(z, axis=1), 1.0)[:, None]


def regression_table(epsilons: list[float], repeats: int, delta: float, seed: int) -> list[dict[str, object]]:
    """Coefficient error and excess RSS of the window regression on the planted designs, against the exact window
    fit and against predicting zero, with the default ridge (``auto``) and without one (``0``)."""
    out: list[dict[str, object]] = []
    noise = NoiseSource.from_seed(seed + 1)
    for design in ("ill", "well"):
        z = planted_design(design)
        gram, x_rows, y = z.T @ z, z[:, :-1], z[:, -1]
        exact = np.linalg.lstsq(x_rows, y, rcond=None)[0]
        rss_exact, rss_zero = float(np.sum((x_rows @ exact - y) ** 2)), float(y @ y)
        for epsilon in epsilons:
            for kind in ("gaussian", "wishart", "jl"):
                rows: dict[str, dict[str, list[float]]] = {"auto": {}, "0": {}}
                for r in range(repeats):
                    result = raw_release(kind, gram, epsilon, delta, noise, f"reg-{design}-{kind}-{epsilon}-{r}")
                    for ridge in rows:
                        coef = result.regression(ridge="auto" if ridge == "auto" else 0.0)
                        rss = float(np.sum((x_rows @ coef - y) ** 2))
                        got = rows[ridge]
                        got.setdefault("err", []).append(float(np.linalg.norm(coef - exact) / np.linalg.norm(exact)))
                        got.setdefault("rss", []).append((rss - rss_exact) / (rss_zero - rss_exact))
                        if ridge == "auto":
                            diag = result.regression_diagnostics()
                            got.setdefault("reliable", []).append(float(diag["reliable"]))
                for ridge, got in rows.items():
                    out.append({"design": design, "epsilon": epsilon, "release": kind, "ridge": ridge,
                                "coef_rel_err": median(got["err"]), "excess_rss_vs_zero": median(got["rss"]),
                                "reliable": "" if ridge == "0" else f"{sum(got['reliable']):.0f}/{repeats}"})
    return out


def histogram_space(widths: list[int], *, d: int = 10, rank: int = 3, eta: float = 0.2, lam: float = 171.0,
                    seed: int = 0) -> list[dict[str, float]]:
    """Largest checkpoint count ℓ of the spectral histogram over a stream of 2W unit rows of rank ``rank``
    (spec §6.3 setting), its bytes, and the a-priori bound of §9 check 6, against W rows of d floats."""
    from dppca_dask.methods.window.histogram import SpectralHistogram

    out = []
    for w in widths:
        rng = np.random.default_rng(seed)
        basis = np.linalg.qr(rng.standard_normal((d, rank)))[0]
        rows = rng.standard_normal((2 * w, rank)) @ basis.T
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        h = SpectralHistogram(d, eta, lam)
        worst = 0
        for t, a in enumerate(rows):
            h.add(t, np.outer(a, a), window_start=max(0, t - w + 1))
            worst = max(worst, h.n_checkpoints)
        bound = 3 + 2 * rank * np.log((1 + (w + 1) / lam) / (1 - eta)) / -np.log(1 - eta)
        out.append({"W": w, "max_checkpoints": worst, "bound": round(float(bound), 1),
                    "histogram_bytes": 8 * worst * d * d, "window_rows_bytes": 8 * w * d})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data",
                                                       "w8a.svm"))
    parser.add_argument("--rows", type=int, default=8000, help="window size W (rows)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--quick", action="store_true", help="two ε values, two repeats, 2,000 rows")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    epsilons = [0.5, 2.0] if args.quick else [0.25, 0.5, 1.0, 2.0, 4.0]
    repeats = 2 if args.quick else args.repeats
    rows = 2000 if args.quick else args.rows
    z, _ = load(args.data, rows)
    gram = z.T @ z
    feats = gram[:-1, :-1]
    top = np.linalg.eigh(feats)[1][:, -1]
    x_rows, y = z[:, :-1], z[:, -1]
    exact_coef = np.linalg.lstsq(x_rows, y, rcond=None)[0]
    best = float(np.mean((x_rows @ exact_coef - y) ** 2))
    noise = NoiseSource.from_seed(args.seed)
    out = []
    t0 = time.perf_counter()
    for epsilon in epsilons:
        for kind in ("gaussian", "wishart", "jl"):
            cov, angle, excess = [], [], []
            for r in range(repeats):
                result = raw_release(kind, gram, epsilon, args.delta, noise, f"{kind}-{epsilon}-{r}")
                c = result.debiased[:-1, :-1]
                cov.append(float(np.linalg.norm(c - feats, 2) / np.linalg.norm(feats, 2)))
                angle.append(sin2(np.linalg.eigh(psd_projection(c))[1][:, -1], top))
                coef = result.regression()  # the default ridge
                excess.append(float(np.mean((x_rows @ coef - y) ** 2)) - best)
            out.append({"epsilon": epsilon, "release": kind, "cov_spectral_err": median(cov),
                        "pca_sin2": median(angle), "regression_excess_mse": median(excess)})
    seconds = time.perf_counter() - t0
    text = table(out, ["epsilon", "release", "cov_spectral_err", "pca_sin2", "regression_excess_mse"])
    space = histogram_space([100, 400] if args.quick else [100, 400, 1600])
    text += ("\n\nSpectral histogram space (d = 10, rank-3 unit rows, eta = 0.2, lambda = 171, T = 2W):\n\n"
             + table(space, ["W", "max_checkpoints", "bound", "histogram_bytes", "window_rows_bytes"]))
    reg = regression_table(epsilons, repeats, args.delta, args.seed)
    text += ("\n\nRegression on planted designs (7 days x 3,000 rows; coefficient error relative to the exact window "
             "least squares, predicting zero = 1; excess RSS over the exact fit as a share of predicting zero's; "
             "reliable: releases whose diagnostics say so):\n\n"
             + table(reg, ["design", "epsilon", "release", "ridge", "coef_rel_err", "excess_rss_vs_zero",
                           "reliable"]))
    header = (f"# Window releases on w8a: W = {rows} rows x 300 features (+ label), delta = {args.delta:g}, "
              f"median of {repeats} draws\n\nexact least-squares MSE {best:.4g}; {seconds:.1f} s\n\n")
    print(header + text)
    os.makedirs(RESULTS, exist_ok=True)
    suffix = "_quick" if args.quick else ""
    with open(os.path.join(RESULTS, f"window{suffix}.md"), "w") as fh:
        fh.write(header + text + "\n")
    _plot(out, epsilons, rows, suffix)
    # The headline against the baseline (the Gaussian release, Analyze Gauss on the window) at the largest epsilon
    wishart, gaussian = ({o["release"]: o for o in out if o["epsilon"] == epsilons[-1]}[k] for k in ("wishart",
                                                                                                        "gaussian"))
    print(f"ratio {wishart['cov_spectral_err'] / gaussian['cov_spectral_err']:.3f}  (Wishart / Gaussian covariance "
          f"error at epsilon {epsilons[-1]:g})")


def _plot(out: list[dict], epsilons: list[float], rows: int, suffix: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for ax, metric in zip(axes, ("cov_spectral_err", "pca_sin2", "regression_excess_mse")):
        for kind in ("gaussian", "wishart", "jl"):
            pts = [(o["epsilon"], max(o[metric], 1e-8)) for o in out if o["release"] == kind]
            ax.loglog(*zip(*pts), marker="o", label=kind)
        ax.set_xlabel("epsilon")
        ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
        ax.minorticks_off()
        ax.set_title(metric)
    axes[0].legend()
    fig.suptitle(f"window releases vs the exact window answer (w8a, W={rows})")
    fig.tight_layout()
    fig.savefig(os.path.join(RESULTS, f"window_error{suffix}.png"), dpi=110)


if __name__ == "__main__":
    main()
