"""The privacy report: figures, group privacy for replace-one, JSON form, validation."""

from __future__ import annotations

import json
import math

import pytest
from dp_accounting import (
    GaussianDpEvent,
    LaplaceDpEvent,
    NonPrivateDpEvent,
    NoOpDpEvent,
    PoissonSampledDpEvent,
    SelfComposedDpEvent,
    UnsupportedDpEvent,
    ZCDpEvent,
)

from dppca_dask.accounting import (
    ADD_REMOVE_ROW,
    ENTRY_CHANGE,
    NOT_PRIVATE,
    EpsilonDeltaDpEvent,
    PrivacyReport,
    build_report,
    epsilon_for,
    event_from_json,
    group_events,
)
from dppca_dask.methods.adaptive_power.paper import paper_adaptive_power_epsilon
from dppca_dask.errors import InvalidParameterError

DELTA = 1e-6
RUN = [EpsilonDeltaDpEvent(0.05), GaussianDpEvent(15.26)] * 30


@pytest.fixture(scope="module")
def report() -> PrivacyReport:
    paper = paper_adaptive_power_epsilon(epsilon_svt=0.05, noise_multiplier=15.26, n_iter=30, delta=DELTA)
    return build_report(RUN, target_epsilon=2.0, target_delta=DELTA, neighbouring=ADD_REMOVE_ROW, paper_figure=paper)


def test_report_figures(report: PrivacyReport) -> None:
    assert report.accountant == "pld"
    assert report.epsilon == epsilon_for(RUN, delta=DELTA) == report.figures["pld"]
    assert report.figures["rdp"] == epsilon_for(RUN, delta=DELTA, accountant="rdp")
    assert report.epsilon < report.figures["rdp"] < report.figures["paper"]["epsilon"]
    assert report.delta == report.target_delta == DELTA and report.target_epsilon == 2.0
    assert report.meets_target and report.private
    assert report.neighbouring == "add/remove one row"
    assert report.summary().startswith("(2, 1e-06)-DP for add/remove one row (pld)")


def test_group_privacy_doubles_the_sensitivities(report: PrivacyReport) -> None:
    group = report.group_privacy
    assert group is not None and group["neighbouring"] == "replace one row"
    # replace-one = two add/remove steps: SVT ε → 2ε, Gaussian multiplier m → m/2
    doubled = [EpsilonDeltaDpEvent(0.1), GaussianDpEvent(15.26 / 2)] * 30
    assert group["epsilon"] == epsilon_for(doubled, delta=DELTA)
    assert group["delta"] == DELTA and group["accountant"] == "pld"
    # at the same δ, doubling a Gaussian's sensitivity more than doubles its ε (here 2.0 → 4.31)
    assert group["epsilon"] > 2 * report.epsilon


def test_events_are_summarised_and_round_trip(report: PrivacyReport) -> None:
    events = [event_from_json(e) for e in report.events]
    assert events == [
        SelfComposedDpEvent(EpsilonDeltaDpEvent(0.05), 30),
        SelfComposedDpEvent(GaussianDpEvent(15.26), 30),
    ]
    assert epsilon_for(events, delta=DELTA) == report.epsilon


def test_to_dict_is_strict_json(report: PrivacyReport) -> None:
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["epsilon"] == report.epsilon and data["neighbouring"] == ADD_REMOVE_ROW
    assert data["figures"]["paper"]["n_iter"] == 30
    assert data["group_privacy"]["neighbouring"] == "replace one row"
    assert data["meets_target"] is True and data["private"] is True


def test_non_private_report() -> None:
    report = build_report(
        [NonPrivateDpEvent()], target_epsilon=math.inf, target_delta=0.0, neighbouring=NOT_PRIVATE, private=False
    )
    assert report.epsilon == math.inf and not report.private
    assert report.group_privacy is None  # not an add/remove relation
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["epsilon"] == "inf" and data["figures"]["rdp"] == "inf"
    assert report.summary().startswith("not differentially private")


def test_seeded_run_is_marked_not_private() -> None:
    report = build_report(RUN, target_epsilon=2.0, target_delta=DELTA, neighbouring=ADD_REMOVE_ROW, private=False)
    assert not report.private and math.isfinite(report.epsilon)


def test_overspending_run_does_not_meet_its_target() -> None:
    report = build_report(RUN, target_epsilon=1.0, target_delta=DELTA, neighbouring=ADD_REMOVE_ROW)
    assert not report.meets_target and report.to_dict()["meets_target"] is False


def test_other_relations_have_no_group_figure() -> None:
    report = build_report([GaussianDpEvent(5.0)] * 4, target_epsilon=1.0, target_delta=DELTA, neighbouring=ENTRY_CHANGE)
    assert report.group_privacy is None


def test_rdp_fallback_for_events_without_a_pld_form() -> None:
    report = build_report(
        [ZCDpEvent(0.01), GaussianDpEvent(10.0)], target_epsilon=1.0, target_delta=DELTA, neighbouring=ADD_REMOVE_ROW
    )
    assert report.accountant == "rdp" and report.figures["pld"] is None
    assert report.epsilon == report.figures["rdp"]
    # group privacy for zCDP: ρ → 4ρ (Bun–Steinke)
    assert report.group_privacy is not None
    assert report.group_privacy["epsilon"] == epsilon_for(
        [ZCDpEvent(0.04), GaussianDpEvent(5.0)], delta=DELTA, accountant="rdp"
    )


def test_approximate_events_rdp_figure_spends_their_delta_first() -> None:
    report = build_report(
        [EpsilonDeltaDpEvent(0.5, 1e-8)], target_epsilon=1.0, target_delta=DELTA, neighbouring=ADD_REMOVE_ROW
    )
    assert report.accountant == "pld"
    # approximate zCDP (Bun–Steinke 2016): ε of ZCDp(0.5²/2) at δ − 1e-8
    assert report.figures["rdp"] == epsilon_for(ZCDpEvent(0.125), delta=DELTA - 1e-8, accountant="rdp")


