"""EpsilonDeltaDpEvent and the lossless JSON form of every event type (what the budget ledger stores)."""

from __future__ import annotations

import json
import math
from typing import Any

import attr
import pytest
from dp_accounting import dp_event

from dppca_dask.accounting import EVENT_TYPES, EpsilonDeltaDpEvent, event_from_json, event_to_json
from dppca_dask.errors import InvalidParameterError

GAUSS = dp_event.GaussianDpEvent(15.26)
SVT = EpsilonDeltaDpEvent(0.05)

#: One instance of every registered type, plus nested trees.
EXAMPLES: list[dp_event.DpEvent] = [
    dp_event.NoOpDpEvent(),
    dp_event.NonPrivateDpEvent(),
    dp_event.UnsupportedDpEvent(),
    GAUSS,
    dp_event.GaussianDpEvent(10),  # an int stays an int
    dp_event.LaplaceDpEvent(0.1 + 0.2),  # a float with a long repr
    dp_event.DiscreteLaplaceDpEvent(0.5, 3),
    dp_event.RandomizedResponseDpEvent(0.25, 4),
    dp_event.ZCDpEvent(1 / 32),
    dp_event.ZCDpEvent(0.1, 0.01),
    SVT,
    EpsilonDeltaDpEvent(1.5, 1e-7),
    EpsilonDeltaDpEvent(math.inf),
    dp_event.SelfComposedDpEvent(dp_event.ComposedDpEvent([SVT, GAUSS]), 30),
    dp_event.ComposedDpEvent([dp_event.SelfComposedDpEvent(GAUSS, 3), dp_event.ComposedDpEvent([]), SVT]),
    dp_event.PoissonSampledDpEvent(0.01, dp_event.GaussianDpEvent(1.1)),
    dp_event.SampledWithReplacementDpEvent(1000, 10, dp_event.GaussianDpEvent(1.0)),
    dp_event.SampledWithoutReplacementDpEvent(1000, 10, dp_event.LaplaceDpEvent(1.0)),
    dp_event.SingleEpochTreeAggregationDpEvent(2.0, [3, 4]),
    dp_event.SingleEpochTreeAggregationDpEvent(2.0, 5),
    dp_event.RepeatAndSelectDpEvent(GAUSS, 3.5, math.inf),
    dp_event.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [0.5, 0.5]),
    dp_event.TruncatedSubsampledGaussianDpEvent(10_000, 0.01, 120, 1.3),
]


def test_every_registered_type_has_an_example() -> None:
    assert {type(e).__name__ for e in EXAMPLES} == set(EVENT_TYPES)


@pytest.mark.parametrize("event", EXAMPLES, ids=lambda e: type(e).__name__)
def test_round_trip_through_strict_json(event: dp_event.DpEvent) -> None:
    text = json.dumps(event_to_json(event), allow_nan=False)  # strict JSON: no NaN/Infinity literals
    back = event_from_json(json.loads(text))
    assert back == event
    assert type(back) is type(event)
    assert event_to_json(back) == event_to_json(event)


def test_json_shape_is_readable() -> None:
    assert event_to_json(SVT) == {"type": "EpsilonDeltaDpEvent", "epsilon": 0.05, "delta": 0.0}
    assert event_to_json(dp_event.SelfComposedDpEvent(GAUSS, 2)) == {
        "type": "SelfComposedDpEvent",
        "event": {"type": "GaussianDpEvent", "noise_multiplier": 15.26},
        "count": 2,
    }
    assert event_to_json(EpsilonDeltaDpEvent(math.inf))["epsilon"] == {"float": "inf"}


def test_nan_round_trips() -> None:
    back = event_from_json(json.loads(json.dumps(event_to_json(dp_event.GaussianDpEvent(math.nan)))))
    assert isinstance(back, dp_event.GaussianDpEvent) and math.isnan(back.noise_multiplier)


def test_numpy_scalars_serialise_as_python_numbers() -> None:
    np = pytest.importorskip("numpy")
    obj = event_to_json(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(np.float64(2.5)), np.int64(3)))
    assert json.loads(json.dumps(obj)) == obj
    assert event_from_json(obj) == dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(2.5), 3)


def test_epsilon_delta_event_mirrors_upstream() -> None:
    event = EpsilonDeltaDpEvent(epsilon=0.5)
    assert isinstance(event, dp_event.DpEvent)
    assert event.delta == 0.0
    assert [f.name for f in attr.fields(EpsilonDeltaDpEvent)] == ["epsilon", "delta"]
    with pytest.raises(attr.exceptions.FrozenInstanceError):
        event.epsilon = 1.0  # type: ignore[misc]
    assert hash(event) == hash(EpsilonDeltaDpEvent(0.5, 0.0))
    # dp-accounting's own NamedTuple serialisation works for it as well
    assert dp_event.DpEvent.from_named_tuple(event.to_named_tuple()) == event


# -- errors -------------------------------------------------------------------------------------------------


@attr.s(frozen=True, slots=True, auto_attribs=True)
class _CustomEvent(dp_event.DpEvent):
    value: Any = None


def test_unregistered_event_classes_are_refused() -> None:
    with pytest.raises(InvalidParameterError, match="cannot serialise an event of type .*_CustomEvent"):
        event_to_json(_CustomEvent())
    with pytest.raises(InvalidParameterError, match="cannot serialise an event of type"):
        event_to_json(dp_event.ComposedDpEvent([_CustomEvent()]))


def test_unserialisable_field_values_are_refused() -> None:
    with pytest.raises(InvalidParameterError, match=r"cannot serialise field GaussianDpEvent.noise_multiplier"):
        event_to_json(dp_event.GaussianDpEvent(object()))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ([1, 2], "must be a dict with a 'type' key"),
        ({"noise_multiplier": 1.0}, "must be a dict with a 'type' key"),
        ({"type": "os.system"}, "unknown DpEvent type 'os.system'"),
        ({"type": 3}, "unknown DpEvent type 3"),
        ({"type": "GaussianDpEvent"}, r"fields of serialised GaussianDpEvent must be \['noise_multiplier'\]"),
        ({"type": "GaussianDpEvent", "noise_multiplier": 1.0, "x": 1}, "fields of serialised GaussianDpEvent"),
        ({"type": "GaussianDpEvent", "noise_multiplier": {"float": "big"}}, "bad non-finite float"),
        ({"type": "SelfComposedDpEvent", "event": {"type": "Nope"}, "count": 2}, "unknown DpEvent type 'Nope'"),
    ],
)
def test_malformed_json_is_refused(obj: Any, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        event_from_json(obj)


def test_optional_fields_may_be_omitted() -> None:
    assert event_from_json({"type": "EpsilonDeltaDpEvent", "epsilon": 1.0}) == EpsilonDeltaDpEvent(1.0, 0.0)
    assert event_from_json({"type": "ZCDpEvent", "rho": 0.5}) == dp_event.ZCDpEvent(0.5)
