"""The privacy report attached to every result, built from the DpEvents a run actually emitted."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dp_accounting import dp_event

from dppca_dask.accounting.composition import flatten_events, summarise_events
from dppca_dask.accounting.events import EpsilonDeltaDpEvent, event_to_json
from dppca_dask.errors import InvalidParameterError

__all__ = [
    "ADD_REMOVE_ROW",
    "ENTRY_CHANGE",
    "NOT_PRIVATE",
    "REPLACE_ROW",
    "ROW_CHANGE",
    "PrivacyReport",
    "build_report",
    "group_events",
]

#: Neighbouring relations, as reports print them.
ADD_REMOVE_ROW = "add/remove one row"
REPLACE_ROW = "replace one row"
ENTRY_CHANGE = "one entry changes by at most 1"
ROW_CHANGE = "one row changes by a vector of L2 norm at most 1"
NOT_PRIVATE = "none (not private)"


def _json_number(value: Any) -> Any:
    """Floats as JSON allows them: non-finite values become the strings ``"inf"``, ``"-inf"``, ``"nan"``."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, Mapping):
        return {str(k): _json_number(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_number(v) for v in value]
    return value


@dataclass(frozen=True, slots=True)
class PrivacyReport:
    """What a release guarantees: (ε, δ) for a named neighbouring relation, and how that was computed.

    Every number here is public: it depends only on the noise parameters, never on the data.
    """

    epsilon: float
    """The guarantee's ε at ``delta`` by ``accountant`` (``math.inf`` when not private)."""
    delta: float
    """δ of the guarantee (the target δ)."""
    neighbouring: str
    """Neighbouring relation the guarantee is for, e.g. ``"add/remove one row"``."""
    accountant: str
    """Accountant of ``epsilon``: ``"pld"`` (or ``"rdp"`` when an event has no PLD form)."""
    figures: Mapping[str, Any]
    """ε at ``delta`` by each accountant: ``"pld"``, ``"rdp"`` (None when unavailable), optional ``"paper"``."""
    target_epsilon: float
    """ε the run was calibrated for."""
    target_delta: float
    """δ the run was calibrated for."""
    events: tuple[Mapping[str, Any], ...]
    """The emitted DpEvents, summarised (each distinct event once, with its count) and serialised as JSON."""
    private: bool
    """False for seeded runs and non-private baselines: the figures then describe the noise, not a guarantee."""
    group_privacy: Mapping[str, Any] | None = None
    """For add/remove relations: the replace-one guarantee by group privacy (two add/remove steps)."""
    caveats: tuple[str, ...] = ()
    """What the guarantee does not cover for this release (public text), e.g. a shape inferred from the data."""
    meets_target: bool = field(init=False)
    """Whether ``epsilon ≤ target_epsilon``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "figures", dict(self.figures))
        object.__setattr__(self, "events", tuple(dict(e) for e in self.events))
        if self.group_privacy is not None:
            object.__setattr__(self, "group_privacy", dict(self.group_privacy))
        object.__setattr__(self, "caveats", tuple(str(c) for c in self.caveats))
        object.__setattr__(self, "meets_target", bool(self.epsilon <= self.target_epsilon))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (strict JSON: infinite ε becomes the string ``"inf"``)."""
        out = {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "neighbouring": self.neighbouring,
            "accountant": self.accountant,
            "figures": dict(self.figures),
            "target_epsilon": self.target_epsilon,
            "target_delta": self.target_delta,
            "meets_target": self.meets_target,
            "events": [dict(e) for e in self.events],
            "private": self.private,
            "group_privacy": None if self.group_privacy is None else dict(self.group_privacy),
            "caveats": list(self.caveats),
        }
        return _json_number(out)  # type: ignore[no-any-return]

    def summary(self) -> str:
        """One line: ``(ε, δ)-DP for <relation> (accountant)``, or that it is not private."""
        if not self.private:
            line = f"not differentially private (noise equivalent to ({self.epsilon:.4g}, {self.delta:.3g}))"
        else:
            line = f"({self.epsilon:.4g}, {self.delta:.3g})-DP for {self.neighbouring} ({self.accountant})"
        return line + "".join(f"; {caveat}" for caveat in self.caveats)


def group_events(
    events: dp_event.DpEvent | Iterable[dp_event.DpEvent], *, group_size: int = 2
) -> list[dp_event.DpEvent]:
    """The events with every sensitivity multiplied by ``group_size`` (group privacy).

    Parameters
    ----------
    events
        Events whose guarantee holds for one add/remove step.
    group_size
        Number of steps; 2 turns add/remove into replace-one.

    Returns
    -------
    list of DpEvent
        Gaussian and Laplace multipliers divided by ``group_size``; ``EpsilonDeltaDpEvent(ε, δ)`` with ε > 0
        becomes ``(kε, δ·Σ_{i<k} e^{iε})``; ``ZCDpEvent(ρ)`` becomes ``ZCDpEvent(k²ρ)`` (Bun–Steinke 2016,
        Prop. 27); ``EpsilonDeltaDpEvent(0, δ)`` (a failure term), no-op and non-private events are unchanged.

    Raises
    ------
    InvalidParameterError
        For an event whose group version is not known here (e.g. subsampled mechanisms, ``ZCDpEvent`` with
        ``xi > 0``), or ``group_size < 1``.

    Notes
    -----
    Under replace-one every query's sensitivity is at most twice its add/remove sensitivity (a replacement is a
    removal and an addition), so dividing the multipliers is sound; pure ε doubling is the generic group-privacy
    bound and can be loose (AboveThreshold on counts keeps its ε under replace-one, seed 004 spec §3.2).

    ``EpsilonDeltaDpEvent(0, δ)`` is this library's record of a *failure term*: the probability, over the
    mechanism's own secret randomness and on every dataset, that the sensitivity bound of another release fails
    (Hardt & Roth 2012, Lemma 4.1: ``‖eᵀΩ‖`` is bounded except with probability δ/4 for any fixed unit vector e).
    Under replace-one the two rows' difference is still one vector, bounded with the same probability, so the
    term keeps its δ. Do not use a zero-ε event for anything else.
    """
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 1:
        raise InvalidParameterError(f"group_size must be an integer >= 1; got {group_size!r}")
    k = group_size
    out: list[dp_event.DpEvent] = []
    for leaf, count in flatten_events(events):
        grouped: dp_event.DpEvent
        if isinstance(leaf, (dp_event.NoOpDpEvent, dp_event.NonPrivateDpEvent)):
            grouped = leaf
        elif isinstance(leaf, dp_event.GaussianDpEvent):
            grouped = dp_event.GaussianDpEvent(leaf.noise_multiplier / k)
        elif isinstance(leaf, dp_event.LaplaceDpEvent):
            grouped = dp_event.LaplaceDpEvent(leaf.noise_multiplier / k)
        elif isinstance(leaf, EpsilonDeltaDpEvent) and leaf.epsilon == 0:
            grouped = leaf  # a failure term over secret randomness (see Notes): not doubled
        elif isinstance(leaf, EpsilonDeltaDpEvent):
            growth = sum(math.exp(i * leaf.epsilon) for i in range(k))
            delta = 0.0 if leaf.delta == 0 else min(1.0, growth * leaf.delta)
            grouped = EpsilonDeltaDpEvent(k * leaf.epsilon, delta)
        elif isinstance(leaf, dp_event.ZCDpEvent) and leaf.xi == 0:
            grouped = dp_event.ZCDpEvent(k * k * leaf.rho)
        else:
            raise InvalidParameterError(
                f"no group-privacy form for {leaf!r:.200}; report the replace-one guarantee by other means"
            )
        out.append(grouped if count == 1 else dp_event.SelfComposedDpEvent(grouped, count))
    return out


def _as_event_list(events: dp_event.DpEvent | Iterable[dp_event.DpEvent]) -> list[dp_event.DpEvent]:
    return [events] if isinstance(events, dp_event.DpEvent) else list(events)


def _figure(events: list[dp_event.DpEvent], delta: float, accountant: str) -> float | None:
    from dppca_dask.accounting.calibration import cached_epsilon_for  # public inputs: cached like calibrations

    try:
        return cached_epsilon_for(events, delta=delta, accountant=accountant)  # type: ignore[arg-type]
    except InvalidParameterError:
        return None


def build_report(
    events: dp_event.DpEvent | Iterable[dp_event.DpEvent],
    *,
    target_epsilon: float,
    target_delta: float,
    neighbouring: str,
    private: bool = True,
    paper_figure: Mapping[str, Any] | None = None,
    replace_one_events: dp_event.DpEvent | Iterable[dp_event.DpEvent] | None = None,
    replace_one_method: str | None = None,
) -> PrivacyReport:
    """The privacy report of a run from the DpEvents it emitted.

    Parameters
    ----------
    events
        Every event the run's mechanisms returned (in any nesting).
    target_epsilon, target_delta
        The budget the run was calibrated for; the report's ε is computed at ``target_delta``.
    neighbouring
        The neighbouring relation the events' sensitivities refer to (use the module constants, e.g.
        :data:`ADD_REMOVE_ROW`).
    private
        False when the noise came from a seed (or the run is a non-private baseline).
    paper_figure
        The paper's own composition figure, if any (e.g.
        :func:`~dppca_dask.methods.adaptive_power.paper.paper_adaptive_power_epsilon`), stored under
        ``figures["paper"]`` for reference.
    replace_one_events
        For add/remove relations: the events of the same run restated for *replace one row* by the mechanism's
        own analysis (e.g. AboveThreshold counts keep sensitivity 1, a Gaussian's sensitivity doubles). Without
        them the replace-one figure is group privacy of size 2 (:func:`group_events`).
    replace_one_method
        How ``replace_one_events`` were derived (one sentence, stored in the report).

    Returns
    -------
    PrivacyReport
        ε by PLD (by RDP only if some event has no PLD form), both figures, and for add/remove relations the
        replace-one figure by group privacy.

    Raises
    ------
    InvalidParameterError
        For a bad target, an empty ``neighbouring``, or events neither accountant supports.
    """
    if not isinstance(neighbouring, str) or not neighbouring.strip():
        raise InvalidParameterError(
            f"neighbouring must name the relation; got {neighbouring!r}; e.g. {ADD_REMOVE_ROW!r}"
        )
    if math.isnan(target_epsilon) or target_epsilon < 0:
        raise InvalidParameterError(f"target_epsilon must be >= 0; got {target_epsilon}")
    if math.isnan(target_delta) or not 0.0 <= target_delta < 1.0:
        raise InvalidParameterError(f"target_delta must be in [0, 1); got {target_delta}")
    event_list = [events] if isinstance(events, dp_event.DpEvent) else list(events)
    pld = _figure(event_list, target_delta, "pld")
    rdp = _figure(event_list, target_delta, "rdp")
    if pld is not None:
        epsilon, accountant = pld, "pld"
    elif rdp is not None:
        epsilon, accountant = rdp, "rdp"
    else:
        raise InvalidParameterError(
            f"neither the PLD nor the RDP accountant supports these events: {event_list!r:.300}"
        )
    figures: dict[str, Any] = {"pld": pld, "rdp": rdp}
    if paper_figure is not None:
        figures["paper"] = dict(paper_figure)
    group: dict[str, Any] | None = None
    if neighbouring.startswith("add/remove"):
        method = "group privacy of size 2 (sensitivities doubled)"
        grouped: list[dp_event.DpEvent] | None
        if replace_one_events is not None:
            grouped = _as_event_list(replace_one_events)
            method = replace_one_method or "the mechanism's replace-one sensitivities"
        else:
            try:
                grouped = group_events(event_list, group_size=2)
            except InvalidParameterError:
                grouped = None
        value = None if grouped is None else _figure(grouped, target_delta, accountant)
        if value is not None:
            group = {
                "neighbouring": neighbouring.replace("add/remove", "replace", 1),
                "epsilon": value,
                "delta": float(target_delta),
                "accountant": accountant,
                "method": method,
            }
    return PrivacyReport(
        epsilon=float(epsilon),
        delta=float(target_delta),
        neighbouring=neighbouring,
        accountant=accountant,
        figures=figures,
        target_epsilon=float(target_epsilon),
        target_delta=float(target_delta),
        events=tuple(event_to_json(e) for e in summarise_events(event_list)),
        private=bool(private),
        group_privacy=group,
    )
