"""Centring and the budget of a centred plan: the analyst's options (:class:`CentringOptions`), the centre (none,
a public mean, or the private mean of the rows clipped to c, projected onto the ball of radius c), the public bound
``c + r`` on a centred row's norm, and the split of the user's (ε, δ) between the releases beside a plan's main one
(:class:`CentredReleases`: the row-norm quantile or clipped fraction, the private mean, the explained variance).

Used by the block run (:mod:`~dppca_dask.methods.adaptive_power.block`), the centred Analyze Gauss run
(:mod:`dppca_dask.methods.analyze_gauss.centred`) and the automatic choice between them
(:mod:`~dppca_dask.methods.adaptive_power.auto`). Public values only: nothing here depends on the data, except the
private mean's release.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.centred import private_mean
from dppca_dask.methods.adaptive_power.requests import MeanStep
from dppca_dask.methods.adaptive_power.row_norm_bound import DEFAULT_CLIPPED_SHARE, AutoBound
from dppca_dask.storage.validate import safe_norm

__all__ = [
    "CENTRING_MECHANISMS",
    "DEFAULT_MEAN_SHARE",
    "CentredReleases",
    "CentringOptions",
    "centred_bound",
    "centring_options",
    "check_center",
    "plan_centred_releases",
    "release_private_mean",
]

#: Public share of the user's (ε, δ) given to the private mean's release (``center="private"``).
DEFAULT_MEAN_SHARE = 0.1


def check_center(center: str | np.ndarray | None, n_cols: int, mean_multiplier: float | None) -> np.ndarray | None:
    """Validate a run's ``center`` before any release; return the given (public) mean, or None."""
    if isinstance(center, str):
        if center != "private":
            raise InvalidParameterError(f"center must be None, 'private' or a mean vector; got {center!r}")
        if mean_multiplier is None:
            raise InvalidParameterError("center='private' needs mean_multiplier (the mean's noise multiplier)")
        return None
    if center is None:
        return None
    mean = np.array(center, dtype=np.float64)
    if mean.shape != (n_cols,) or not np.all(np.isfinite(mean)):
        raise InvalidParameterError(
            f"a given mean must be a finite vector of length {n_cols}; got shape {mean.shape}"
        )
    return mean


def centred_bound(row_norm_bound: float, center: str | np.ndarray | None) -> float:
    """``c + r``: the public bound on a centred row's norm (``r = c`` for the private mean, ``‖μ‖`` for a given one)."""
    if center is None:
        return float(row_norm_bound)
    if isinstance(center, str):
        return 2.0 * float(row_norm_bound)
    return float(row_norm_bound) + float(np.linalg.norm(np.asarray(center, dtype=np.float64)))


def release_private_mean(row_norm_bound: float, *, mean_multiplier: float,
                         noise: NoiseSource) -> Generator[Any, Any, tuple[np.ndarray, float, Any]]:
    """Release the centre of ``center="private"``: one pass of :class:`~dppca_dask.methods.adaptive_power.requests.MeanStep`, then
    :func:`~dppca_dask.mechanisms.centred.private_mean` (the mean projected onto the ball of radius c,
    ``GaussianDpEvent(mean_multiplier)``); returns the mean, the released count and the event."""
    totals = yield MeanStep(row_norm_bound=row_norm_bound)
    return private_mean(totals.total, totals.count, row_norm_bound=row_norm_bound,
                        noise_multiplier=mean_multiplier, noise=noise, release="mean")


# ------------------------------------------------------------------------------------------------ pca() options
@dataclass(frozen=True)
class CentringOptions:
    """``pca``'s analyst options, validated before any data is read: centring and a private row-norm bound."""

    center: str | np.ndarray | None
    """None, ``"private"`` or a public mean."""
    auto_bound: bool
    """``row_norm_bound="auto"``."""

    @property
    def active(self) -> bool:
        return self.center is not None or self.auto_bound

    def to_json(self) -> dict[str, Any]:
        """Provenance: only the options that were given (a run without them keeps its old parameters)."""
        out: dict[str, Any] = {}
        if self.center is not None:
            out["center"] = "private" if isinstance(self.center, str) else "given"
        if self.auto_bound:
            out["row_norm_bound"] = "auto"
        return out


#: Mechanisms of :func:`~dppca_dask.pca` that accept ``center`` and ``row_norm_bound="auto"``.
CENTRING_MECHANISMS = ("adaptive-power", "adaptive-power-block", "analyze-gauss", "auto")


