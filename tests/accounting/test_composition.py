"""Composition by PLD and RDP: the reference values of specs/accounting.md, closed forms, and edge cases."""

from __future__ import annotations

import math
from math import comb

import pytest
from dp_accounting import (
    ComposedDpEvent,
    GaussianDpEvent,
    LaplaceDpEvent,
    NonPrivateDpEvent,
    NoOpDpEvent,
    PoissonSampledDpEvent,
    SelfComposedDpEvent,
    UnsupportedDpEvent,
    ZCDpEvent,
    dp_event,
    get_epsilon_gaussian,
    pld,
)

from dppca_dask.accounting import (
    EpsilonDeltaDpEvent,
    delta_for,
    epsilon_for,
    flatten_events,
    gaussian_delta,
    gaussian_epsilon,
    merged_gaussian_multiplier,
    pld_interval_for,
    summarise_events,
    zcdp_epsilon,
)
from dppca_dask.errors import InvalidParameterError

T = 30
DELTA = 1e-6


def run_events(m: float, epsilon_svt: float = 0.05, t: int = T) -> list[dp_event.DpEvent]:
    """What T iterations of the adaptive power method emit: (SVT step, Gaussian release) per iteration."""
    return [EpsilonDeltaDpEvent(epsilon_svt), GaussianDpEvent(m)] * t


# specs/accounting.md: T = 30 iterations of (ε_svt = 0.05 SVT step) + (Gaussian, multiplier m), δ = 1e-6.
# RDP: SVT as ZCDpEvent(ε²/2), Gaussian exact; PLD: SVT as the worst-case ε-DP PLD, Gaussians merged.
REFERENCE = [  # (m, RDP, PLD)
    (5, 5.994, 5.613),
    (10, 3.022, 2.812),
    (20, 1.833, 1.681),
    (50, 1.365, 1.217),
]


@pytest.mark.parametrize(("m", "rdp", "pld_value"), REFERENCE)
def test_reference_table(m: float, rdp: float, pld_value: float) -> None:
    events = run_events(m)
    assert epsilon_for(events, delta=DELTA) == pytest.approx(pld_value, abs=5e-4)
    assert epsilon_for(events, delta=DELTA, accountant="rdp") == pytest.approx(rdp, abs=5e-4)


def test_gaussian_only_reference() -> None:
    # 30 Gaussians of multiplier 10 = one Gaussian of multiplier 10/sqrt(30): PLD 2.4920 (the exact analytic
    # value at σ = 10/√30), RDP 2.6730
    events = [GaussianDpEvent(10.0)] * T
    assert epsilon_for(events, delta=DELTA) == pytest.approx(2.4920, abs=5e-5)
    assert epsilon_for(events, delta=DELTA, accountant="rdp") == pytest.approx(2.6730, abs=5e-5)
    assert epsilon_for(events, delta=DELTA) == pytest.approx(get_epsilon_gaussian(10 / math.sqrt(T), DELTA), rel=1e-9)


def test_merged_gaussian_agrees_with_upstream_discretised_composition() -> None:
    upstream = pld.PLDAccountant().compose(SelfComposedDpEvent(GaussianDpEvent(10.0), T)).get_epsilon(DELTA)
    ours = epsilon_for(SelfComposedDpEvent(GaussianDpEvent(10.0), T), delta=DELTA)
    assert ours <= upstream <= ours + 1e-3  # upstream's PLD is pessimistic: at or above the exact value


def test_merged_multiplier_closed_form() -> None:
    # (Σ c_i/m_i²)^(-1/2): 30 × m = 10 → 10/√30; m = 3 and m = 4 → 1/sqrt(1/9 + 1/16) = 2.4
    assert merged_gaussian_multiplier([(10.0, 30)]) == pytest.approx(10 / math.sqrt(30), rel=1e-15)
    assert merged_gaussian_multiplier([(3.0, 1), (4.0, 1)]) == pytest.approx(2.4, rel=1e-15)
    assert merged_gaussian_multiplier([]) == math.inf
    assert merged_gaussian_multiplier([(math.inf, 3)]) == math.inf
    with pytest.raises(InvalidParameterError, match="a Gaussian noise_multiplier must be > 0"):
        merged_gaussian_multiplier([(0.0, 1)])
    # composing different Gaussians is accounted through the merged one
    mixed = [GaussianDpEvent(3.0), GaussianDpEvent(4.0)]
    assert epsilon_for(mixed, delta=DELTA) == epsilon_for(GaussianDpEvent(2.4), delta=DELTA)


