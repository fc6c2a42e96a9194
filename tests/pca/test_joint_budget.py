"""Every default spends its budget: the centred plans (``auto``, ``analyze-gauss``, ``adaptive-power``,
``adaptive-power-block``) and uncentred block power release their mean, quantile, variance, pilot and main release
with noise calibrated jointly by the PLD accountant, so the planned events (what the ledger reserves and the run
emits) compose to within 1% of the target and never above it; the shares keep their proportions."""

from __future__ import annotations

import pytest

from dppca_dask.accounting import calibrate_gaussian, epsilon_for
from dppca_dask.api import plan_release

CENTRED = ("auto", "analyze-gauss", "adaptive-power", "adaptive-power-block")


@pytest.mark.parametrize(("mechanism", "bound", "epsilon", "delta"), [
    *((m, b, 1.0, 1e-6) for m in CENTRED for b in (1.0, "auto")),
    ("adaptive-power-block", "auto", 0.3, 1e-8), ("analyze-gauss", 1.0, 4.0, 1e-5), ("auto", 1.0, 0.3, 1e-8)])
def test_centred_plans_spend_their_whole_budget(mechanism: str, bound: object, epsilon: float,
                                                delta: float) -> None:
    plan = plan_release(300, mechanism=mechanism, epsilon=epsilon, delta=delta, n_components=2, center="private",
                        row_norm_bound=bound)
    spent = epsilon_for(list(plan.events), delta=delta)
    assert 0.99 * epsilon <= spent <= epsilon
    assert plan.calibration["noise_scale"] < 1.0  # the shares alone (basic composition) left budget unspent


@pytest.mark.parametrize("n_components", [2, 10])
def test_uncentred_block_power_spends_its_whole_budget(n_components: int) -> None:
    plan = plan_release(300, mechanism="adaptive-power-block", epsilon=1.0, delta=1e-6, n_components=n_components,
                        center=False)
    assert 0.99 <= epsilon_for(list(plan.events), delta=1e-6) <= 1.0


def test_the_shares_keep_their_proportions() -> None:
    """Every noise scale is the one its share gives, times one common factor s: the mean's and the variance's
    multipliers times s, the quantile's epsilon (Laplace scale 2Δ/ε) over s."""
    epsilon, delta = 1.0, 1e-6
    plan = plan_release(300, mechanism="adaptive-power-block", epsilon=epsilon, delta=delta, n_components=2,
                        center="private", row_norm_bound="auto")
    cal = plan.calibration
    scale = cal["noise_scale"]
    assert cal["shares"]["mean"] == 0.1 and cal["shares"]["explained_variance"] == 0.05
    mean_alone = calibrate_gaussian(epsilon=0.1 * epsilon, delta=0.1 * delta)
    variance_alone = calibrate_gaussian(epsilon=0.05 * epsilon, delta=0.05 * delta)
    assert cal["mean_noise_multiplier"] == pytest.approx(mean_alone * scale, rel=1e-12)
    assert cal["variance_noise_multiplier"] == pytest.approx(variance_alone * scale, rel=1e-12)
    assert cal["row_norm_quantile"]["epsilon"] == pytest.approx(0.05 * epsilon / scale, rel=1e-12)
    assert plan.events[0].epsilon == cal["row_norm_quantile"]["epsilon"]


def test_auto_gives_its_main_release_the_rest_and_each_branch_spends_it() -> None:
    """``auto``'s chosen release is one (ε_main, δ_main) event; both branches are calibrated jointly to it."""
    plan = plan_release(300, mechanism="auto", epsilon=1.0, delta=1e-6, n_components=2, center="private")
    main = plan.calibration["auto"]["main"]
    assert plan.events[-1].epsilon == main["epsilon"] and plan.events[-1].delta == main["delta"]
    from dataclasses import replace

    from dppca_dask.methods.adaptive_power.block_plan import plan_block_power
    from dppca_dask.methods.analyze_gauss.centred import plan_centred_gauss
    from dppca_dask.methods._params import PCA_DEFAULTS, validate_parameters

    params = validate_parameters(mechanism="adaptive-power-block", epsilon=1.0, delta=1e-6,
                                 **{**PCA_DEFAULTS, "n_components": 2})
    main_params = replace(params, epsilon=main["epsilon"], delta=main["delta"])
    import numpy as np

    for branch in (plan_block_power(main_params, 300, center=np.zeros(300)),
                   plan_centred_gauss(main_params, 300, center=np.zeros(300))):
        spent = epsilon_for(list(branch.planned_events), delta=main["delta"])
        assert 0.99 * main["epsilon"] <= spent <= main["epsilon"]
