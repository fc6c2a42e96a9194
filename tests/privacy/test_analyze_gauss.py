"""Neighbouring datasets for Analyze Gauss (DTTZ14), in-process and through a LocalCluster.

The release is the upper triangle of ``A'ᵀA'`` (rows clipped to c) plus Gaussian noise of std ``m·c²``. Adding
one row a moves it by the upper triangle of ``a'a'ᵀ``, of L2 norm ``sqrt((‖a'‖⁴ + Σ a'_i⁴)/2) ≤ c²``, with
equality for a row of norm c on one coordinate. Deterministic: no statistical assertion.
"""

from __future__ import annotations

from typing import Any

import dask.array as da
import numpy as np
import pytest

from dppca_dask import pca
from dppca_dask.accounting import event_to_json, summarise_events
from dppca_dask.api import plan_release
from dppca_dask.mechanisms.testing import AuditingNoiseSource
from privacy_harness import assert_within_sensitivity, traced_neighbour_runs

D = 20
PARAMS: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-6, "mechanism": "analyze-gauss", "progress": False}


def _base(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((3_000, D))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True) * rng.uniform(0.1, 3.0, (3_000, 1))


def _with(base: np.ndarray, extra: np.ndarray) -> np.ndarray:
    return np.vstack([base[:100], extra[None, :], base[100:]])


def _dask(matrix: np.ndarray) -> da.Array:
    first = matrix.shape[0] - 4 * 700
    return da.from_array(matrix, chunks=((first,) + (700,) * 4, (D,)), name="input-matrix")


def _extra(kind: str, bound: float) -> np.ndarray:
    row = np.zeros(D)
    if kind == "one-coordinate-max-norm":  # the worst case: ‖upper(aaᵀ)‖ = c² exactly
        row[3] = bound
    elif kind == "huge-norm":  # clipped to c on one coordinate: also the worst case
        row[5] = -1e9
    elif kind == "spread":  # norm c spread evenly: sqrt((c⁴ + c⁴/D)/2)
        row[:] = bound / np.sqrt(D)
    return row  # "zero": nothing


@pytest.mark.parametrize(("kind", "ratio"), [
    ("one-coordinate-max-norm", 1.0),
    ("huge-norm", 1.0),
    ("spread", np.sqrt((1 + 1 / D) / 2)),
    ("zero", 0.0),
])
@pytest.mark.parametrize("bound", [1.0, 2.5])
def test_pre_noise_values_move_within_the_sensitivity(seed: int, kind: str, ratio: float, bound: float) -> None:
    base = _base(seed)
    a, b = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    result = pca(_dask(base), client="local", noise=a, row_norm_bound=bound, **PARAMS)
    pca(_dask(_with(base, _extra(kind, bound))), client="local", noise=b, row_norm_bound=bound, **PARAMS)
    (moved,) = assert_within_sensitivity(a.records, b.records)
    assert moved == pytest.approx(ratio, abs=1e-9)
    (record,) = a.records
    m = result.provenance["calibration"]["noise_multiplier"]
    assert record.sensitivity == bound**2 and record.scale == pytest.approx(m * bound**2, rel=1e-15)


def test_tasks_logs_fields_and_events_match_on_a_local_cluster(
    local_client: Any, seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    base = _base(seed)
    runs = traced_neighbour_runs(
        local_client, caplog, (base, _with(base, _extra("one-coordinate-max-norm", 1.0))),
        lambda matrix, noise: pca(_dask(matrix), client=local_client, noise=noise, persist=False, **PARAMS),
        lambda: AuditingNoiseSource(seed), mask_theta=False)
    (ra, a, tasks_a, logs_a), (rb, b, tasks_b, logs_b) = runs
    assert_within_sensitivity(a.records, b.records)
    assert tasks_a == tasks_b and sum(1 for t in tasks_a if "-map-" in t) == 5
    assert logs_a == logs_b and logs_a
    assert sorted(ra.to_dict()) == sorted(rb.to_dict()) and "timings" not in ra.to_dict()
    assert ra.privacy.to_dict() == rb.privacy.to_dict()
    plan = plan_release(D, mechanism="analyze-gauss", epsilon=1.0, delta=1e-6)
    assert ra.privacy.events == tuple(event_to_json(e) for e in summarise_events(plan.events))


@pytest.mark.parametrize("bound", [1.0, 2.5])
def test_replace_one_moves_by_at_most_sqrt2_c_squared_and_the_report_says_so(seed: int, bound: float) -> None:
    """Replacing a row (both of norm c, on different coordinates: the worst case) moves the release by √2·c²,
    and the report's replace-one figure is the Gaussian of multiplier m/√2 (closed form), not m/2."""
    from dppca_dask.accounting import gaussian_epsilon

    base = _base(seed)
    first, second = base.copy(), base.copy()
    first[100] = 0.0
    first[100, 1] = bound
    second[100] = 0.0
    second[100, 2] = bound
    a, b = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    result = pca(_dask(first), client="local", noise=a, row_norm_bound=bound, **PARAMS)
    pca(_dask(second), client="local", noise=b, row_norm_bound=bound, **PARAMS)
    moved = float(np.linalg.norm(a.records[0].exact - b.records[0].exact))
    assert moved == pytest.approx(np.sqrt(2) * bound**2, rel=1e-12)
    m = result.provenance["calibration"]["noise_multiplier"]
    group = result.privacy.group_privacy
    assert group["neighbouring"] == "replace one row"
    assert group["epsilon"] == pytest.approx(gaussian_epsilon(m / np.sqrt(2), 1e-6), rel=1e-9)
    assert group["epsilon"] < gaussian_epsilon(m / 2, 1e-6)  # tighter than group privacy