def test_pure_dp_optimal_composition_closed_form() -> None:
    # k ε-DP mechanisms, worst case (Kairouz–Oh–Viswanath 2015):
    # δ(ε') = (1+e^ε)^(-k) Σ_l C(k,l) max(0, e^{(k−l)ε} − e^{ε'} e^{lε})
    def kov(epsilon: float, k: int, target: float) -> float:
        total = sum(
            comb(k, j) * max(0.0, math.exp((k - j) * epsilon) - math.exp(target + j * epsilon)) for j in range(k + 1)
        )
        return total / (1 + math.exp(epsilon)) ** k

    events = SelfComposedDpEvent(EpsilonDeltaDpEvent(0.1), T)
    for target in (0.5, 1.0, 1.5):
        # the PLD is exact here up to its tail truncation of 1e-15
        assert delta_for(events, epsilon=target) == pytest.approx(kov(0.1, T, target), rel=1e-9, abs=2e-15)


def test_single_pure_event_and_basic_bounds() -> None:
    assert epsilon_for(EpsilonDeltaDpEvent(0.5), delta=0.0) == pytest.approx(0.5, abs=1e-12)
    # the composition of pure ε-DP events never exceeds basic composition Tε
    assert epsilon_for(SelfComposedDpEvent(EpsilonDeltaDpEvent(0.05), T), delta=DELTA) <= T * 0.05
    # RDP of a pure event is the zCDP conversion of ε²/2 on dp-accounting's order grid
    rdp = epsilon_for(EpsilonDeltaDpEvent(0.5), delta=DELTA, accountant="rdp")
    assert zcdp_epsilon(0.5**2 / 2, delta=DELTA) <= rdp


def test_approximate_dp_events() -> None:
    event = EpsilonDeltaDpEvent(1.0, 1e-5)
    assert epsilon_for(event, delta=1e-5) == pytest.approx(1.0, abs=1e-4)
    assert epsilon_for(event, delta=1e-6) == math.inf  # δ below the event's own δ: no finite ε
    # RDP: the event's δ is spent first (approximate zCDP), the rest converts ε²/2-zCDP
    assert epsilon_for(event, delta=1e-5, accountant="rdp") == math.inf  # nothing left for the zCDP part
    pure = epsilon_for(EpsilonDeltaDpEvent(1.0), delta=1e-5, accountant="rdp")
    assert epsilon_for(event, delta=2e-5, accountant="rdp") == pytest.approx(pure, rel=1e-12)
    assert delta_for(event, epsilon=pure, accountant="rdp") == pytest.approx(
        delta_for(EpsilonDeltaDpEvent(1.0), epsilon=pure, accountant="rdp") + 1e-5, rel=1e-12
    )


def test_laplace_events() -> None:
    # Lap(b) with sensitivity 1 is (1/b)-DP: δ at ε = 1/b vanishes (up to tail truncation)
    assert delta_for(LaplaceDpEvent(2.0), epsilon=0.5) < 1e-12
    assert epsilon_for(LaplaceDpEvent(2.0), delta=1e-9) == pytest.approx(0.5, abs=1e-3)
    # ten Laplace releases: the PLD beats basic composition (5.0) at δ = 1e-6
    assert epsilon_for(SelfComposedDpEvent(LaplaceDpEvent(2.0), 10), delta=DELTA) < 5.0
    assert epsilon_for(LaplaceDpEvent(2.0), delta=DELTA, accountant="rdp") > 0.0


def test_non_private_and_no_op() -> None:
    non_private = (
        [NonPrivateDpEvent(), GaussianDpEvent(5.0)],
        [GaussianDpEvent(0.0)],
        [LaplaceDpEvent(0.0)],
        [EpsilonDeltaDpEvent(math.inf)],
        [EpsilonDeltaDpEvent(1.0, 1.0)],
    )
    for events in non_private:
        assert epsilon_for(events, delta=DELTA) == math.inf
    assert epsilon_for([ZCDpEvent(math.inf)], delta=DELTA, accountant="rdp") == math.inf
    assert epsilon_for([NonPrivateDpEvent()], delta=DELTA, accountant="rdp") == math.inf
    assert delta_for([NonPrivateDpEvent()], epsilon=1.0) == 1.0
    assert delta_for([NonPrivateDpEvent()], epsilon=1.0, accountant="rdp") == 1.0
    assert epsilon_for([NoOpDpEvent(), GaussianDpEvent(math.inf), EpsilonDeltaDpEvent(0.0)], delta=DELTA) == 0.0
    assert delta_for([NoOpDpEvent()], epsilon=0.0) == 0.0
    assert epsilon_for([], delta=DELTA) == 0.0


