"""DpEvents: the record of what a mechanism released, and their lossless JSON form.

A :class:`dp_accounting.DpEvent` states the mathematics of one release (``GaussianDpEvent(noise_multiplier)``
means Gaussian noise of standard deviation ``noise_multiplier × L2-sensitivity``); accountants turn a tree of
them into an (ε, δ) guarantee. dp-accounting 0.6.0 lacks the event for a mechanism known only by its (ε, δ)
guarantee, such as AboveThreshold; :class:`EpsilonDeltaDpEvent` adds it under the name and fields of the
upstream class.

The JSON form is what the budget ledger stores. It is built from an explicit registry of event classes and never
imports a module named in the data (unlike ``DpEvent.from_named_tuple``), so reading a ledger cannot run code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import attr
from dp_accounting import dp_event

from dppca_dask.errors import InvalidParameterError

__all__ = [
    "EVENT_TYPES",
    "EpsilonDeltaDpEvent",
    "event_from_json",
    "event_to_json",
]


@attr.s(frozen=True, slots=True, auto_attribs=True)
class EpsilonDeltaDpEvent(dp_event.DpEvent):
    """A mechanism known only by its (ε, δ)-DP guarantee.

    For every pair of neighbouring datasets and every measurable set S of outputs,
    ``P[M(D) ∈ S] ≤ exp(epsilon)·P[M(D') ∈ S] + delta``. With ``delta = 0`` it is a pure ε-DP mechanism, e.g.
    AboveThreshold (the sparse vector technique).

    Accounting treats it as the worst case among all (ε, δ)-DP mechanisms: the PLD accountant composes the
    dominating pair of Kairouz–Oh–Viswanath (privacy loss ``+ε``, ``−ε``, and ``+∞`` with probability δ), which
    makes the composition of such events exact in the worst case; the RDP accountant uses ``ε-DP ⇒ ε²/2-zCDP``
    (Bun–Steinke 2016, Prop. 1.4) and cannot account for ``delta > 0``.

    Mirrors ``EpsilonDeltaDpEvent`` of dp-accounting's main branch (not in release 0.6.0), same name and fields.

    Attributes
    ----------
    epsilon
        ε ≥ 0 (``math.inf`` for no guarantee).
    delta
        δ in [0, 1].
    """

    epsilon: float
    delta: float = 0.0


#: Every event class :func:`event_to_json` and :func:`event_from_json` accept, by class name.
EVENT_TYPES: Mapping[str, type[dp_event.DpEvent]] = {
    cls.__name__: cls
    for cls in (
        dp_event.NoOpDpEvent,
        dp_event.NonPrivateDpEvent,
        dp_event.UnsupportedDpEvent,
        dp_event.GaussianDpEvent,
        dp_event.LaplaceDpEvent,
        dp_event.DiscreteLaplaceDpEvent,
        dp_event.RandomizedResponseDpEvent,
        dp_event.ZCDpEvent,
        dp_event.SelfComposedDpEvent,
        dp_event.ComposedDpEvent,
        dp_event.PoissonSampledDpEvent,
        dp_event.SampledWithReplacementDpEvent,
        dp_event.SampledWithoutReplacementDpEvent,
        dp_event.SingleEpochTreeAggregationDpEvent,
        dp_event.RepeatAndSelectDpEvent,
        dp_event.MixtureOfGaussiansDpEvent,
        dp_event.TruncatedSubsampledGaussianDpEvent,
        EpsilonDeltaDpEvent,
    )
}

_TYPE_KEY = "type"
_FLOAT_KEY = "float"


def _value_to_json(value: Any, where: str) -> Any:
    if isinstance(value, dp_event.DpEvent):
        return event_to_json(value)
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        # JSON has no inf or nan: spell them out so that the round trip is exact.
        return value if math.isfinite(value) else {_FLOAT_KEY: repr(value)}
    if isinstance(value, Sequence):
        return [_value_to_json(v, where) for v in value]
    # numpy scalars and other numbers: keep their exact value as a Python int or float.
    if hasattr(value, "item"):
        return _value_to_json(value.item(), where)
    raise InvalidParameterError(
        f"cannot serialise field {where} of type {type(value).__name__}; "
        "DpEvent fields must be numbers, events or lists of them"
    )


def event_to_json(event: dp_event.DpEvent) -> dict[str, Any]:
    """Return a JSON-safe dict that :func:`event_from_json` turns back into an equal event.

    Parameters
    ----------
    event
        Any event of :data:`EVENT_TYPES`, nested to any depth.

    Returns
    -------
    dict
        ``{"type": <class name>, <field>: <value>, ...}``; nested events are nested dicts, sequences are lists,
        and non-finite floats are ``{"float": "inf"}`` (or ``"-inf"``, ``"nan"``). Floats keep their exact
        value (Python's ``json`` writes the shortest repr that round-trips).

    Raises
    ------
    InvalidParameterError
        If ``event`` (or a nested event) is not of a registered type.

    Notes
    -----
    Sequences come back as lists, the type the upstream classes declare (``ComposedDpEvent.events`` is
    ``List[DpEvent]``): an event built with a tuple compares unequal to its round trip under attrs' equality.
    """
    cls = type(event)
    if EVENT_TYPES.get(cls.__name__) is not cls:
        raise InvalidParameterError(
            f"cannot serialise an event of type {cls.__module__}.{cls.__qualname__}; "
            f"use one of {', '.join(sorted(EVENT_TYPES))}"
        )
    out: dict[str, Any] = {_TYPE_KEY: cls.__name__}
    for field in attr.fields(cls):
        out[field.name] = _value_to_json(getattr(event, field.name), f"{cls.__name__}.{field.name}")
    return out


def _value_from_json(value: Any, where: str) -> Any:
    if isinstance(value, Mapping):
        if set(value) == {_FLOAT_KEY}:
            text = value[_FLOAT_KEY]
            if text not in ("inf", "-inf", "nan"):
                raise InvalidParameterError(
                    f"bad non-finite float in {where}; got {text!r}; expected 'inf', '-inf' or 'nan'"
                )
            return float(text)
        return event_from_json(value)
    if isinstance(value, list):
        return [_value_from_json(v, where) for v in value]
    return value


def event_from_json(obj: Mapping[str, Any]) -> dp_event.DpEvent:
    """Rebuild the event that :func:`event_to_json` serialised.

    Parameters
    ----------
    obj
        A dict as produced by :func:`event_to_json` (e.g. read back from the ledger).

    Returns
    -------
    DpEvent
        An event equal to the one serialised.

    Raises
    ------
    InvalidParameterError
        If ``obj`` names an unknown event type, or its fields do not match that type's fields.
    """
    if not isinstance(obj, Mapping) or _TYPE_KEY not in obj:
        raise InvalidParameterError(
            f"a serialised DpEvent must be a dict with a 'type' key; got {obj!r:.200}; "
            "pass the output of event_to_json"
        )
    name = obj[_TYPE_KEY]
    cls = EVENT_TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise InvalidParameterError(
            f"unknown DpEvent type {name!r:.100}; known types: {', '.join(sorted(EVENT_TYPES))}"
        )
    names = {field.name for field in attr.fields(cls)}
    given = set(obj) - {_TYPE_KEY}
    required = {field.name for field in attr.fields(cls) if field.default is attr.NOTHING}
    if not given <= names or not required <= given:
        raise InvalidParameterError(
            f"fields of serialised {name} must be {sorted(names)}; got {sorted(given)}; "
            "pass the output of event_to_json"
        )
    kwargs = {key: _value_from_json(obj[key], f"{name}.{key}") for key in given}
    return cls(**kwargs)

