"""Neighbouring datasets for adaptive private power iteration (seed 004), in-process and through a LocalCluster.

The data is crafted around the first iterate x₀, which the auditing source draws first (``component-0/init``), so
its scores are known before the run: ``h`` rows of score ≈ 0.77 (all in partition 0, filtered), ``n_low`` rows of
score ≈ 2^-10.1 (kept), and the AboveThreshold step answers grid index 40 (θ = 2^-10) on both neighbours.

Neighbours add one row to partition 0: a row exactly on the filter boundary (score θ, kept: the Gaussian's
pre-noise value moves by exactly θ), a row just above it (filtered: one count moves by 1), one more filtered row
in the partition that already holds all filtered rows, a zero row, and a row of huge norm that clipping brings
to the boundary.

False-failure rate: the assertions that need both neighbours to take the same SVT decision hold unless some
Laplace noise exceeds 30 of its scales (cut-off ``6·ln(1/β)/ε_svt`` with β = 1e-6 is ≥ 31 scales above ``h``, and
``n_low`` is more than 60 scales above it): below 1e-11 per run. Everything else is deterministic.
"""

from __future__ import annotations

import json
from typing import Any

import dask.array as da
import numpy as np
import pytest

from dppca_dask import pca
from dppca_dask.accounting import event_to_json, summarise_events
from dppca_dask.coordinator.requests import PowerStep
from dppca_dask.api import plan_release
from dppca_dask.coordinator.driver import _step_plan
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.mechanisms.testing import AuditingNoiseSource
from privacy_harness import assert_within_sensitivity, traced_neighbour_runs

D = 50
H = 300  # filtered rows, all in partition 0
N_LOW = 5_500
OTHER_PARTS = 15
PART_ROWS = (N_LOW - 1_000) // OTHER_PARTS  # 300; partition 0 holds the H filtered rows and 1,000 low rows
GRID = ThresholdGrid.for_bound(1.0)
INDEX = 40  # the released grid index on both neighbours
THETA = float(GRID.thetas[INDEX])
PARAMS: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-6, "beta": 1e-6, "progress": False,
                          "mechanism": "adaptive-power"}