def test_zcdp_events_need_the_rdp_accountant() -> None:
    assert epsilon_for(ZCDpEvent(1 / 32), delta=1e-3, accountant="rdp") == pytest.approx(0.688, abs=2e-3)
    with pytest.raises(InvalidParameterError, match="cannot account for ZCDpEvent.*use accountant='rdp'"):
        epsilon_for([GaussianDpEvent(1.0), ZCDpEvent(0.1)], delta=DELTA)


def test_other_supported_events_go_through_the_upstream_accountant() -> None:
    events = [PoissonSampledDpEvent(0.01, GaussianDpEvent(2.0))] * 3 + [GaussianDpEvent(10.0)]
    upstream = pld.PLDAccountant().compose(ComposedDpEvent(events)).get_epsilon(DELTA)
    assert epsilon_for(events, delta=DELTA) == pytest.approx(upstream, abs=1e-3)
    poisson_nonprivate = PoissonSampledDpEvent(0.5, GaussianDpEvent(0.0))
    assert epsilon_for([poisson_nonprivate, EpsilonDeltaDpEvent(0.1)], delta=DELTA) == math.inf
    # unhashable leaves (list fields) are merged by equality
    tree = dp_event.SingleEpochTreeAggregationDpEvent(2.0, [3, 4])
    assert flatten_events([tree, GaussianDpEvent(1.0), tree]) == [(tree, 2), (GaussianDpEvent(1.0), 1)]
    with pytest.raises(InvalidParameterError, match="RDP accountant cannot account for SingleEpochTree"):
        epsilon_for([tree, tree], delta=DELTA, accountant="rdp")  # upstream needs REPLACE_SPECIAL for it


def test_unsupported_events_raise() -> None:
    with pytest.raises(InvalidParameterError, match="the PLD accountant cannot account for UnsupportedDpEvent"):
        epsilon_for([EpsilonDeltaDpEvent(0.1), UnsupportedDpEvent()], delta=DELTA)
    with pytest.raises(InvalidParameterError, match="the RDP accountant cannot account for UnsupportedDpEvent"):
        epsilon_for([UnsupportedDpEvent()], delta=DELTA, accountant="rdp")


def test_flatten_and_summarise() -> None:
    svt, gauss = EpsilonDeltaDpEvent(0.05), GaussianDpEvent(15.0)
    tree = [SelfComposedDpEvent(ComposedDpEvent([svt, gauss, NoOpDpEvent()]), 10), gauss,
            SelfComposedDpEvent(svt, 0)]
    assert flatten_events(tree) == [(svt, 10), (gauss, 11)]
    assert summarise_events(tree) == [SelfComposedDpEvent(svt, 10), SelfComposedDpEvent(gauss, 11)]
    assert summarise_events(svt) == [svt]
    # the accounting of the summary equals that of the tree
    assert epsilon_for(summarise_events(tree), delta=DELTA) == epsilon_for(tree, delta=DELTA)


def test_nesting_does_not_change_the_figure() -> None:
    flat = run_events(15.26)
    nested = [SelfComposedDpEvent(ComposedDpEvent([EpsilonDeltaDpEvent(0.05), GaussianDpEvent(15.26)]), T)]
    assert epsilon_for(flat, delta=DELTA) == epsilon_for(nested, delta=DELTA)


def test_pld_interval() -> None:
    assert pld_interval_for([GaussianDpEvent(10.0)]) == 1e-4
    assert pld_interval_for([GaussianDpEvent(0.5)]) == pytest.approx(2e-4)  # widened to 1e-4/m for m < 1
    assert pld_interval_for(run_events(10.0)) == pytest.approx(1e-4)  # ε_svt = 0.05 is 500 grid steps
    assert pld_interval_for([EpsilonDeltaDpEvent(1e-3)]) == pytest.approx(1e-5)  # 100 steps per ε_min
    # an explicit coarser grid is still an upper bound
    events = run_events(10.0)
    assert epsilon_for(events, delta=DELTA, value_discretization_interval=1e-2) >= epsilon_for(events, delta=DELTA)


