"""Neighbouring datasets for block adaptive power iteration, in-process and through a LocalCluster.

As for the sequential version (``test_adaptive_power.py``), the data is crafted around the first iterate X₀ (d×4:
k = 2 and two extra columns),
drawn first by the auditing source (``block/init``): ``H`` rows of score ≈ 0.77 (all in partition 0, filtered)
and ``N_LOW`` rows of score ≈ 2^-10.1 (kept), so the AboveThreshold step answers grid index 40 (θ = 2^-10) on
both neighbours. A row ``norm·(α·x + √(1−α²)·w)`` with ``x`` the first column of X₀ and ``w`` orthogonal to both
columns has ``‖X₀ᵀa‖ = norm·α`` and score ``norm²·α``.

Neighbours add one row to partition 0: a row on the filter boundary (kept: the block release's pre-noise value
moves by exactly θ in Frobenius norm), a row just above it (filtered), a zero row, a row of huge norm that clipping
brings to the boundary. The explained-variance release moves by at most its sensitivity √3, and the release of
the clipped fraction (first: the bound is fixed) by exactly its sensitivity √2 when the added row is clipped (the
huge one: both counts move by 1), by 1 of √2 otherwise (the row count only).

False-failure rate: as in ``test_adaptive_power.py``, below 1e-11 per run (the SVT decision needs a Laplace draw
beyond 30 of its scales to differ). Everything else is deterministic.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import pytest

from dppca_dask import pca
from dppca_dask.accounting import event_to_json, summarise_events
from dppca_dask.methods.adaptive_power.block import _orthonormal
from dppca_dask.methods.adaptive_power.block_plan import BLOCK_POWER, DEFAULT_OVERSAMPLE
from dppca_dask.api import plan_release
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.mechanisms.testing import AuditingNoiseSource
from privacy_harness import assert_within_sensitivity, traced_neighbour_runs

D = 50
K = 2
WIDTH = K + DEFAULT_OVERSAMPLE  # the block carries k + p columns
H = 300
N_LOW = 5_500
OTHER_PARTS = 15
PART_ROWS = (N_LOW - 1_000) // OTHER_PARTS
GRID = ThresholdGrid.for_bound(1.0)
INDEX = 40
THETA = float(GRID.thetas[INDEX])
PARAMS: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-6, "beta": 1e-6, "progress": False, "mechanism": BLOCK_POWER,
                          "n_components": K}


def _x0(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rng.normal(0.0, 1.0, 2)  # the first draw of the source: the clipped fraction's (the bound is fixed)
    return _orthonormal(rng.normal(0.0, 1.0, (D, WIDTH)))  # the second: the start


def _row(x0: np.ndarray, rng: np.random.Generator, norm: float, score: float) -> np.ndarray:
    w = rng.standard_normal(D)
    w -= x0 @ (x0.T @ w)
    w /= np.linalg.norm(w)
    alpha = score / norm**2
    return norm * (alpha * x0[:, 0] + np.sqrt(1.0 - alpha**2) * w)


def _dataset(seed: int) -> tuple[np.ndarray, np.ndarray]:
    x0, rng = _x0(seed), np.random.default_rng(seed + 1)
    high = np.array([_row(x0, rng, 1.0, 2 ** (-1.5 / 4)) for _ in range(H)])
    low = np.array([_row(x0, rng, 0.5, 2 ** (-40.5 / 4)) for _ in range(N_LOW)])
    return np.vstack([high, low]), x0


def _neighbour(base: np.ndarray, x0: np.ndarray, kind: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 2)
    if kind == "boundary":
        extra = np.sqrt(THETA * (1 - 1e-12)) * x0[:, 0]
    elif kind == "above-boundary":
        extra = _row(x0, rng, 1.0, THETA * 1.01)
    elif kind == "zero":
        extra = np.zeros(D)
    elif kind == "huge-norm":
        extra = 1e6 * _row(x0, rng, 1.0, THETA * 0.999)
    elif kind == "maximal":  # norm c, in the span of X₀: the largest possible score, filtered
        extra = x0[:, 1].copy()
    else:
        raise AssertionError(kind)
    return np.vstack([base[:H], extra[None, :], base[H:]])


def _dask(matrix: np.ndarray) -> da.Array:
    first = matrix.shape[0] - OTHER_PARTS * PART_ROWS
    return da.from_array(matrix, chunks=((first,) + (PART_ROWS,) * OTHER_PARTS, (D,)), name="input-matrix")


@pytest.mark.parametrize("kind", ["boundary", "above-boundary", "zero", "huge-norm", "maximal"])
def test_pre_noise_values_move_within_the_sensitivity_in_process(seed: int, kind: str) -> None:
    base, x0 = _dataset(seed)
    other = _neighbour(base, x0, kind, seed)
    a, b = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    ra = pca(_dask(base), n_iter=1, client="local", noise=a, **PARAMS)
    rb = pca(_dask(other), n_iter=1, client="local", noise=b, **PARAMS)
    assert ra.thresholds[0, 0] == rb.thresholds[0, 0] == THETA
    clipped, svt, gauss, variance = assert_within_sensitivity(a.records, b.records)
    assert a.records[0].release == "clipped-fraction" and a.records[0].exact.shape == (2,)
    # the maximal row has norm c up to rounding: counted as clipped or not, either way within the sensitivity
    expected = (1.0,) if kind == "huge-norm" else (1.0, np.sqrt(0.5)) if kind == "maximal" else (np.sqrt(0.5),)
    assert any(clipped == pytest.approx(e, rel=1e-12) for e in expected)
    assert svt == (0.0 if kind == "zero" else 1.0)
    if kind in ("boundary", "huge-norm"):
        assert gauss > 0.998  # the Frobenius sensitivity θ is attained
    else:
        assert gauss < 1e-9  # filtered or zero: contributes nothing
    assert variance <= 1.0
    calibration = ra.provenance["calibration"]
    (clipped_record, _, gauss_record, variance_record) = a.records
    assert clipped_record.scale == pytest.approx(calibration["clipped_noise_multiplier"] * np.sqrt(2.0), rel=1e-15)
    assert gauss_record.sensitivity == THETA and gauss_record.exact.shape == (D, WIDTH)
    assert gauss_record.scale == pytest.approx(calibration["noise_multiplier"] * THETA, rel=1e-15)
    assert variance_record.sensitivity == pytest.approx(np.sqrt(3.0), rel=1e-15)
    assert variance_record.scale == pytest.approx(calibration["variance_noise_multiplier"] * np.sqrt(3.0), rel=1e-15)


def test_the_maximal_row_moves_the_variance_release_by_its_sensitivity_bound(seed: int) -> None:
    """A row of norm c lying on the released components moves (projected/c², total/c², n) by (≈1, 1, 1)."""
    base, x0 = _dataset(seed)
    a, b = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    ra = pca(_dask(base), n_iter=1, client="local", noise=a, **PARAMS)
    top = np.asarray(ra.components[0])
    other = np.vstack([base[:H], top[None, :], base[H:]])  # norm 1 = c, all its energy on one component
    pca(_dask(other), n_iter=1, client="local", noise=b, **{**PARAMS})
    # the iterations' releases differ (the added row is filtered or kept depending on X₀), the last one is bounded
    variance = assert_within_sensitivity(a.records[-1:], b.records[-1:])[0]
    assert variance > (np.sqrt(2.0) / np.sqrt(3.0)) * 0.99  # total and count move by 1 each, the projections too


def traced_neighbours(client: Any, caplog: pytest.LogCaptureFixture, seed: int, kind: str,
                      make_noise: Any, **params: Any) -> list[tuple[Any, Any, list[str], list[str]]]:
    """``pca`` on the dataset and its ``kind`` neighbour through ``client``, traced
    (:func:`privacy_harness.traced_neighbour_runs`)."""
    base, x0 = _dataset(seed)
    return traced_neighbour_runs(
        client, caplog, (base, _neighbour(base, x0, kind, seed)),
        lambda matrix, noise: pca(_dask(matrix), client=client, noise=noise, persist=False, **params), make_noise)


@pytest.mark.parametrize("kind", ["boundary", "huge-norm"])
def test_task_names_logs_and_fields_match_on_a_local_cluster(local_client: Any, seed: int, kind: str,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    runs = traced_neighbours(local_client, caplog, seed, kind, lambda: AuditingNoiseSource(seed), n_iter=2, **PARAMS)
    (ra, a, tasks_a, logs_a), (rb, b, tasks_b, logs_b) = runs
    assert_within_sensitivity(a.records[:3], b.records[:3])
    assert tasks_a == tasks_b and not any("blockfilteredsum" in t for t in tasks_a)
    # the clipped fraction's count, two block steps and the variance
    assert sum(1 for t in tasks_a if "-map-" in t) == 4 * (OTHER_PARTS + 1)
    assert [(r.release, r.kind, r.exact.shape) for r in a.records] == [
        (r.release, r.kind, r.exact.shape) for r in b.records]
    assert logs_a == logs_b and any("(BlockPowerStep) over 16 partitions" in line for line in logs_a)
    da_, db_ = ra.to_dict(), rb.to_dict()
    assert sorted(da_) == sorted(db_) and da_["privacy"] == db_["privacy"]
    plan = plan_release(D, epsilon=1.0, delta=1e-6, n_iter=2, beta=1e-6, mechanism=BLOCK_POWER, n_components=K)
    assert ra.privacy.events == tuple(event_to_json(e) for e in summarise_events(plan.events)) == rb.privacy.events
    assert ra.privacy.epsilon <= 1.0


def test_block_run_refuses_to_resume_from_another_state(seed: int) -> None:
    from dppca_dask.errors import InvalidParameterError

    base, _ = _dataset(seed)
    noise = AuditingNoiseSource(seed)
    with pytest.raises(InvalidParameterError, match="resumes from the BlockPowerState"):
        pca(_dask(base[:1000]), n_iter=1, client="local", noise=noise, resume=object(), **PARAMS)