def centring_options(mechanism: str, center: Any, row_norm_bound: Any) -> tuple[CentringOptions, Any]:
    """Validate ``center`` and ``row_norm_bound`` (``"auto"`` or a number); return the options and the number to
    validate as the bound (1.0 in place of ``"auto"``: the released bound replaces it)."""
    auto = isinstance(row_norm_bound, str)
    if auto and row_norm_bound != "auto":
        raise InvalidParameterError(f"row_norm_bound must be a number or 'auto'; got {row_norm_bound!r}")
    if center is None or center is False or (isinstance(center, str) and center == "none"):
        centre: str | np.ndarray | None = None
    elif center is True or (isinstance(center, str) and center == "private"):
        centre = "private"
    elif isinstance(center, str):
        raise InvalidParameterError(
            f"center must be False, True, 'private' or a public mean vector; got {center!r}")
    else:
        centre = np.array(center, dtype=np.float64)
        if centre.ndim != 1 or not np.all(np.isfinite(centre)):
            raise InvalidParameterError(
                f"a given center must be a finite 1-D vector (a public mean); got shape {centre.shape}")
        from dppca_dask.methods._params import ROW_NORM_BOUND_RANGE

        length = safe_norm(centre)  # ‖μ‖, ‖μ‖² may overflow
        if length > ROW_NORM_BOUND_RANGE[1]:
            # centred rows have the bound c + ‖μ‖, which scales every sum as c does: beyond 1e100, sums over a
            # few rows of (c + ‖μ‖)² overflow on a dataset with more rows and not on its neighbour with fewer
            raise InvalidParameterError(
                f"a given center must have norm at most {ROW_NORM_BOUND_RANGE[1]:g}, as row_norm_bound; got "
                f"{length:g}; scale the data so that rows have norms of order 1")
    options = CentringOptions(centre, auto)
    if options.active and mechanism not in CENTRING_MECHANISMS:
        raise InvalidParameterError(
            f"center and row_norm_bound='auto' apply to mechanism in {', '.join(CENTRING_MECHANISMS)}; got "
            f"mechanism={mechanism!r}"
        )
    return options, (1.0 if auto else row_norm_bound)


# --------------------------------------------------------------------------------- the budget beside the main release
@dataclass(frozen=True)
class CentredReleases:
    """The releases a centred plan makes beside its main one, calibrated from public shares of the user's (ε, δ):
    the row-norm quantile (``auto_bound``), the private mean (``center="private"``) and the explained variance.

    Built by :func:`plan_centred_releases`, the one place where the block, centred Analyze Gauss and ``auto``
    planners split the budget; each planner gives its main release ``(1 − used_epsilon, 1 − used)`` of (ε, δ).
    """

    auto: AutoBound | None
    """The private bound's grid, quantile and ε; None for a public bound."""
    quantile: float
    """The quantile of row norms the bound aims at (public)."""
    mean_multiplier: float | None
    """The private mean's noise multiplier; None without a private mean."""
    variance_multiplier: float | None
    """The explained variance's noise multiplier; None when the plan releases none of its own."""
    clipped_multiplier: float | None
    """The clipped fraction's noise multiplier; None when the plan does not release it."""
    used: float
    """The share of ε and of δ spent beside the main release (mean, variance and the planner's other shares)."""
    used_epsilon: float
    """``used`` plus the quantile's share of ε (it spends no δ)."""
    center: str
    """``"private"``, ``"given"`` or ``"none"`` (provenance)."""
    shares: dict[str, float]
    """Every share, in the order of the plan's provenance, the main release's last."""

    @property
    def has_releases(self) -> bool:
        """Whether the plan releases anything beside its main release (the quantile, the mean or the variance)."""
        return any(v is not None for v in (self.auto, self.mean_multiplier, self.variance_multiplier,
                                            self.clipped_multiplier))

    def scaled(self, scale: float) -> CentredReleases:
        """The same releases with every noise scale times ``scale``: the mean's and the variance's noise
        multipliers times it, the quantile's ε (its Laplace scale is ∝ 1/ε) over it. The shares are unchanged: they
        fix the releases' relative noise."""
        if scale == 1.0:
            return self
        auto = None if self.auto is None else dataclasses.replace(self.auto, epsilon=self.auto.epsilon / scale)
        return dataclasses.replace(
            self, auto=auto,
            mean_multiplier=None if self.mean_multiplier is None else self.mean_multiplier * scale,
            clipped_multiplier=None if self.clipped_multiplier is None else self.clipped_multiplier * scale,
            variance_multiplier=None if self.variance_multiplier is None else self.variance_multiplier * scale)

    def variance_events(self) -> list[Any]:
        """The explained variance's event (after the main release), or none."""
        from dp_accounting import GaussianDpEvent

        return [] if self.variance_multiplier is None else [GaussianDpEvent(self.variance_multiplier)]

    def planned_events(self) -> list[Any]:
        """The events released before the main one, in order: the quantile's (or the clipped fraction's), then the
        mean's."""
        from dp_accounting import GaussianDpEvent

        from dppca_dask.accounting.events import EpsilonDeltaDpEvent

        planned: list[Any] = []
        if self.auto is not None:
            planned.append(EpsilonDeltaDpEvent(self.auto.epsilon, 0.0))
        if self.clipped_multiplier is not None:
            planned.append(GaussianDpEvent(self.clipped_multiplier))
        if self.mean_multiplier is not None:
            planned.append(GaussianDpEvent(self.mean_multiplier))
        return planned

    def replace_one_head(self, flat: list[Any]) -> list[Any]:
        """The replace-one-row events of the quantile, the clipped fraction and the mean, popped from the front of
        ``flat``.

        Replacing a row moves each quantile utility by at most 100 instead of ``max(a, 100 − a)`` (ε grows by
        ``100/max(a, 100 − a)``), the clipped count by at most 1 with the count fixed (sensitivity 1 instead of √2:
        the noise multiplier times √2), and the mean's scaled sum by at most 2 with the count fixed (sensitivity 2
        instead of √2: the noise multiplier divided by √2).
        """
        from dp_accounting import GaussianDpEvent

        from dppca_dask.accounting.events import EpsilonDeltaDpEvent

        head: list[Any] = []
        if self.auto is not None and flat:
            percent = round(self.quantile * 100)
            head.append(EpsilonDeltaDpEvent(flat.pop(0).epsilon * 100.0 / max(percent, 100 - percent), 0.0))
        if self.clipped_multiplier is not None and flat:
            head.append(GaussianDpEvent(flat.pop(0).noise_multiplier * math.sqrt(2.0)))
        if self.mean_multiplier is not None and flat:
            head.append(GaussianDpEvent(flat.pop(0).noise_multiplier / math.sqrt(2.0)))
        return head

    @property
    def quantile_json(self) -> dict[str, Any] | None:
        """The private bound's provenance (its quantile, ε and grid); None for a public bound."""
        if self.auto is None:
            return None
        return {"quantile": self.quantile, "epsilon": self.auto.epsilon, "grid": self.auto.grid.to_json()}


