"""Window regression with the default ridge: never worse than predicting zero, close to the exact window fit where
the design is well conditioned, and diagnostics that say which (issue 33, item 4)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.errors import InvalidParameterError
from dppca_dask.ingest import ingest
from dppca_dask.mechanisms.testing import ZeroNoiseSource
from dppca_dask.api import window
from dppca_dask.methods.window.tasks import regression, regression_diagnostics
from dppca_dask.storage import append_partition
from window_data import day

DAYS, ROWS = 7, 3000


def _design(kind: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``DAYS × ROWS`` rows ``(x, y)`` (:func:`~dppca_dask.datasets.regression_design`): ``"ill"`` is d = 100, rank 5
    plus small isotropic noise (eigenvalues of the window Gram from about 18 to 1,650, below the ε = 1 noise's scale
    of about 85 in 95 directions) with a random β; ``"well"`` is d = 20, isotropic (eigenvalues about 500)."""
    from dppca_dask.datasets import regression_design

    return regression_design(kind, DAYS * ROWS, seed=seed)


def _store(path, x: np.ndarray, y: np.ndarray):  # noqa: ANN001, ANN202
    import zarr

    store = ingest(sp.csr_array(x[:ROWS]), path, n_features=x.shape[1], timestamp="2026-11-01")
    zarr.open_group(store.path, mode="r+").create_array("labels", shape=(ROWS,), dtype=np.float64, chunks=(4096,))
    zarr.consolidate_metadata(store.path)  # a node added with zarr: consolidated again
    zarr.open_group(store.path, mode="r+")["labels"][:] = y[:ROWS]
    for n in range(2, len(x) // ROWS + 1):
        rows = slice((n - 1) * ROWS, n * ROWS)
        store = append_partition(store.path, sp.csr_array(x[rows]), timestamp=day(n), labels=y[rows])
    return store


def _exact_fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The window's clipped rows (‖(x, y)‖ ≤ 1) and their exact least squares."""
    z = np.hstack([x, y[:, None]])
    z /= np.maximum(np.linalg.norm(z, axis=1), 1.0)[:, None]
    return z[:, :-1], z[:, -1], np.linalg.lstsq(z[:, :-1], z[:, -1], rcond=None)[0]


@pytest.mark.parametrize(("kind", "bound"), [("ill", 1.0), ("well", 0.3)])
def test_window_regression_at_epsilon_1_is_never_worse_than_zero(tmp_path, kind, bound):
    """Seven stamped days of 3,000 rows at ε = 1: the median relative coefficient error to the exact window least
    squares over five releases is at most 1 (predicting zero's) on the ill-conditioned design and at most 0.3 on
    the well-conditioned one; the excess RSS stays below predicting zero's, and the diagnostics call the
    ill-conditioned fit unreliable and the well-conditioned one reliable. (Without the ridge the ill-conditioned
    error is about 3 and the excess RSS above zero's.)"""
    x, y = _design(kind)
    store = _store(tmp_path / "store", x, y)
    rows, label, exact = _exact_fit(x, y)
    rss = lambda coef: float(np.sum((rows @ coef - label) ** 2))  # noqa: E731
    errors, excess, reliable, unridged = [], [], [], []
    for seed in range(5):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # seeded: not private
            result = window(store, last="7D", epsilon=1.0, delta=1e-6, labels=True, client="local", seed=seed)
        coef = result.regression()
        errors.append(np.linalg.norm(coef - exact) / np.linalg.norm(exact))
        excess.append((rss(coef) - rss(exact)) / (rss(np.zeros_like(exact)) - rss(exact)))
        reliable.append(result.regression_diagnostics()["reliable"])
        unridged.append(np.linalg.norm(result.regression(ridge=0) - exact) / np.linalg.norm(exact))
    assert result.window.n_partitions == DAYS
    assert np.median(errors) <= bound, errors
    assert max(excess) < 1.0, excess
    assert reliable == [kind == "well"] * 5
    if kind == "ill":
        assert np.median(unridged) > 1.0  # what the default ridge prevents


def test_regression_ridge_and_diagnostics_from_public_values(tmp_path):
    """The auto ridge is the release's noise scale (Gaussian: 2·s·√d; Wishart: its noise mean c²τ, Thm 8) and
    depends on public values only; ridge=0 without noise is the exact fit; bad ridges are refused."""
    x, y = _design("well")
    store = _store(tmp_path / "store", x[: 2 * ROWS], y[: 2 * ROWS])
    zero = window(store, last="2D", epsilon=1.0, delta=1e-6, labels=True, client="local", noise=ZeroNoiseSource())
    cal = zero.calibration
    d = x.shape[1]
    assert zero.regression_ridge() == pytest.approx(2 * cal["noise_multiplier"] * cal["l2_sensitivity"] * np.sqrt(d))
    rows, label, exact = _exact_fit(x[: 2 * ROWS], y[: 2 * ROWS])
    assert np.allclose(zero.regression(ridge=0), exact, atol=1e-8)
    ridged = zero.regression()
    assert np.linalg.norm(ridged) < np.linalg.norm(exact)
    diag = zero.regression_diagnostics()
    assert set(diag) >= {"reliable", "noise_to_signal", "threshold", "rule"}
    assert len(diag["noise_to_signal"]) == d and diag["noise_to_signal"] == sorted(diag["noise_to_signal"])
    assert diag["ridge"] == pytest.approx(zero.regression_ridge()) and 0 <= diag["estimated_relative_error"] <= 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded: not private
        wish = window(store, last="2D", epsilon=1.0, delta=1e-6, labels=True, release="wishart", client="local",
                      seed=3)
    assert wish.regression_ridge() == wish.shift == wish.calibration["tau"]
    # Thm 8: the released (un-debiased) matrix solved as it is
    released = wish.released
    assert np.allclose(wish.regression(), np.linalg.solve(released[:-1, :-1], released[:-1, -1]), atol=1e-8)
    for bad in (-1.0, float("nan"), "big", True):
        with pytest.raises(InvalidParameterError, match="ridge must be"):
            zero.regression(ridge=bad)


def test_regression_diagnostics_without_signal():
    """A released feature block of zeros: every direction is noise, the estimate is 1 and the fit unreliable."""
    diag = regression_diagnostics(np.zeros((4, 4)), ridge=2.0, noise_scale=2.0)
    assert diag["reliable"] is False and diag["estimated_relative_error"] == 1.0
    assert diag["noise_to_signal"] == [1e6] * 3
    assert not np.any(regression(np.zeros((4, 4)), ridge=2.0))


def test_window_cli_regression_prints_ridge_diagnostics_and_a_warning(tmp_path, capsys):
    """``window --task regression``: the JSON has the ridge and the diagnostics; an unreliable fit prints one warning
    line on stderr (JSON or text); ``--ridge 0`` and ``--ridge auto`` are accepted, ``--ridge x`` refused (exit 2)."""
    import json

    from dppca_dask.cli import main

    x, y = _design("ill")
    store = _store(tmp_path / "store", x[: 2 * ROWS], y[: 2 * ROWS])
    argv = ["window", store.path, "--last", "2D", "--task", "regression", "--epsilon", "1", "--delta", "1e-6",
            "--scheduler", "local", "--seed", "1"]
    assert main([*argv, "--json"]) == 0
    out, err = capsys.readouterr()
    obj = json.loads(out)
    assert len(obj["coefficients"]) == 100 and obj["diagnostics"]["reliable"] is False
    assert obj["ridge"] == pytest.approx(obj["diagnostics"]["ridge"]) and obj["ridge"] > 0
    assert len(obj["diagnostics"]["noise_to_signal"]) == 100
    assert "warning: the fit is not reliable" in err
    assert main([*argv, "--ridge", "0"]) == 0
    out, err = capsys.readouterr()
    assert "coefficients: " in out and "ridge 0;" in out and "warning: the fit is not reliable" in err
    assert main([*argv, "--ridge", "auto", "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["ridge"] == pytest.approx(obj["ridge"])
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--ridge", "x"])
    assert exc.value.code == 2


def test_the_regression_designs_are_seeded_checked_and_their_example_runs() -> None:
    import doctest

    from dppca_dask import datasets
    from dppca_dask.errors import InvalidParameterError

    for kind, d in (("ill", 100), ("well", 20)):
        x, y = datasets.regression_design(kind, 50, seed=4)
        assert x.shape == (50, d) and y.shape == (50,)
        again = datasets.regression_design(kind, 50, seed=4)
        assert np.array_equal(x, again[0]) and np.array_equal(y, again[1])
        assert not np.array_equal(x, datasets.regression_design(kind, 50, seed=5)[0])
    with pytest.raises(InvalidParameterError, match="kind must be 'ill' or 'well'; got 'flat'"):
        datasets.regression_design("flat", 10)
    with pytest.raises(InvalidParameterError, match="n_rows must be >= 1; got 0"):
        datasets.regression_design("ill", 0)
    tests = doctest.DocTestFinder(recurse=False).find(datasets.regression_design, "regression_design",
                                                      globs={"regression_design": datasets.regression_design})
    runner = doctest.DocTestRunner()
    for test in tests:
        runner.run(test)
    assert tests[0].examples and runner.failures == 0