def test_delta_for_is_the_dual_of_epsilon_for() -> None:
    events = run_events(15.26)
    epsilon = epsilon_for(events, delta=DELTA)
    # dp-accounting's search for ε stops within floating-point rounding of the δ it was asked for
    assert delta_for(events, epsilon=epsilon) <= DELTA * (1 + 1e-9)
    assert delta_for(events, epsilon=epsilon - 1e-3) > DELTA
    rdp_epsilon = epsilon_for(events, delta=DELTA, accountant="rdp")
    assert delta_for(events, epsilon=rdp_epsilon, accountant="rdp") <= DELTA * (1 + 1e-6)


@pytest.mark.parametrize("m", [0.3, 1.0, 3.7, 20.0])
@pytest.mark.parametrize("delta", [1e-9, 1e-6, 1e-3])
def test_analytic_gaussian_matches_upstream_and_inverts(m: float, delta: float) -> None:
    epsilon = gaussian_epsilon(m, delta)
    assert epsilon == pytest.approx(get_epsilon_gaussian(m, delta), rel=1e-9, abs=1e-12)
    assert gaussian_delta(m, epsilon) <= delta  # never below the true ε


def test_analytic_gaussian_edges() -> None:
    assert gaussian_epsilon(1.0, 0.0) == math.inf
    assert gaussian_epsilon(1.0, 1.0) == 0.0
    assert gaussian_epsilon(math.inf, 1e-6) == 0.0
    assert gaussian_epsilon(100.0, 0.5) == 0.0  # δ(0) < 0.5 already
    assert gaussian_delta(math.inf, 1.0) == 0.0
    assert gaussian_delta(1.0, math.inf) == 0.0
    assert gaussian_delta(1e-3, 1.0) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: epsilon_for([GaussianDpEvent(1.0)], delta=DELTA, accountant="gdp"),
         "accountant must be 'pld' or 'rdp'"),
        (lambda: delta_for([GaussianDpEvent(1.0)], epsilon=1.0, accountant="x"), "accountant must be 'pld' or 'rdp'"),
        (lambda: epsilon_for([GaussianDpEvent(1.0)], delta=-0.1), r"delta must be in \[0, 1\]"),
        (lambda: delta_for([GaussianDpEvent(1.0)], epsilon=-1.0), "epsilon must be >= 0"),
        (lambda: epsilon_for([GaussianDpEvent(1.0)], delta=DELTA, value_discretization_interval=0.0),
         r"value_discretization_interval must be in \(0, 1\]"),
        (lambda: epsilon_for([1.0], delta=DELTA), "events must be DpEvents; got float"),  # type: ignore[list-item]
        (lambda: epsilon_for(ComposedDpEvent([1.0]), delta=DELTA), "events must be DpEvents; got float"),
        (lambda: epsilon_for(SelfComposedDpEvent(GaussianDpEvent(1.0), -1), delta=DELTA),
         "SelfComposedDpEvent.count must be an int >= 0"),
        (lambda: epsilon_for(GaussianDpEvent(-1.0), delta=DELTA), "GaussianDpEvent.noise_multiplier must be >= 0"),
        (lambda: epsilon_for(LaplaceDpEvent(-1.0), delta=DELTA), "LaplaceDpEvent.noise_multiplier must be >= 0"),
        (lambda: epsilon_for(EpsilonDeltaDpEvent(-1.0), delta=DELTA), "EpsilonDeltaDpEvent needs epsilon >= 0"),
        (lambda: epsilon_for(EpsilonDeltaDpEvent(1.0, 2.0), delta=DELTA), r"delta in \[0, 1\]"),
        (lambda: epsilon_for(ZCDpEvent(-1.0), delta=DELTA, accountant="rdp"), "ZCDpEvent needs rho >= 0"),
        (lambda: gaussian_epsilon(0.0, DELTA), "noise_multiplier must be > 0"),
        (lambda: gaussian_epsilon(1.0, 1.5), r"delta must be in \[0, 1\]"),
        (lambda: gaussian_delta(-1.0, 1.0), "noise_multiplier must be > 0"),
        (lambda: gaussian_delta(1.0, -1.0), "epsilon must be >= 0"),
    ],
)
def test_errors(call: object, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        call()  # type: ignore[operator]
