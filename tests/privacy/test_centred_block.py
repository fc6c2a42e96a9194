"""Neighbouring datasets for the centred block run and the private mean.

Centring at a fixed centre μ (public, or released before the iterations) changes the range of a row, not the
argument: clipped rows ``a'`` (norm ≤ c) centred at μ have norm ``‖a' − μ‖ ≤ c + ‖μ‖``, the grid starts at
``(c + ‖μ‖)²``, and one added row moves the block release by its own contribution (≤ θ), the variance release by
≤ √3 (in units of ``(c + ‖μ‖)²``). The data is crafted as in ``test_block_power.py`` around the first iterate, on
the centred rows ``ã = a − μ`` (no row is clipped); neighbours add a row on the filter boundary, a maximal row
``a' = −c·μ/‖μ‖`` (centred norm exactly ``c + ‖μ‖``: the variance's total moves by exactly 1 unit) and a row of
huge norm. The private mean's release moves by exactly its sensitivity √2 when a row of norm ≥ c is added.

False-failure rate: below 1e-11 per run (a Laplace draw beyond 30 of its scales); the rest is deterministic.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import pytest

from dppca_dask.methods.adaptive_power.block import _orthonormal
from dppca_dask.methods.adaptive_power.block_plan import BLOCK_POWER, DEFAULT_OVERSAMPLE, plan_block_power
from dppca_dask.api import validate_parameters
from dppca_dask.coordinator import LocalExecutor, as_source, run_algorithm
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.mechanisms.testing import AuditingNoiseSource
from privacy_harness import assert_within_sensitivity

D, K, H, N_LOW = 40, 2, 300, 4_000
WIDTH = K + DEFAULT_OVERSAMPLE
RADIUS = 0.2
BOUND = 1.0 + RADIUS
GRID = ThresholdGrid.for_bound(BOUND)
INDEX = 40
THETA = float(GRID.thetas[INDEX])


def _params() -> Any:
    return validate_parameters(mechanism=BLOCK_POWER, epsilon=1.0, delta=1e-6, n_components=K, n_iter=1,
                               row_norm_bound=1.0, svt_share=0.1, beta=1e-6, grid_per_octave=4, grid_octaves=24,
                               calibration="standard", max_dense_dim=4096)


def _mean(seed: int) -> np.ndarray:
    mu = np.random.default_rng(seed + 9).standard_normal(D)
    return RADIUS * mu / np.linalg.norm(mu)


def _centred_row(x0: np.ndarray, rng: np.random.Generator, norm: float, score: float) -> np.ndarray:
    w = rng.standard_normal(D)
    w -= x0 @ (x0.T @ w)
    w /= np.linalg.norm(w)
    alpha = score / norm**2
    return norm * (alpha * x0[:, 0] + np.sqrt(1.0 - alpha**2) * w)


def _dataset(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    rng.normal(0.0, 1.0, 2)  # the first draw of the source: the clipped fraction's (the bound is fixed)
    x0 = _orthonormal(rng.normal(0.0, 1.0, (D, WIDTH)))
    rng, mu = np.random.default_rng(seed + 1), _mean(seed)
    low_score = float(np.sqrt(GRID.thetas[INDEX] * GRID.thetas[INDEX + 1]))
    high = np.array([_centred_row(x0, rng, 0.7, 0.3) for _ in range(H)]) + mu
    low = np.array([_centred_row(x0, rng, 0.5, low_score) for _ in range(N_LOW)]) + mu
    rows = np.vstack([high, low])
    assert np.all(np.linalg.norm(rows, axis=1) <= 1.0)  # no row is clipped: ã = a − μ
    return rows, x0, mu


def _run(matrix: np.ndarray, noise: AuditingNoiseSource, center: Any) -> Any:
    plan = plan_block_power(_params(), D, center=center)
    source = as_source(da.from_array(matrix, chunks=((H + 1_000, *([1_000] * 3), matrix.shape[0] - H - 4_000), (D,))))
    executor = LocalExecutor(source)
    try:
        return run_algorithm(executor, plan.make_run(noise, None, None)), plan
    finally:
        executor.close()


@pytest.mark.parametrize("kind", ["boundary", "maximal", "huge-norm"])
def test_centred_release_moves_within_the_sensitivity(seed: int, kind: str) -> None:
    base, x0, mu = _dataset(seed)
    if kind == "boundary":
        extra = np.sqrt(THETA * (1 - 1e-12)) * x0[:, 0] + mu  # centred: score a hair below θ, kept
    elif kind == "maximal":
        extra = -mu / RADIUS  # norm c, centred norm c + ‖μ‖
    else:
        extra = 1e6 * (np.sqrt(THETA * 0.999) * x0[:, 0] + mu)
    other = np.vstack([base[:H], extra[None, :], base[H:]])
    a, b = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    out_a, plan = _run(base, a, mu)
    out_b, _ = _run(other, b, mu)
    assert out_a.thresholds[0, 0] == out_b.thresholds[0, 0] == THETA
    assert plan.calibration["centred_bound"] == pytest.approx(BOUND, rel=1e-15)
    clipped, svt, gauss, variance = assert_within_sensitivity(a.records, b.records)
    assert clipped == pytest.approx(1.0 if kind == "huge-norm" else np.sqrt(0.5), rel=1e-12)  # (clipped, n)
    if kind == "boundary":
        assert gauss > 0.998  # the Frobenius sensitivity θ is attained by a centred row
    if kind == "maximal":
        # the total moves by (c + ‖μ‖)²/(c + ‖μ‖)² = 1 unit and the count by 1: at least √2 of the √3
        assert variance > np.sqrt(2.0 / 3.0) * (1 - 1e-9)
    record = a.records[-1]
    assert record.sensitivity == pytest.approx(np.sqrt(3.0), rel=1e-15)
    np.testing.assert_array_equal(out_a.mean, mu)


@pytest.mark.parametrize("norm", [1.0, 1e6])
def test_private_mean_moves_by_its_sensitivity(seed: int, norm: float) -> None:
    base, x0, _mu = _dataset(seed)
    extra = norm * x0[:, 1]
    other = np.vstack([base[:H], extra[None, :], base[H:]])
    a, b = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    out_a, plan = _run(base, a, "private")
    _run(other, b, "private")
    mean_a, mean_b = a.records[1], b.records[1]  # after the clipped fraction
    assert mean_a.release == "mean" and mean_a.exact.shape == (D + 1,)
    moved = assert_within_sensitivity([mean_a], [mean_b])[0]
    assert moved == pytest.approx(1.0, rel=1e-9)  # (c/c, 1): exactly √2
    assert mean_a.scale == pytest.approx(plan.calibration["mean_noise_multiplier"] * np.sqrt(2.0), rel=1e-15)
    assert plan.calibration["centred_bound"] == 2.0 and plan.calibration["grid"]["top"] == 4.0
    assert np.linalg.norm(out_a.mean) <= 1.0 + 1e-12  # projected onto the ball of radius c


def _huge_rows() -> np.ndarray:
    # rows of finite norm (validation accepts them) whose products with the centre or the iterate overflow float64
    # before the clip factor applies: one with aᵀμ = +inf (its centred norm fell to 0, so it was never filtered
    # although its contribution is up to (c + ‖μ‖)²), one with aᵀμ = −inf (centred norm inf), and a plain row
    block = np.zeros((4, 3))
    block[0, :2] = 1e308
    block[1, :2] = [-1e308, -1e308]
    block[2] = [0.2, -0.1, 0.3]
    block[3, 0] = 1.7e308
    return block


@pytest.mark.parametrize("sparse", [False, True])
def test_rows_near_the_float64_limit_are_their_clipped_rows(sparse: bool) -> None:
    # the kernel must see a row exactly as its clipped copy f·a (norm c): same centred norms, bins and sums, no
    # overflow warning (its presence would tell the neighbours apart); before, a row with aᵀμ = inf had centred
    # norm 0 and stayed in every filtered product whatever the threshold
    import warnings

    import scipy.sparse as sp

    from dppca_dask.kernels import block as B
    from dppca_dask.storage import row_norms_of

    bound, mean = 1.0, np.array([1.0, 1.0, 0.0])
    grid = ThresholdGrid.for_bound(bound + float(np.linalg.norm(mean)))
    raw = _huge_rows()
    norms = row_norms_of(raw)
    clipped = raw * np.minimum(1.0, bound / norms)[:, None]
    x = _orthonormal(np.random.default_rng(3).standard_normal((3, 2)))
    wrap = sp.csr_array if sparse else np.asarray
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = B.block_partial(wrap(raw), norms, x, partition=0, row_norm_bound=bound, grid=grid, top_m=10,
                              mean=mean)
        cnorms = B.centred_norms(wrap(raw), norms, mean, bound)
        variance = B.variance_partial(wrap(raw), norms, x.T, row_norm_bound=bound, mean=mean)
    want = B.block_partial(clipped, row_norms_of(clipped), x, partition=0, row_norm_bound=bound, grid=grid,
                           top_m=10, mean=mean)
    np.testing.assert_allclose(cnorms, np.linalg.norm(clipped - mean, axis=1), rtol=1e-9)
    np.testing.assert_array_equal(got.histogram, want.histogram)
    np.testing.assert_allclose(got.full_sum, want.full_sum, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(got.square_sum, want.square_sum, rtol=1e-9)
    assert np.all(np.isfinite(variance.projected)) and np.isfinite(variance.total)


@pytest.mark.parametrize("bound", [2.0, "auto"])
def test_a_given_centre_and_a_row_near_the_float64_limit_end_to_end(bound: Any) -> None:
    # pca with a public centre of norm √6 on a dataset with a row whose product with it overflows, and on its
    # neighbour without the row: both complete with the same releases, each moving within its sensitivity, and
    # no RuntimeWarning on either (before, the row's run warned "overflow encountered in matmul")
    import warnings

    from dppca_dask import pca

    rng = np.random.default_rng(0)
    base = rng.standard_normal((300, 6)) * 0.3
    base[5] = 0.0
    base[5, :2] = 1.2e308
    neighbour = np.delete(base, 5, axis=0)  # the row removed
    runs = []
    for data in (base, neighbour):
        noise = AuditingNoiseSource(1)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            result = pca(data, epsilon=1.0, delta=1e-6, n_components=2, n_iter=3, mechanism="adaptive-power-block",
                         center=np.ones(6), row_norm_bound=bound, client="local", progress=False, noise=noise)
        assert np.all(np.isfinite(result.components)) and np.all(np.isfinite(result.explained_variance))
        runs.append(noise.records)
    assert_within_sensitivity(*runs)


@pytest.mark.parametrize("mechanism", ["adaptive-power-block", "analyze-gauss", "auto"])
def test_a_given_centre_beyond_the_bound_range_is_refused_before_any_release(mechanism: str) -> None:
    # with ‖μ‖ = 1e154, (c + ‖μ‖)² = 1e308 is finite but sums over two centred rows overflow: the block run
    # failed (inf products, an overflow warning) on three rows and not on the neighbour of one row, and Analyze
    # Gauss refused its noise scale only at the release. Refused from the public centre, before anything is read.
    from dppca_dask import pca
    from dppca_dask.errors import InvalidParameterError

    rng = np.random.default_rng(0)
    base = rng.standard_normal((3, 4)) * 0.3
    for data in (base, base[:1]):
        noise = AuditingNoiseSource(1)
        with pytest.raises(InvalidParameterError, match="a given center must have norm at most 1e"):
            pca(data, epsilon=1.0, delta=1e-6, n_components=1, n_iter=2, client="local", progress=False, noise=noise,
                mechanism=mechanism, center=np.full(4, 0.5e154), row_norm_bound=1.0)
        assert noise.records == []
    # the largest allowed centre runs (its sums stay finite for any realistic number of rows)
    result = pca(base, epsilon=1.0, delta=1e-6, n_components=1, n_iter=2, client="local", progress=False,
                 noise=AuditingNoiseSource(1), mechanism=mechanism, center=np.full(4, 0.5e100), row_norm_bound=1.0)
    assert np.all(np.isfinite(result.components))