def _x0(seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(0.0, 1.0, D)  # the first draw of AuditingNoiseSource(seed)
    return x / np.linalg.norm(x)


def _row(x0: np.ndarray, rng: np.random.Generator, norm: float, score: float) -> np.ndarray:
    """A row of the given norm whose score ‖a‖·|⟨a, x₀⟩| at x₀ is ``score``."""
    w = rng.standard_normal(D)
    w -= x0 * (w @ x0)
    w /= np.linalg.norm(w)
    alpha = score / norm**2  # cosine between the row and x₀
    return norm * (alpha * x0 + np.sqrt(1.0 - alpha**2) * w)


def _dataset(seed: int) -> tuple[np.ndarray, np.ndarray]:
    x0, rng = _x0(seed), np.random.default_rng(seed + 1)
    high = np.array([_row(x0, rng, 1.0, 2 ** (-1.5 / 4)) for _ in range(H)])  # bin 2
    low = np.array([_row(x0, rng, 0.5, 2 ** (-40.5 / 4)) for _ in range(N_LOW)])  # bin 41
    return np.vstack([high, low]), x0


def _neighbour(base: np.ndarray, x0: np.ndarray, kind: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 2)
    if kind == "boundary":  # kept, contributes a(aᵀx₀) of norm exactly θ
        extra = np.sqrt(THETA * (1 - 1e-12)) * x0  # (a hair below θ, so rounding cannot filter it)
    elif kind == "above-boundary":  # filtered at θ: one more filtered row
        extra = _row(x0, rng, 1.0, THETA * 1.01)
    elif kind == "filtered-same-partition":
        extra = _row(x0, rng, 1.0, 2 ** (-1.5 / 4))
    elif kind == "zero":
        extra = np.zeros(D)
    elif kind == "huge-norm":  # clipped to norm 1, its score then just below θ
        extra = 1e6 * _row(x0, rng, 1.0, THETA * 0.999)
    else:
        raise AssertionError(kind)
    return np.vstack([base[:H], extra[None, :], base[H:]])


def _dask(matrix: np.ndarray) -> da.Array:
    first = matrix.shape[0] - OTHER_PARTS * PART_ROWS
    # a fixed name: dask would otherwise name the array by a hash of its content, and that hash would be in the
    # task names of the input's own tasks (the user's naming, not the coordinator's)
    return da.from_array(matrix, chunks=((first,) + (PART_ROWS,) * OTHER_PARTS, (D,)), name="input-matrix")


NEIGHBOURS = ["boundary", "above-boundary", "filtered-same-partition", "zero", "huge-norm"]


@pytest.mark.parametrize("kind", NEIGHBOURS)
def test_pre_noise_values_move_within_the_sensitivity_in_process(seed: int, kind: str) -> None:
    base, x0 = _dataset(seed)
    other = _neighbour(base, x0, kind, seed)
    a, b = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    ra = pca(_dask(base), n_iter=1, client="local", noise=a, **PARAMS)
    rb = pca(_dask(other), n_iter=1, client="local", noise=b, **PARAMS)
    assert ra.thresholds[0, 0] == rb.thresholds[0, 0] == THETA  # the crafted decision on both
    ratios = assert_within_sensitivity(a.records, b.records)
    svt, gauss = ratios
    # each count moves by at most 1; some count moves by exactly 1 unless the extra row has score 0 (a row is
    # filtered at every grid value below its score)
    assert svt == (0.0 if kind == "zero" else 1.0)
    if kind in ("boundary", "huge-norm"):
        assert gauss > 0.998  # the worst case: the sensitivity θ is attained
    elif kind == "zero" or kind.startswith(("above", "filtered")):
        assert gauss < 1e-9  # a filtered or zero row contributes nothing
    calibration = ra.provenance["calibration"]
    m, eps_svt = calibration["noise_multiplier"], calibration["epsilon_svt"]
    (svt_record, gauss_record) = a.records
    assert svt_record.sensitivity == 1.0 and svt_record.scale == (2 / eps_svt, 2 / eps_svt)
    assert gauss_record.sensitivity == THETA and gauss_record.scale == pytest.approx(m * THETA, rel=1e-15)


def test_every_partition_gets_the_whole_row_budget() -> None:
    step = PowerStep(x=np.ones(3) / np.sqrt(3), row_norm_bound=1.0, grid=GRID, top_m=1234)
    assert _step_plan(step, 64).kwargs["top_m"] == 1234  # never a share: all filtered rows may sit in one


@pytest.mark.parametrize("kind", ["boundary", "filtered-same-partition", "huge-norm"])
def test_passes_task_names_logs_and_fields_match_on_a_local_cluster(
    local_client: Any, seed: int, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    base, x0 = _dataset(seed)
    other = _neighbour(base, x0, kind, seed)
    (ra, a, tasks_a, logs_a), (rb, b, tasks_b, logs_b) = traced_neighbour_runs(
        local_client, caplog, (base, other),
        lambda matrix, noise: pca(_dask(matrix), n_iter=3, client=local_client, noise=noise, persist=False, **PARAMS),
        lambda: AuditingNoiseSource(seed))
    # the first iteration is crafted: same decision, pre-noise values within the sensitivity
    assert_within_sensitivity(a.records[:2], b.records[:2])
    # passes and task names: three one-pass steps over the 16 partitions, no second pass, on both neighbours
    assert tasks_a == tasks_b
    assert not any("filteredsum" in t for t in tasks_a)
    assert sum(1 for t in tasks_a if "-map-" in t) == 3 * (OTHER_PARTS + 1)
    # every release path is the same (keys, kinds and shapes), and so is every log line, DEBUG included
    assert [(r.release, r.kind, r.exact.shape) for r in a.records] == [
        (r.release, r.kind, r.exact.shape) for r in b.records
    ]
    assert logs_a == logs_b and any("step 3 (PowerStep) over 16 partitions" in line for line in logs_a)
    # result fields: the same names and shapes; no timings unless asked for
    da_, db_ = ra.to_dict(), rb.to_dict()
    assert sorted(da_) == sorted(db_) and "timings" not in da_
    assert np.shape(da_["thresholds"]) == np.shape(db_["thresholds"]) == (1, 3)
    assert da_["privacy"] == db_["privacy"]  # computed from public parameters only
    # the events the run emitted are what the ledger reserves (plan_release)
    plan = plan_release(D, epsilon=1.0, delta=1e-6, n_iter=3, beta=1e-6, mechanism="adaptive-power")
    planned = [event_to_json(e) for e in summarise_events(plan.events)]
    assert ra.privacy.events == tuple(planned) == rb.privacy.events


@pytest.mark.parametrize("calibration", ["standard", "paper"])
def test_planned_events_are_the_emitted_events_under_either_calibration(seed: int, calibration: str) -> None:
    base, _ = _dataset(seed)
    result = pca(_dask(base[:2_000]), n_iter=2, client="local", noise=AuditingNoiseSource(seed),
                 calibration=calibration, **PARAMS)
    plan = plan_release(D, epsilon=1.0, delta=1e-6, n_iter=2, beta=1e-6, calibration=calibration,
                        mechanism="adaptive-power")
    assert result.privacy.events == tuple(event_to_json(e) for e in summarise_events(plan.events))


def test_timings_only_when_asked_and_labelled(seed: int) -> None:
    base, _ = _dataset(seed)
    result = pca(_dask(base[:2_000]), n_iter=1, client="local", noise=AuditingNoiseSource(seed), timings=True,
                 **PARAMS)
    assert "NOT covered by the privacy guarantee" in result.timings["note"]
    assert len(result.timings["iterations"]) == 1
    assert json.loads(json.dumps(result.to_dict()))["timings"]["note"] == result.timings["note"]


def test_replace_one_figure_closed_form(seed: int) -> None:
    """Replace-one: the SVT step is (1/b_ρ + 2/b_ν) = 1.5·ε_svt-DP (counts keep sensitivity 1, not monotonic), its
    second-pass term (1 + e^1.5ε_svt)·δ_pass/K is not doubled, the Gaussian multiplier halves (sensitivity 2θ)."""
    import math

    from dp_accounting import GaussianDpEvent, SelfComposedDpEvent

    from dppca_dask.accounting import EpsilonDeltaDpEvent, epsilon_for, group_events

    base, _ = _dataset(seed)
    result = pca(_dask(base[:3_000]), n_iter=3, client="local", noise=AuditingNoiseSource(seed), **PARAMS)
    cal = result.provenance["calibration"]
    eps_svt, m = cal["epsilon_svt"], cal["noise_multiplier"]
    pass_delta = cal["delta_split"]["pass_probability"]
    assert cal["delta_split"]["second_pass"] == pytest.approx(0.01 * 1e-6, rel=1e-15)
    assert cal["delta_split"]["per_svt_step"] == pytest.approx((1 + math.exp(eps_svt)) * pass_delta / 3, rel=1e-12)
    replace = [SelfComposedDpEvent(EpsilonDeltaDpEvent(1.5 * eps_svt, (1 + math.exp(1.5 * eps_svt)) * pass_delta / 3), 3),
               SelfComposedDpEvent(GaussianDpEvent(m / 2), 3)]
    group = result.privacy.group_privacy
    assert group["neighbouring"] == "replace one row"
    assert group["epsilon"] == pytest.approx(epsilon_for(replace, delta=1e-6), rel=1e-6)
    emitted = [EpsilonDeltaDpEvent(eps_svt, cal["delta_split"]["per_svt_step"]), GaussianDpEvent(m)] * 3
    assert group["epsilon"] < epsilon_for(group_events(emitted), delta=1e-6)  # better than doubling everything
    # the add/remove figure is within 1% of the target and never above it
    assert 0.99 <= result.privacy.epsilon <= 1.0


def test_replace_one_map_refuses_events_it_does_not_know() -> None:
    from dp_accounting import LaplaceDpEvent

    from dppca_dask.api import validate_parameters
    from dppca_dask.api._pca import _plan
    from dppca_dask.errors import InvalidParameterError

    params = validate_parameters(mechanism="adaptive-power", epsilon=1.0, delta=1e-6, n_components=1, n_iter=2,
                                 row_norm_bound=1.0, svt_share=0.1, beta=0.05, grid_per_octave=4, grid_octaves=24,
                                 calibration="standard", max_dense_dim=100)
    plan = _plan(params, 10)
    assert plan.replace_one is not None
    with pytest.raises(InvalidParameterError, match="unexpected event LaplaceDpEvent"):
        plan.replace_one[0]((LaplaceDpEvent(1.0),))


def test_a_row_of_norm_at_the_float64_limit_is_its_clipped_row(compiled: bool) -> None:
    # a row of finite norm (the largest float64) whose product with a unit iterate overflows by rounding before
    # the clip factor applies: its score, bin and contribution must be those of its clipped copy (norm c), with
    # no overflow warning (an inf sum, or the warning, told the neighbours apart); numpy kernels and compiled loops
    import itertools
    import warnings

    import scipy.sparse as sp

    from dppca_dask.kernels.power import filtered_sum, power_partial
    from dppca_dask.storage import row_norms_of

    rng = np.random.default_rng(0)
    for _ in range(100):  # a direction in which the row's product with its own unit vector rounds past the limit
        row = rng.random(3)
        row = row / np.linalg.norm(row) * np.finfo(np.float64).max
        norm = row_norms_of(row[None, :])[0]
        if not (np.all(np.isfinite(row)) and np.isfinite(norm)):
            continue
        x = row / norm
        x = x / np.linalg.norm(x)
        with np.errstate(over="ignore"):
            if not np.isfinite(row @ x):
                break
    else:
        raise AssertionError("no overflowing row found")
    raw = np.vstack([row, [0.1, 0.2, -0.3]])
    norms = row_norms_of(raw)
    assert np.all(np.isfinite(norms))
    # at c = 1e-100 the factor c/‖a‖ underflows to 0: the row is then the zero row everywhere in the kernel
    for bound, block in itertools.product((1.0, 1e-100), (raw, sp.csr_array(raw))):
        clipped = raw * np.minimum(1.0, bound / norms)[:, None]
        grid = ThresholdGrid.for_bound(bound)
        want = power_partial(clipped, row_norms_of(clipped), x, partition=0, row_norm_bound=bound, grid=grid,
                             top_m=5)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = power_partial(block, norms, x, partition=0, row_norm_bound=bound, grid=grid, top_m=5)
            second = filtered_sum(block, norms, x, row_norm_bound=bound, grid=grid, index=grid.n_points - 1)
        np.testing.assert_array_equal(got.histogram, want.histogram)
        np.testing.assert_allclose(got.full_sum, want.full_sum, rtol=1e-9, atol=1e-300)
        assert np.all(np.isfinite(second))


def test_a_row_of_tiny_norm_raises_no_warning() -> None:
    # c/‖a‖ overflows for a row of norm below c·5.6e-309 (a normal float at c = 1e100): the factor is 1 either
    # way, but the overflow warning appeared on the dataset with the row and not on its neighbour without it. A
    # partition's norms are that small when a row of it overflows the sums of squares (the read then takes the
    # scaled norms of every row): here the row of 1e200s
    import warnings

    from dppca_dask.kernels import block as B
    from dppca_dask.kernels.power import clip_factors, power_partial
    from dppca_dask.storage.validate import safe_row_norms

    raw = np.array([[1e-250, 0.0, 0.0], [0.3, 0.4, 0.0], [0.0, 0.0, 0.0], [1e200, 1e200, 0.0]])
    norms = safe_row_norms(raw)
    assert norms[0] == 1e-250
    x = np.array([0.6, 0.8, 0.0])
    for bound in (1e100, 1.0):
        grid = ThresholdGrid.for_bound(bound)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            np.testing.assert_array_equal(clip_factors(norms, bound)[:2], [1.0, 1.0])
            power_partial(raw, norms, x, partition=0, row_norm_bound=bound, grid=grid, top_m=5)
            B.block_partial(raw, norms, x[:, None], partition=0, row_norm_bound=bound, grid=grid, top_m=5)
            B.mean_partial(raw, norms, row_norm_bound=bound)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(clip_factors(np.array([5e-324, 2.0]), 1.0), [1.0, 0.5])
