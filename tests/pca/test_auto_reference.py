"""``mechanism="auto"`` plans and releases what it did before its calibration was shared with the block and centred
Analyze Gauss planners (:func:`~dppca_dask.methods.adaptive_power.centring.plan_centred_releases`) and its quantile and
mean releases with their runs: the planned events (what the ledger reserves) and, for a fixed seed, the released
components, mean, explained variance, decision and events, in both branches of the decision.

The expected values (``auto_reference.json``) were computed before that change (same data, parameters and noise
seed), and recomputed once when every noise scale of the run came to be multiplied by one common factor so that
the releases together spend the whole budget (``calibration["noise_scale"]``; the shares unchanged) and a fixed
bound's clipped fraction came to be released first (with a second seed for the run that must take the Analyze
Gauss branch). Events and shares are compared exactly; released arrays to 1e-12 relative (the same arithmetic in the same
order gives them bit for bit; the slack only absorbs a different BLAS). Deterministic (seeded data and noise).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dppca_dask import pca
from dppca_dask.accounting import event_to_json
from dppca_dask.api import plan_release
from dppca_dask.errors import NotPrivateWarning
from dppca_dask.mechanisms.testing import AuditingNoiseSource

D = 10
CONFIGS: dict[str, dict[str, Any]] = {
    "private-auto-bound": {"center": "private", "row_norm_bound": "auto", "n_components": 2},
    "private": {"center": "private", "row_norm_bound": 1.0, "n_components": 1},
    "uncentred": {"center": False, "row_norm_bound": 1.0, "n_components": 1},
}
#: The noise seed of each reference run: the pilot's AboveThreshold steps are far noisier than any count of this
#: size, so the seed decides the branch; these seeds give one run in each branch.
SEEDS = {"spiked:private-auto-bound": 7, "aligned:uncentred": 99}
#: Computed before the change by the same plans and runs as below.
EXPECTED: dict[str, Any] = json.loads(Path(__file__).with_name("auto_reference.json").read_text())


def _matrices() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    signal = rng.standard_normal((1, D))
    # θ settles far below c²: adaptive power wins
    spiked = ((rng.standard_normal((4_000, 1)) * 3.0) @ signal + rng.standard_normal((4_000, D)) + 0.5) / np.sqrt(D)
    # every row of norm about c on one direction: θ stays near c², Analyze Gauss wins
    aligned = np.sign(rng.standard_normal((4_000, 1))) @ (signal / np.linalg.norm(signal))
    aligned += 0.01 * rng.standard_normal((4_000, D))
    return {"spiked": spiked, "aligned": aligned}


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_auto_plans_the_same_events_and_shares(config: str) -> None:
    plan = plan_release(D, mechanism="auto", epsilon=1.0, delta=1e-6, n_iter=3, **CONFIGS[config])
    expected = EXPECTED["plans"][config]
    assert [event_to_json(e) for e in plan.events] == expected["events"]
    assert json.loads(json.dumps(plan.calibration["shares"])) == expected["shares"]
    assert list(plan.calibration["shares"]) == list(expected["shares"])  # provenance order too


@pytest.mark.parametrize("run", sorted(EXPECTED["runs"]))
def test_a_fixed_seed_auto_run_releases_the_same_values(run: str) -> None:
    data, config = run.split(":")
    expected = EXPECTED["runs"][run]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        result = pca(_matrices()[data], epsilon=1.0, delta=1e-6, mechanism="auto", n_iter=3, client="local",
                     noise=AuditingNoiseSource(SEEDS[run]), progress=False, **CONFIGS[config])
    assert result.mechanism == expected["mechanism"]
    assert list(result.privacy.events) == expected["events"]
    auto = dict(result.extras["auto"])
    assert {k: v for k, v in auto.items() if k not in ("pilot_thresholds", "predicted_noise")} == {
        k: v for k, v in expected["auto"].items() if k not in ("pilot_thresholds", "predicted_noise")}
    np.testing.assert_allclose(auto["pilot_thresholds"], expected["auto"]["pilot_thresholds"], rtol=1e-12)
    for name, value in expected["auto"]["predicted_noise"].items():
        assert auto["predicted_noise"][name] == pytest.approx(value, rel=1e-12)
    np.testing.assert_allclose(result.components, expected["components"], rtol=1e-12, atol=1e-15)
    for field in ("mean", "explained_variance"):
        if expected[field] is None:
            assert getattr(result, field) is None
        else:
            np.testing.assert_allclose(getattr(result, field), expected[field], rtol=1e-12, atol=1e-15)
