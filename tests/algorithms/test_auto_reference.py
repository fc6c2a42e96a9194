"""``mechanism="auto"`` plans and releases what it did before its calibration was shared with the block and centred
Analyze Gauss planners (:func:`~dppca_dask.algorithms.block_power.plan_centred_releases`) and its quantile and
mean releases with their runs: the planned events (what the ledger reserves) and, for a fixed seed, the released
components, mean, explained variance, decision and events, in both branches of the decision.

The expected values were computed before that change (same data, parameters and noise seed). Events and shares are
compared exactly; released arrays to 1e-12 relative (the same arithmetic in the same order gives them bit for bit;
the slack only absorbs a different BLAS). Deterministic (seeded data and noise).
"""

from __future__ import annotations

import json
import warnings
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
EXPECTED = {'plans': {'private-auto-bound': {'events': [{'type': 'EpsilonDeltaDpEvent', 'epsilon': 0.05, 'delta': 0.0},
                                                 {'type': 'GaussianDpEvent', 'noise_multiplier': 41.32945165413005},
                                                 {'type': 'SelfComposedDpEvent',
                                                  'event': {'type': 'ComposedDpEvent',
                                                            'events': [{'type': 'EpsilonDeltaDpEvent',
                                                                        'epsilon': 0.005035453798750047,
                                                                        'delta': 5e-10},
                                                                       {'type': 'GaussianDpEvent',
                                                                        'noise_multiplier': 60.89968366912317}]},
                                                  'count': 2},
                                                 {'type': 'EpsilonDeltaDpEvent', 'epsilon': 0.75, 'delta': 8e-07}],
                                      'shares': {'row_norm_quantile_epsilon': 0.05,
                                                 'mean': 0.1,
                                                 'decision': 0.1,
                                                 'release_epsilon': 0.75,
                                                 'release_delta': 0.8}},
               'private': {'events': [{'type': 'GaussianDpEvent', 'noise_multiplier': 41.32945165413005},
                                      {'type': 'SelfComposedDpEvent',
                                       'event': {'type': 'ComposedDpEvent',
                                                 'events': [{'type': 'EpsilonDeltaDpEvent',
                                                             'epsilon': 0.005035453798750047,
                                                             'delta': 5e-10},
                                                            {'type': 'GaussianDpEvent',
                                                             'noise_multiplier': 60.89968366912317}]},
                                       'count': 2},
                                      {'type': 'EpsilonDeltaDpEvent', 'epsilon': 0.8, 'delta': 8e-07}],
                           'shares': {'row_norm_quantile_epsilon': 0.0,
                                      'mean': 0.1,
                                      'decision': 0.1,
                                      'release_epsilon': 0.8,
                                      'release_delta': 0.8}},
               'uncentred': {'events': [{'type': 'SelfComposedDpEvent',
                                         'event': {'type': 'ComposedDpEvent',
                                                   'events': [{'type': 'EpsilonDeltaDpEvent',
                                                               'epsilon': 0.005035453798750047,
                                                               'delta': 5e-10},
                                                              {'type': 'GaussianDpEvent',
                                                               'noise_multiplier': 60.89968366912317}]},
                                         'count': 2},
                                        {'type': 'EpsilonDeltaDpEvent', 'epsilon': 0.9, 'delta': 9e-07}],
                             'shares': {'row_norm_quantile_epsilon': 0.0,
                                        'mean': 0.0,
                                        'decision': 0.1,
                                        'release_epsilon': 0.9,
                                        'release_delta': 0.9}}},
     'runs': {'spiked:private-auto-bound': {'mechanism': 'adaptive-power-block',
                                            'components': [[-0.27870598612176123,
                                                            -0.4653470573025394,
                                                            -0.10522470882533186,
                                                            0.14853522443256498,
                                                            0.3929022472423156,
                                                            0.025681212182293488,
                                                            -0.20288340358963639,
                                                            -0.2886038016305714,
                                                            0.2664688233593195,
                                                            0.5675816885503864],
                                                           [0.20774081257182586,
                                                            0.48102975082383564,
                                                            0.05874180536917153,
                                                            -0.060901244519443176,
                                                            0.5544844199939836,
                                                            0.30615269978953785,
                                                            -0.09471288970798504,
                                                            -0.278454298225173,
                                                            -0.4519629299961663,
                                                            0.1622784858204939]],
                                            'mean': [0.13437898615009572,
                                                     0.08169157451159142,
                                                     0.146730132382425,
                                                     0.027988006457146775,
                                                     0.11233555928035777,
                                                     0.18897952122251024,
                                                     -0.0062612119781369595,
                                                     0.19869349166183067,
                                                     0.058373246275514996,
                                                     0.2608479997534239],
                                            'explained_variance': [5.451292861759269, 0.9669354909536758],
                                            'auto': {'chosen': 'adaptive-power-block',
                                                     'pilot_thresholds': [1.2948681007139498e-05,
                                                                          3.849665895897723e-06],
                                                     'predicted_noise': {'adaptive-power-block': 4.084153041870199e-05,
                                                                         'analyze-gauss': 159.40433497572104},
                                                     'gamma': 1.0},
                                            'events': [{'type': 'EpsilonDeltaDpEvent', 'epsilon': 0.05, 'delta': 0.0},
                                                       {'type': 'GaussianDpEvent',
                                                        'noise_multiplier': 41.32945165413005},
                                                       {'type': 'SelfComposedDpEvent',
                                                        'event': {'type': 'EpsilonDeltaDpEvent',
                                                                  'epsilon': 0.005035453798750047,
                                                                  'delta': 5e-10},
                                                        'count': 2},
                                                       {'type': 'SelfComposedDpEvent',
                                                        'event': {'type': 'GaussianDpEvent',
                                                                  'noise_multiplier': 60.89968366912317},
                                                        'count': 2},
                                                       {'type': 'EpsilonDeltaDpEvent',
                                                        'epsilon': 0.75,
                                                        'delta': 8e-07}]},
              'aligned:uncentred': {'mechanism': 'analyze-gauss',
                                    'components': [[-0.2799536365274765,
                                                    -0.46589692139386196,
                                                    -0.08915813126848669,
                                                    0.1472993213969419,
                                                    0.3998596333907038,
                                                    0.03778616506186915,
                                                    -0.19468903100163093,
                                                    -0.27674582368683626,
                                                    0.2627474864858271,
                                                    0.5745223455314544]],
                                    'mean': None,
                                    'explained_variance': [1.0242309766864328],
                                    'auto': {'chosen': 'analyze-gauss',
                                             'pilot_thresholds': [7.08822676541043e-08, 0.7071067811865476],
                                             'predicted_noise': {'adaptive-power-block': 6.29285179941891,
                                                                 'analyze-gauss': 4.924139397044874},
                                             'gamma': 1.0},
                                    'events': [{'type': 'SelfComposedDpEvent',
                                                'event': {'type': 'EpsilonDeltaDpEvent',
                                                          'epsilon': 0.005035453798750047,
                                                          'delta': 5e-10},
                                                'count': 2},
                                               {'type': 'SelfComposedDpEvent',
                                                'event': {'type': 'GaussianDpEvent',
                                                          'noise_multiplier': 60.89968366912317},
                                                'count': 2},
                                               {'type': 'EpsilonDeltaDpEvent', 'epsilon': 0.9, 'delta': 9e-07}]}}}


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
                     noise=AuditingNoiseSource(7), progress=False, **CONFIGS[config])
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
