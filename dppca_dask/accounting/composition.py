"""Composition of DpEvent trees: (ε, δ) by the PLD accountant (primary) and the RDP accountant (cross-check).

The tree is first reduced to its leaves with multiplicities (``ComposedDpEvent`` and ``SelfComposedDpEvent``
are adaptive composition, so only the multiset of leaves matters), then:

- all Gaussian leaves merge into **one** Gaussian: T Gaussian mechanisms of multipliers ``m_i`` compose exactly
  to one of multiplier ``(Σ 1/m_i²)^(-1/2)`` (their privacy-loss random variables are normal, ``N(μ_i, 2μ_i)``
  with ``μ_i = 1/(2m_i²)``, and so is their sum). This is exact and makes the PLD both faster and tighter than
  composing T discretised Gaussians;
- :class:`~dppca_dask.accounting.events.EpsilonDeltaDpEvent` leaves (e.g. AboveThreshold) enter the PLD as the
  worst case of all (ε, δ)-DP mechanisms (``privacy_loss_distribution.from_privacy_parameters``), which is
  sound for any mechanism with that guarantee and exact for the worst one; equal leaves are self-composed once;
- Laplace leaves enter as the Laplace PLD, self-composed per distinct multiplier;
- anything else the dp-accounting ``PLDAccountant`` supports (subsampled Gaussians, discrete Laplace, ...) is
  composed by it and merged in;
- a ``NonPrivateDpEvent`` (or a zero multiplier) makes ε infinite; ``NoOpDpEvent`` is ignored.

A tree of Gaussians only is evaluated in closed form (Balle–Wang 2018, the exact privacy profile of one
Gaussian), which is the value the discretised PLD approximates from above.

For RDP the same leaves go to ``dp_accounting.rdp.RdpAccountant`` with pure ε-DP leaves as ``ZCDpEvent(ε²/2)``
(Bun–Steinke); the δ of ``EpsilonDeltaDpEvent(ε, δ)`` leaves is added to the RDP figure's δ (approximate zCDP).

All PLDs use pessimistic discretisation (dp-accounting's default): the ε they report is an upper bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from dp_accounting import dp_event
from dp_accounting.pld import common as pld_common
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from dp_accounting.privacy_accountant import NeighboringRelation, UnsupportedEventError
from dp_accounting.rdp import rdp_privacy_accountant
from scipy import stats

from dppca_dask.accounting.events import EpsilonDeltaDpEvent
from dppca_dask.errors import InvalidParameterError

__all__ = [
    "DEFAULT_VALUE_DISCRETIZATION_INTERVAL",
    "Accountant",
    "delta_for",
    "epsilon_for",
    "flatten_events",
    "gaussian_delta",
    "gaussian_epsilon",
    "merged_gaussian_multiplier",
    "pld_interval_for",
    "summarise_events",
]

Accountant = Literal["pld", "rdp"]

#: Widest privacy-loss grid of the PLDs built here (dp-accounting's default); see :func:`pld_interval_for`.
DEFAULT_VALUE_DISCRETIZATION_INTERVAL = 1e-4
#: Grid points per unit of the smallest pure ε in a tree (its pessimistic rounding then costs at most 1%).
_POINTS_PER_EPSILON = 100

Events: TypeAlias = "dp_event.DpEvent | Iterable[dp_event.DpEvent]"


def _as_list(events: Events) -> list[dp_event.DpEvent]:
    if isinstance(events, dp_event.DpEvent):
        return [events]
    out: list[dp_event.DpEvent] = list(events)
    for e in out:
        if not isinstance(e, dp_event.DpEvent):
            raise InvalidParameterError(
                f"events must be DpEvents; got {type(e).__name__}; pass the events the mechanisms returned"
            )
    return out


def flatten_events(events: Events) -> list[tuple[dp_event.DpEvent, int]]:
    """The leaves of an event tree with their multiplicities, in order of first appearance.

    ``ComposedDpEvent`` and ``SelfComposedDpEvent`` are unfolded (counts multiply); ``NoOpDpEvent`` is dropped;
    equal leaves are merged (events are frozen attrs classes, so equality is by value).

    Parameters
    ----------
    events
        One event or an iterable of events (composed).

    Returns
    -------
    list of (DpEvent, int)
        Leaves and how many times each is composed; the accounting of this list equals that of ``events``.
    """
    leaves: list[dp_event.DpEvent] = []  # in order of first appearance
    counts: list[int] = []
    index: dict[dp_event.DpEvent, int] = {}

    def add(event: dp_event.DpEvent, count: int) -> None:
        try:
            position = index.get(event)
        except TypeError:  # events with list fields are unhashable: compare by value
            position = next((i for i, e in enumerate(leaves) if e == event), None)
        else:
            if position is None:
                index[event] = len(leaves)
        if position is None:
            leaves.append(event)
            counts.append(count)
        else:
            counts[position] += count

    def walk(event: dp_event.DpEvent, count: int) -> None:
        if isinstance(event, dp_event.SelfComposedDpEvent):
            if not isinstance(event.count, int) or event.count < 0:
                raise InvalidParameterError(
                    f"SelfComposedDpEvent.count must be an int >= 0; got {event.count!r}"
                )
            walk(event.event, count * event.count)
        elif isinstance(event, dp_event.ComposedDpEvent):
            for e in event.events:
                walk(e, count)
        elif isinstance(event, dp_event.NoOpDpEvent) or count == 0:
            return
        elif isinstance(event, dp_event.DpEvent):
            add(event, count)
        else:
            raise InvalidParameterError(f"events must be DpEvents; got {type(event).__name__}")

    for e in _as_list(events):
        walk(e, 1)
    return list(zip(leaves, counts))


def summarise_events(events: Events) -> list[dp_event.DpEvent]:
    """A compact list with the same accounting: each leaf once, as ``SelfComposedDpEvent`` when repeated."""
    return [
        leaf if count == 1 else dp_event.SelfComposedDpEvent(leaf, count) for leaf, count in flatten_events(events)
    ]


def merged_gaussian_multiplier(multipliers: Iterable[tuple[float, int]]) -> float:
    """The multiplier of the one Gaussian equivalent to composing Gaussians ``(m_i, count_i)``: ``(Σ c_i/m_i²)^(-1/2)``.

    Exact: Gaussian privacy losses are normal and their sum is the privacy loss of that one Gaussian.
    ``math.inf`` multipliers contribute nothing; an empty input gives ``math.inf``.
    """
    inverse_square = 0.0
    for m, count in multipliers:
        if math.isnan(m) or m <= 0:
            raise InvalidParameterError(f"a Gaussian noise_multiplier must be > 0; got {m}")
        inverse_square += count / (m * m)
    return math.inf if inverse_square == 0.0 else 1.0 / math.sqrt(inverse_square)


@dataclass
class _Leaves:
    """An event tree reduced to what the accountants need."""

    non_private: bool = False
    gaussian: dict[float, int] = field(default_factory=dict)
    epsilon_delta: dict[tuple[float, float], int] = field(default_factory=dict)
    laplace: dict[float, int] = field(default_factory=dict)
    zcdp: dict[tuple[float, float], int] = field(default_factory=dict)
    other: list[tuple[dp_event.DpEvent, int]] = field(default_factory=list)

    @property
    def gaussian_only(self) -> bool:
        return not (self.epsilon_delta or self.laplace or self.zcdp or self.other)

    def add_multiplier(self, table: dict[float, int], event: str, multiplier: float, count: int) -> None:
        """Count ``count`` Gaussian or Laplace leaves of noise multiplier ``multiplier`` in ``table``: a multiplier
        of 0 adds no noise (not private), an infinite one releases nothing (no privacy cost)."""
        if math.isnan(multiplier) or multiplier < 0:
            raise InvalidParameterError(f"{event}.noise_multiplier must be >= 0; got {multiplier}")
        if multiplier == 0.0:
            self.non_private = True
        elif not math.isinf(multiplier):
            table[multiplier] = table.get(multiplier, 0) + count


def _leaves(events: Events) -> _Leaves:
    out = _Leaves()
    for leaf, count in flatten_events(events):
        if isinstance(leaf, dp_event.NonPrivateDpEvent):
            out.non_private = True
        elif isinstance(leaf, dp_event.GaussianDpEvent):
            out.add_multiplier(out.gaussian, "GaussianDpEvent", float(leaf.noise_multiplier), count)
        elif isinstance(leaf, dp_event.LaplaceDpEvent):
            out.add_multiplier(out.laplace, "LaplaceDpEvent", float(leaf.noise_multiplier), count)
        elif isinstance(leaf, EpsilonDeltaDpEvent):
            eps, delta = float(leaf.epsilon), float(leaf.delta)
            if math.isnan(eps) or eps < 0 or math.isnan(delta) or not 0.0 <= delta <= 1.0:
                raise InvalidParameterError(
                    f"EpsilonDeltaDpEvent needs epsilon >= 0 and delta in [0, 1]; got ({eps}, {delta})"
                )
            if math.isinf(eps) or delta == 1.0:
                out.non_private = True
            elif eps > 0.0 or delta > 0.0:
                key = (eps, delta)
                out.epsilon_delta[key] = out.epsilon_delta.get(key, 0) + count
        elif isinstance(leaf, dp_event.ZCDpEvent):
            rho, xi = float(leaf.rho), float(leaf.xi)
            if math.isnan(rho) or rho < 0 or math.isnan(xi) or xi < 0:
                raise InvalidParameterError(f"ZCDpEvent needs rho >= 0 and xi >= 0; got ({rho}, {xi})")
            if math.isinf(rho) or math.isinf(xi):
                out.non_private = True
            elif rho > 0.0 or xi > 0.0:
                out.zcdp[(rho, xi)] = out.zcdp.get((rho, xi), 0) + count
        else:
            out.other.append((leaf, count))
    return out


def _interval(leaves: _Leaves) -> float:
    interval = DEFAULT_VALUE_DISCRETIZATION_INTERVAL
    if leaves.gaussian:
        interval *= max(1.0, 1.0 / merged_gaussian_multiplier(leaves.gaussian.items()))
    smallest = min((eps for eps, _ in leaves.epsilon_delta if eps > 0), default=math.inf)
    if math.isfinite(smallest):
        interval = smallest / max(_POINTS_PER_EPSILON, math.ceil(smallest / interval))
    return interval


def pld_interval_for(events: Events) -> float:
    """The PLD grid width used for ``events`` by default.

    Start from 1e-4 (dp-accounting's default), widened to ``1e-4/m`` when the merged Gaussian has multiplier
    ``m < 1`` (its privacy loss then spreads over ``~1/m``, so the grid keeps the same number of points and the
    same relative precision); then, when the tree has pure ε-DP events, shrink it to ``ε_min/n`` with the
    smallest integer ``n ≥ 100`` that does not widen it. ``from_privacy_parameters`` rounds each ε *up* to the
    grid: with ``ε_min`` a whole number of grid steps it is (up to floating point) represented exactly, and no
    pure ε is inflated by more than 1%. Any grid gives an upper bound (pessimistic discretisation).
    """
    return _interval(_leaves(events))


# ----------------------------------------------------------------------------------------------------------
# Gaussian in closed form (Balle & Wang 2018, Theorem 8)


def _gaussian_log_delta(noise_multiplier: float, epsilon: float) -> float:
    """ln δ(ε) of one Gaussian: ``Φ(1/(2s) − εs) − e^ε·Φ(−1/(2s) − εs)``, computed in log space."""
    s = noise_multiplier
    x = stats.norm.logcdf(1.0 / (2.0 * s) - epsilon * s)
    y = epsilon + stats.norm.logcdf(-1.0 / (2.0 * s) - epsilon * s)
    if y >= x:
        return -math.inf
    return float(x + math.log1p(-math.exp(y - x)))


def gaussian_delta(noise_multiplier: float, epsilon: float) -> float:
    """Exact δ at ε of the Gaussian mechanism with the given multiplier (Balle–Wang 2018).

    Parameters
    ----------
    noise_multiplier
        Noise std / L2 sensitivity, > 0 (``math.inf`` gives 0).
    epsilon
        ε ≥ 0.
    """
    if math.isnan(noise_multiplier) or noise_multiplier <= 0:
        raise InvalidParameterError(f"noise_multiplier must be > 0; got {noise_multiplier}")
    if math.isnan(epsilon) or epsilon < 0:
        raise InvalidParameterError(f"epsilon must be >= 0; got {epsilon}")
    if math.isinf(noise_multiplier) or math.isinf(epsilon):
        return 0.0
    return math.exp(_gaussian_log_delta(noise_multiplier, epsilon))


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
    """Exact ε at δ of the Gaussian mechanism (Balle–Wang 2018), never below the true value.

    dp-accounting's ``get_epsilon_gaussian`` finds the root (Brent's method); the answer is then nudged upward until :func:`gaussian_delta` at it is at
    most ``delta``, so rounding can only make it larger.
    """
    if math.isnan(noise_multiplier) or noise_multiplier <= 0:
        raise InvalidParameterError(f"noise_multiplier must be > 0; got {noise_multiplier}")
    if math.isnan(delta) or not 0.0 <= delta <= 1.0:
        raise InvalidParameterError(f"delta must be in [0, 1]; got {delta}")
    if math.isinf(noise_multiplier) or delta == 1.0:
        return 0.0
    if delta == 0.0:
        return math.inf
    if gaussian_delta(noise_multiplier, 0.0) <= delta:
        return 0.0
    from dp_accounting.gaussian_mechanism import get_epsilon_gaussian

    eps = float(get_epsilon_gaussian(noise_multiplier, delta, tol=1e-15))
    while gaussian_delta(noise_multiplier, eps) > delta:  # the very check callers make
        eps = eps * (1.0 + 1e-13) + 1e-15
    return float(eps)


# ----------------------------------------------------------------------------------------------------------
# PLD


def _pld(leaves: _Leaves, value_discretization_interval: float) -> pld_lib.PrivacyLossDistribution | None:
    """The composed PLD, or None when a leaf is non-private."""
    if leaves.zcdp:
        (rho, xi), _ = next(iter(leaves.zcdp.items()))
        raise InvalidParameterError(
            f"the PLD accountant cannot account for ZCDpEvent(rho={rho}, xi={xi}) (no PLD form); "
            "use accountant='rdp'"
        )
    if leaves.non_private:
        return None
    vdi = value_discretization_interval
    pld: pld_lib.PrivacyLossDistribution | None = None

    def add(part: pld_lib.PrivacyLossDistribution) -> None:
        nonlocal pld
        pld = part if pld is None else pld.compose(part)

    if leaves.gaussian:
        m = merged_gaussian_multiplier(leaves.gaussian.items())
        add(pld_lib.from_gaussian_mechanism(standard_deviation=m, value_discretization_interval=vdi))
    for (eps, delta), count in leaves.epsilon_delta.items():
        params = pld_common.DifferentialPrivacyParameters(epsilon=eps, delta=delta)
        add(pld_lib.from_privacy_parameters(params, value_discretization_interval=vdi).self_compose(count))
    for b, count in leaves.laplace.items():
        add(pld_lib.from_laplace_mechanism(b, value_discretization_interval=vdi).self_compose(count))
    if leaves.other:
        accountant = pld_privacy_accountant.PLDAccountant(
            NeighboringRelation.ADD_OR_REMOVE_ONE, value_discretization_interval=vdi
        )
        for event, count in leaves.other:
            try:
                accountant.compose(event, count)
            except UnsupportedEventError as exc:
                raise InvalidParameterError(
                    f"the PLD accountant cannot account for {event!r:.200}; "
                    "model the release with a supported DpEvent"
                ) from exc
        # dp-accounting 0.6.0 exposes no public accessor for the composed PLD of an accountant.
        if accountant._contains_non_dp_event:  # noqa: SLF001
            return None
        add(accountant._pld)  # noqa: SLF001
    if pld is None:
        pld = pld_lib.identity(value_discretization_interval=vdi)
    return pld


def _rdp_accountant(leaves: _Leaves) -> rdp_privacy_accountant.RdpAccountant | None:
    """The RDP accountant holding the composition, or None when a leaf is non-private.

    ``EpsilonDeltaDpEvent(ε, δ)`` leaves enter as ``ZCDpEvent(ε²/2)``; their δ is not in the accountant (see
    :func:`_rdp_delta_spent`).
    """
    if leaves.non_private:
        return None
    accountant = rdp_privacy_accountant.RdpAccountant()
    if leaves.gaussian:
        accountant.compose(dp_event.GaussianDpEvent(merged_gaussian_multiplier(leaves.gaussian.items())))
    for (eps, _delta), count in leaves.epsilon_delta.items():
        if eps > 0.0:
            accountant.compose(dp_event.ZCDpEvent(eps * eps / 2.0), count)
    for b, count in leaves.laplace.items():
        accountant.compose(dp_event.LaplaceDpEvent(b), count)
    for (rho, xi), count in leaves.zcdp.items():
        accountant.compose(dp_event.ZCDpEvent(rho, xi), count)
    for event, count in leaves.other:
        try:
            accountant.compose(event, count)
        except UnsupportedEventError as exc:
            raise InvalidParameterError(
                f"the RDP accountant cannot account for {event!r:.200}; use accountant='pld'"
            ) from exc
    return accountant


def _rdp_delta_spent(leaves: _Leaves) -> float:
    """``Σ count·δ`` of the ``EpsilonDeltaDpEvent`` leaves, which the RDP figure adds to its own δ.

    An (ε, δ)-DP mechanism is δ-approximately ε²/2-zCDP, approximate zCDP composes by adding the δs, and a
    δ-approximately ρ-zCDP mechanism is ``(ε', δ + δ')``-DP whenever ρ-zCDP gives ``(ε', δ')`` (Bun & Steinke
    2016, Definition 1.2 and Section 8). So the RDP figure at δ is the accountant's ε at ``δ − Σ count·δ``.
    """
    return math.fsum(delta * count for (_eps, delta), count in leaves.epsilon_delta.items())


def _check_accountant(accountant: str) -> None:
    if accountant not in ("pld", "rdp"):
        raise InvalidParameterError(f"accountant must be 'pld' or 'rdp'; got {accountant!r}")


def _check_interval(value_discretization_interval: float | None) -> None:
    if value_discretization_interval is not None and not (0 < value_discretization_interval <= 1.0):
        raise InvalidParameterError(
            f"value_discretization_interval must be in (0, 1]; got {value_discretization_interval}"
        )


def epsilon_for(
    events: Events,
    *,
    delta: float,
    accountant: Accountant = "pld",
    value_discretization_interval: float | None = None,
) -> float:
    """ε at ``delta`` of the adaptive composition of ``events``.

    Parameters
    ----------
    events
        One event or an iterable of events, any tree of the supported types (see the module docstring).
    delta
        Target δ in [0, 1].
    accountant
        ``"pld"`` (primary, tight) or ``"rdp"`` (cross-check).
    value_discretization_interval
        PLD grid width; smaller is tighter and slower. Every PLD is pessimistic, so any width gives an upper
        bound. Default: :func:`pld_interval_for` ``(events)``. Trees of Gaussians only are evaluated in closed
        form (exact), without a grid.

    Returns
    -------
    float
        The smallest ε the accountant certifies at ``delta`` (``math.inf`` if there is none, or a leaf is
        non-private).

    Raises
    ------
    InvalidParameterError
        For a bad ``delta`` or ``accountant``, an invalid event, or an event the accountant cannot handle.
    """
    _check_accountant(accountant)
    _check_interval(value_discretization_interval)
    if math.isnan(delta) or not 0.0 <= delta <= 1.0:
        raise InvalidParameterError(f"delta must be in [0, 1]; got {delta}")
    leaves = _leaves(events)
    if accountant == "rdp":
        rdp = _rdp_accountant(leaves)
        if rdp is None:
            return math.inf
        remaining = delta - _rdp_delta_spent(leaves)
        if remaining <= 0.0:
            return math.inf
        return float(rdp.get_epsilon(remaining))
    if leaves.gaussian_only and not leaves.non_private:
        if not leaves.gaussian:
            return 0.0
        return gaussian_epsilon(merged_gaussian_multiplier(leaves.gaussian.items()), delta)
    pld = _pld(leaves, value_discretization_interval or _interval(leaves))
    if pld is None:
        return math.inf
    return float(pld.get_epsilon_for_delta(delta))


def delta_for(
    events: Events,
    *,
    epsilon: float,
    accountant: Accountant = "pld",
    value_discretization_interval: float | None = None,
) -> float:
    """δ at ``epsilon`` of the adaptive composition of ``events`` (the dual of :func:`epsilon_for`).

    Returns 1.0 when a leaf is non-private. Same parameters and errors as :func:`epsilon_for`.
    """
    _check_accountant(accountant)
    _check_interval(value_discretization_interval)
    if math.isnan(epsilon) or epsilon < 0:
        raise InvalidParameterError(f"epsilon must be >= 0; got {epsilon}")
    leaves = _leaves(events)
    if accountant == "rdp":
        rdp = _rdp_accountant(leaves)
        return 1.0 if rdp is None else min(1.0, float(rdp.get_delta(epsilon)) + _rdp_delta_spent(leaves))
    if leaves.gaussian_only and not leaves.non_private:
        if not leaves.gaussian:
            return 0.0
        return gaussian_delta(merged_gaussian_multiplier(leaves.gaussian.items()), epsilon)
    pld = _pld(leaves, value_discretization_interval or _interval(leaves))
    if pld is None:
        return 1.0
    return float(min(1.0, float(pld.get_delta_for_epsilon(epsilon))))