def test_failure_terms_are_not_doubled_by_group_privacy() -> None:
    # EpsilonDeltaDpEvent(0, δ) records a failure probability over secret randomness (Hardt–Roth's Ω bound):
    # under replace-one the difference of two rows is still one vector, bounded with the same probability
    assert group_events([EpsilonDeltaDpEvent(0.0, 1e-7), GaussianDpEvent(3.0)]) == [
        EpsilonDeltaDpEvent(0.0, 1e-7), GaussianDpEvent(1.5)
    ]
    report = build_report([EpsilonDeltaDpEvent(0.0, 1e-7), GaussianDpEvent(3.0)], target_epsilon=1.0,
                          target_delta=DELTA, neighbouring=ADD_REMOVE_ROW)
    assert report.group_privacy is not None
    assert report.group_privacy["epsilon"] == epsilon_for(
        [EpsilonDeltaDpEvent(0.0, 1e-7), GaussianDpEvent(1.5)], delta=DELTA
    )


def test_replace_one_events_given_by_the_mechanism_are_used() -> None:
    events = [EpsilonDeltaDpEvent(0.1), GaussianDpEvent(4.0)]
    replace = [EpsilonDeltaDpEvent(0.15), GaussianDpEvent(2.0)]
    report = build_report(events, target_epsilon=2.0, target_delta=DELTA, neighbouring=ADD_REMOVE_ROW,
                          replace_one_events=replace, replace_one_method="svt 1.5 eps, gaussian doubled")
    assert report.group_privacy is not None
    assert report.group_privacy["epsilon"] == epsilon_for(replace, delta=DELTA)
    assert report.group_privacy["method"] == "svt 1.5 eps, gaussian doubled"
    assert report.group_privacy["neighbouring"] == "replace one row"
    # smaller than generic group privacy, which doubles the SVT's ε
    assert report.group_privacy["epsilon"] < epsilon_for(group_events(events), delta=DELTA)


def test_group_figure_is_omitted_when_unknown() -> None:
    events = [PoissonSampledDpEvent(0.01, GaussianDpEvent(2.0))]
    report = build_report(events, target_epsilon=1.0, target_delta=DELTA, neighbouring=ADD_REMOVE_ROW)
    assert report.group_privacy is None and math.isfinite(report.epsilon)


def test_group_events_closed_forms() -> None:
    events = [
        GaussianDpEvent(4.0),
        LaplaceDpEvent(2.0),
        EpsilonDeltaDpEvent(0.5),
        EpsilonDeltaDpEvent(1.0, 1e-6),
        ZCDpEvent(0.1),
        NoOpDpEvent(),
        NonPrivateDpEvent(),
        SelfComposedDpEvent(GaussianDpEvent(8.0), 3),
    ]
    assert group_events(events) == [
        GaussianDpEvent(2.0),
        LaplaceDpEvent(1.0),
        EpsilonDeltaDpEvent(1.0),
        EpsilonDeltaDpEvent(2.0, (1 + math.e) * 1e-6),  # (2ε, (1 + e^ε)δ)
        ZCDpEvent(0.4),  # k²ρ
        NonPrivateDpEvent(),
        SelfComposedDpEvent(GaussianDpEvent(4.0), 3),
    ]
    assert group_events([EpsilonDeltaDpEvent(0.5)], group_size=3) == [EpsilonDeltaDpEvent(1.5)]
    assert group_events([GaussianDpEvent(4.0)], group_size=1) == [GaussianDpEvent(4.0)]


def test_group_events_errors() -> None:
    with pytest.raises(InvalidParameterError, match="no group-privacy form for PoissonSampledDpEvent"):
        group_events([PoissonSampledDpEvent(0.1, GaussianDpEvent(1.0))])
    with pytest.raises(InvalidParameterError, match="no group-privacy form for ZCDpEvent"):
        group_events([ZCDpEvent(0.1, 0.01)])
    with pytest.raises(InvalidParameterError, match="group_size must be an integer >= 1"):
        group_events([GaussianDpEvent(1.0)], group_size=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"neighbouring": ""}, "neighbouring must name the relation"),
        ({"neighbouring": None}, "neighbouring must name the relation"),
        ({"target_epsilon": -1.0}, "target_epsilon must be >= 0"),
        ({"target_delta": 1.0}, r"target_delta must be in \[0, 1\)"),
        ({"target_delta": math.nan}, r"target_delta must be in \[0, 1\)"),
    ],
)
def test_build_report_validation(kwargs: dict[str, object], message: str) -> None:
    params: dict[str, object] = {"target_epsilon": 1.0, "target_delta": DELTA, "neighbouring": ADD_REMOVE_ROW} | kwargs
    with pytest.raises(InvalidParameterError, match=message):
        build_report([GaussianDpEvent(1.0)], **params)  # type: ignore[arg-type]


def test_events_no_accountant_supports_raise() -> None:
    with pytest.raises(InvalidParameterError, match="neither the PLD nor the RDP accountant supports these events"):
        build_report([UnsupportedDpEvent()], target_epsilon=1.0, target_delta=DELTA, neighbouring=ADD_REMOVE_ROW)


def test_a_single_event_is_accepted() -> None:
    report = build_report(GaussianDpEvent(5.0), target_epsilon=1.0, target_delta=DELTA, neighbouring=ADD_REMOVE_ROW)
    assert report.epsilon == epsilon_for(GaussianDpEvent(5.0), delta=DELTA)