def plan_centred_releases(
    params: Any,
    *,
    center: str | np.ndarray | None,
    auto_bound: bool,
    quantile: float,
    quantile_share: float,
    mean_share: float,
    explained_variance: bool | None,
    variance_share: float = 0.0,
    norm_grid: Any = None,
    other_shares: Mapping[str, float] | None = None,
    main: str,
    main_label: str,
    clipped_fraction: bool = False,
    clipped_share: float = DEFAULT_CLIPPED_SHARE,
) -> CentredReleases:
    """Split ``params``'s (ε, δ) by public shares and calibrate the releases beside the main one.

    ``mean_share`` of (ε, δ) goes to the private mean (``center="private"``), ``variance_share`` to the explained
    variance (``explained_variance``; None: the plan has no variance release of its own and no such share),
    ``quantile_share`` of ε (no δ) to the row-norm quantile (``auto_bound``), ``clipped_share`` of (ε, δ) to the
    fraction of rows a fixed bound clips (``clipped_fraction``, never with ``auto_bound``), each of
    ``other_shares`` to the planner's own parts; the main release (``main``, provenance keys ``{main}_epsilon`` and ``{main}_delta``) gets
    the rest. The parts compose by basic composition to at most the total. Public values only: nothing here
    depends on the data.
    """
    from dppca_dask import accounting
    from dppca_dask.mechanisms.quantile import NormGrid

    others = dict(other_shares or {})
    with_clipped = bool(clipped_fraction) and not auto_bound
    if with_clipped:
        others = {"clipped_fraction": clipped_share, **others}
    uses_mean = isinstance(center, str)
    with_variance = bool(explained_variance)
    used = (mean_share if uses_mean else 0.0) + (variance_share if with_variance else 0.0)
    for share in others.values():
        used += share
    used_epsilon = used + (quantile_share if auto_bound else 0.0)
    if not (0.0 <= used and used_epsilon < 1.0):
        parts = [*others, "mean", *(["variance"] if explained_variance is not None else []), "quantile"]
        raise InvalidParameterError(
            f"the {', '.join(parts[:-1])} and {parts[-1]} shares must leave budget for {main_label}; got "
            f"{used_epsilon:g} of the total"
        )
    mean_multiplier = (accounting.calibrate_gaussian(epsilon=params.epsilon * mean_share,
                                                     delta=params.delta * mean_share) if uses_mean else None)
    variance_multiplier = (accounting.calibrate_gaussian(epsilon=params.epsilon * variance_share,
                                                         delta=params.delta * variance_share)
                           if with_variance else None)
    clipped_multiplier = (accounting.calibrate_gaussian(epsilon=params.epsilon * clipped_share,
                                                        delta=params.delta * clipped_share) if with_clipped else None)
    auto = None
    if auto_bound:
        auto = AutoBound(grid=norm_grid if norm_grid is not None else NormGrid(), quantile=quantile,
                         epsilon=params.epsilon * quantile_share)
    shares: dict[str, float] = {"row_norm_quantile_epsilon": quantile_share if auto_bound else 0.0,
                                "mean": mean_share if uses_mean else 0.0}
    if explained_variance is not None:
        shares["explained_variance"] = variance_share if with_variance else 0.0
    shares.update(others)
    shares[f"{main}_epsilon"] = 1.0 - used_epsilon
    shares[f"{main}_delta"] = 1.0 - used
    return CentredReleases(
        auto=auto, quantile=quantile, mean_multiplier=mean_multiplier, variance_multiplier=variance_multiplier,
        clipped_multiplier=clipped_multiplier, used=used, used_epsilon=used_epsilon,
        center="private" if uses_mean else ("given" if center is not None else "none"), shares=shares)
