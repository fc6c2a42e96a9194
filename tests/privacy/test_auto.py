"""Neighbouring datasets for ``mechanism="auto"``: the decision's pilot, the events reserved and emitted in both
branches, and the public branch above ``max_dense_dim``.

The neighbours are those of ``test_block_power.py``: the data is crafted around the first iterate X₀ (d×4: k = 2
and two extra columns), which is the pilot's random start (``decision/block/init``, the auditing source's first
draw). With the SVT's Laplace draws set to zero (:class:`PilotAuditing`) the pilot's first AboveThreshold step
answers θ = 2^-10 on both neighbours (its cut-off, 3,570 filtered rows at β = 0.05, lies between the 300 rows above
2^-10 and the 5,800 above 2^-10.1), and the added row (on the filter boundary, or of huge norm clipped to it) moves
the pilot's first Gaussian release by exactly θ. The decision is post-processing of the pilot's released
thresholds. Deterministic (seeded Gaussian noise, no Laplace noise).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_block_power import K, _dask, _dataset, _neighbour, THETA, D, traced_neighbours

from dppca_dask import pca
from dppca_dask.accounting import epsilon_for, event_from_json, event_to_json, summarise_events
from dppca_dask.api import plan_release
from dppca_dask.datasets import PlantedSpec, low_coherence_matrix
from dppca_dask.mechanisms.testing import AuditingNoiseSource
from privacy_harness import assert_within_sensitivity

PARAMS: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-6, "beta": 0.05, "progress": False, "mechanism": "auto",
                          "n_components": K, "n_iter": 2}


class PilotAuditing(AuditingNoiseSource):
    """An auditing source whose Laplace draws are zero: the pilot's AboveThreshold answers are then a deterministic
    function of the counts (its ε_svt is 0.005 here: Laplace scale 400, which no dataset of test size could make
    deterministic), and the Gaussian noise is the seeded one. Not private."""

    def _laplace(self, scale: float, size: Any) -> Any:
        return np.zeros(size) if size is not None else 0.0


@pytest.mark.parametrize("kind", ["boundary", "huge-norm", "zero"])
def test_the_decision_statistic_moves_within_its_sensitivity(seed: int, kind: str) -> None:
    base, x0 = _dataset(seed)
    a, b = PilotAuditing(seed), PilotAuditing(seed)
    ra = pca(_dask(base), client="local", noise=a, **PARAMS)
    rb = pca(_dask(_neighbour(base, x0, kind, seed)), client="local", noise=b, **PARAMS)
    # the fixed bound's clipped fraction first, then the pilot
    assert a.records[0].release == "clipped-fraction" and a.records[1].release == "decision/block/iter-0/svt"
    assert ra.extras["auto"]["pilot_thresholds"][0] == rb.extras["auto"]["pilot_thresholds"][0] == THETA
    clipped, svt, gauss = assert_within_sensitivity(a.records[:3], b.records[:3])
    assert clipped == pytest.approx(1.0 if kind == "huge-norm" else np.sqrt(0.5), rel=1e-12)
    assert svt == (0.0 if kind == "zero" else 1.0)
    assert gauss > 0.998 if kind != "zero" else gauss < 1e-9  # the pilot's Frobenius sensitivity θ is attained
    assert ra.mechanism == rb.mechanism == ra.extras["auto"]["chosen"]
    assert [(r.release, r.kind, r.exact.shape) for r in a.records] == [
        (r.release, r.kind, r.exact.shape) for r in b.records]


@pytest.mark.parametrize("kind", ["boundary", "huge-norm"])
def test_task_names_logs_and_fields_match_on_a_local_cluster(local_client: Any, seed: int, kind: str,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    runs = traced_neighbours(local_client, caplog, seed, kind, lambda: PilotAuditing(seed), **PARAMS)
    (ra, a, tasks_a, logs_a), (rb, b, tasks_b, logs_b) = runs
    assert_within_sensitivity(a.records[:3], b.records[:3])
    assert ra.mechanism == rb.mechanism
    assert tasks_a == tasks_b and logs_a == logs_b
    da_, db_ = ra.to_dict(), rb.to_dict()
    assert sorted(da_) == sorted(db_) and da_["privacy"] == db_["privacy"] and da_["mechanism"] == ra.mechanism
    assert sorted(da_["extras"]["auto"]) == sorted(db_["extras"]["auto"])
    plan = plan_release(D, **{k: v for k, v in PARAMS.items() if k != "progress"})
    assert ra.privacy.events == tuple(event_to_json(e) for e in summarise_events(plan.events)) == rb.privacy.events


@pytest.mark.parametrize(("share", "chosen"), [(0.015, "adaptive-power-block"), (0.6, "analyze-gauss")])
def test_reserved_events_equal_emitted_events_in_both_branches(seed: int, share: float, chosen: str) -> None:
    """The ledger reserves the plan's events; the run emits the same ones whichever mechanism the decision picks,
    the pilot (the decision's budget) as its own events, the chosen release as one (ε, δ) event."""
    spec = PlantedSpec(n_rows=20_000, n_cols=80, nnz_per_row=15, support=20, signal_share=share, seed=seed % 1000)
    matrix = low_coherence_matrix(spec)
    params = {"epsilon": 1.0, "delta": 1e-6, "n_iter": 3, "mechanism": "auto"}
    plan = plan_release(80, **params)
    result = pca(matrix, client="local", noise=AuditingNoiseSource(seed), progress=False, **params)
    assert result.mechanism == chosen == result.to_dict()["mechanism"]
    assert result.privacy.events == tuple(event_to_json(e) for e in summarise_events(plan.events))
    emitted = [event_from_json(e) for e in result.privacy.events]
    for delta in (1e-9, 1e-6, 1e-5):
        assert epsilon_for(list(plan.events), delta=delta) == pytest.approx(epsilon_for(emitted, delta=delta),
                                                                             rel=1e-9)
    assert result.privacy.epsilon <= 1.0
    decision = result.provenance["calibration"]["auto"]
    assert type(plan.events[0]).__name__ == "GaussianDpEvent"  # the fixed bound's clipped fraction
    pilot = plan.events[1]  # the pilot's T_p pairs: the decision's budget, its own events
    assert "SelfComposed" in type(pilot).__name__ and pilot.count == 2
    main = plan.events[-1]
    assert (main.epsilon, main.delta) == (decision["main"]["epsilon"], decision["main"]["delta"])
    # 88% of the total by the shares (10% for the pilot, 2% for the clipped fraction), then the common noise scale s
    # (the main release's epsilon over s) that makes the releases spend the whole budget together
    scale = result.provenance["calibration"]["noise_scale"]
    assert main.epsilon == pytest.approx(0.88 / scale) and main.delta == pytest.approx(0.88e-6)
    assert 0.99 <= result.privacy.epsilon <= 1.0


def test_above_max_dense_dim_the_choice_depends_on_the_public_d_only(seed: int) -> None:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((3_000, 30)) / 10.0
    params = {"epsilon": 1.0, "delta": 1e-6, "n_iter": 2, "n_components": 2, "max_dense_dim": 20}
    auto_plan = plan_release(30, mechanism="auto", **params)
    block_plan = plan_release(30, mechanism="adaptive-power-block", **params)
    assert auto_plan.events == block_plan.events  # no pilot, no decision budget
    noise = AuditingNoiseSource(seed)
    result = pca(matrix, client="local", noise=noise, progress=False, mechanism="auto", **params)
    assert result.mechanism == "adaptive-power-block" and "max_dense_dim" in result.extras["auto"]["rule"]
    assert not any(r.release.startswith("decision/") for r in noise.records)


def test_the_paper_calibration_is_refused_before_any_draw() -> None:
    from dppca_dask.errors import InvalidParameterError

    noise = AuditingNoiseSource(0)
    with pytest.raises(InvalidParameterError, match="mechanism='auto' needs calibration='standard'"):
        pca(np.ones((50, 4)), epsilon=1.0, delta=1e-6, calibration="paper", client="local", noise=noise)
    assert noise.released_keys == frozenset()
