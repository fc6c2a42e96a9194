"""Row-level private tensor power method on Σ x^{⊗3} (beyond the paper): kernels, calibration, recovery."""

from __future__ import annotations

import numpy as np
import pytest

from dppca_dask.errors import CalibrationError, InvalidParameterError
from dppca_dask.kernels import tensor as K
from dppca_dask.mechanisms.testing import AuditingNoiseSource
from dppca_dask.methods.tensor.rows import (
    calibrate_rows,
    filtered_moment,
    private_moment_power_method,
    score_grid,
    score_histogram,
)


def planted_rows(rng, n=4000, d=12):
    q, _ = np.linalg.qr(rng.standard_normal((d, 1)))
    p = 0.1
    a = (1.0 / (p * (1 - p) * (1 - 2 * p))) ** (1 / 3) * ((rng.random((n, 1)) < p) - p)
    x = a @ q.T + 0.3 * rng.choice([-1.0, 1.0], size=(n, d))
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1.0), q[:, 0]


def test_kernels(rng):
    x = rng.standard_normal((50, 6))
    norms = np.linalg.norm(x, axis=1)
    u = rng.standard_normal((6, 3))
    u /= np.linalg.norm(u, axis=0)
    vector, scalar = filtered_moment(x, norms, u, row_norm_bound=1.5, threshold=np.inf)
    ref_vector, ref_scalar = K.moment_partial(x, norms, u, row_norm_bound=1.5)
    np.testing.assert_allclose(vector, ref_vector, atol=1e-12)
    np.testing.assert_allclose(scalar, ref_scalar, atol=1e-12)
    clipped = x * np.minimum(1, 1.5 / norms)[:, None]
    for row in clipped:  # one row moves the block by at most its score, the scalars too
        p = row @ u
        score = np.linalg.norm(row) * np.linalg.norm(p**2)
        assert np.linalg.norm(np.outer(row, p**2)) <= score * (1 + 1e-12)
        assert np.linalg.norm(p**3) <= score * (1 + 1e-12)
        assert score <= 1.5**3 * np.sqrt(3) * (1 + 1e-12)
    grid = score_grid(1.5, 3)
    counts = score_histogram(x, norms, u, row_norm_bound=1.5, grid=grid)
    assert np.all(np.diff(counts) <= 0) and counts[-1] == 0
    kept = filtered_moment(x, norms, u, row_norm_bound=1.5, threshold=grid[10])
    assert np.linalg.norm(kept[0]) < np.linalg.norm(vector)


@pytest.mark.parametrize("filtering", ["fixed", "adaptive"])
def test_recovery_and_report(filtering, seed):
    x, v = planted_rows(np.random.default_rng(seed), n=2000)
    r = private_moment_power_method(x, n_components=1, epsilon=50.0, delta=1e-6, filtering=filtering, n_iter=3,
                                    noise=AuditingNoiseSource(seed))
    # 2000 rows: the empirical moment itself is off by a few percent; adaptive filtering also drops the rows of
    # largest score, which here are the planted spikes carrying the signal (a bias, where the mechanism loses)
    assert abs(r.components[0] @ v) > (0.95 if filtering == "fixed" else 0.85)
    assert r.privacy.epsilon <= 50.0 and r.privacy.neighbouring == "add/remove one row"
    assert r.thresholds.shape == (1, 4)
    if filtering == "fixed":
        assert np.all(r.thresholds == score_grid(1.0, 4)[-1])


def test_calibration():
    fixed = calibrate_rows(epsilon=1.0, delta=1e-6, n_steps=10, epsilon_svt=None)
    adaptive = calibrate_rows(epsilon=1.0, delta=1e-6, n_steps=10, epsilon_svt=0.01)
    assert adaptive > fixed  # the SVT steps take budget from the Gaussians
    with pytest.raises(CalibrationError, match="spend all"):
        calibrate_rows(epsilon=1.0, delta=1e-6, n_steps=10, epsilon_svt=0.1)


def test_bad_input():
    x = np.ones((10, 3))
    for kw, match in [({"filtering": "none"}, "filtering"), ({"row_norm_bound": 0.0}, "row_norm_bound"),
                      ({"svt_share": 1.0}, "svt_share"), ({"epsilon": -1.0}, "epsilon"),
                      ({"seed": 1, "noise": AuditingNoiseSource(1)}, "not both")]:
        args = {"n_components": 1, "epsilon": 1.0, "delta": 1e-6, **kw}
        with pytest.raises(InvalidParameterError, match=match):
            private_moment_power_method(x, **args)
