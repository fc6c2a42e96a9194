"""Noise constants and accounting of private find-and-project (Hardt & Roth 2012, seed 003) and randomized response.

Everything here is a function of public parameters only (ε, δ, r, p), never of the data, so it may be logged and
cached. The constants of spec §1.4 and §3.6 (:func:`prf_rho`, :func:`pproj_rho`, :func:`rr_sigma`), in the
paper's form and in the corrected ``"standard"`` form, and :func:`calibrate_private_low_rank` with the run's
DpEvents.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from dp_accounting import dp_event

from dppca_dask.accounting.calibration import calibrate_gaussian
from dppca_dask.accounting.events import EpsilonDeltaDpEvent
from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods.hardt_roth.multipliers import (
    _calibrate_to_target,
    _calibration,
    _count,
    _target,
    _valid_gaussian_multiplier,
    analytic_gaussian_multiplier,
    classic_gaussian_multiplier,
)

__all__ = [
    "PrivateLowRankCalibration",
    "calibrate_private_low_rank",
    "calibrate_randomized_response",
    "pproj_rho",
    "prf_chi2_sensitivity",
    "prf_rho",
    "prf_sensitivity",
    "rr_sigma",
    "tight_projection_multiplier",
]


def prf_sensitivity(width: int, delta: float) -> float:
    """Lemma 4.1: ``sqrt(2k·ln(4k/δ))``, the bound on ``‖eᵀΩ‖`` that holds with probability ≥ 1 − δ/2."""
    _count("width", width)
    if not 0.0 < delta < 1.0:
        raise InvalidParameterError(f"delta must be in (0, 1); got {delta}")
    return math.sqrt(2.0 * width * math.log(4.0 * width / delta))


def prf_rho(epsilon: float, delta: float, width: int, *, calibration: str = "standard") -> float:
    """Noise std ρ of the private range finder (Fig. 2) called with (ε, δ), per unit of the row-change bound.

    ``"paper"``: ``2·ε⁻¹·sqrt(2k·ln(4k/δ))`` as printed (too small: no sqrt(ln(1/δ)) factor, spec §1.4).
    ``"standard"``: ``sqrt(2k·ln(4k/δ))·sqrt(2·ln(2.5/δ))/ε``, the Gaussian mechanism at (ε, δ/2) on the
    sensitivity of Lemma 4.1 (raised to the analytic Gaussian when ε is so large that the classic bound fails).
    """
    epsilon, delta = _target(epsilon, delta)
    _calibration(calibration)
    c_rf = prf_sensitivity(width, delta)
    if calibration == "paper":
        return 2.0 * c_rf / epsilon
    return c_rf * _valid_gaussian_multiplier(epsilon, delta / 2.0)


def pproj_rho(epsilon: float, delta: float, width: int) -> float:
    """Noise ρ of the private projection (Fig. 3) called with (ε, δ): ``2·ε⁻¹·sqrt(8k·ln(4k/δ)·ln(2/δ))``.

    Row i of ``WᵀA`` gets ``N(0, α_i²ρ²)`` noise; the paper's constant is sufficient under both calibrations
    (spec §3.4).
    """
    epsilon, delta = _target(epsilon, delta)
    _count("width", width)
    return 2.0 / epsilon * math.sqrt(8.0 * width * math.log(4.0 * width / delta) * math.log(2.0 / delta))


def tight_projection_multiplier(epsilon: float, delta: float, *, calibration: str = "standard") -> float:
    """σ/Δ of the tight projection (spec §3.7, an extension): one Gaussian on all of ``WᵀA`` at (ε, δ)."""
    if _calibration(calibration) == "paper":
        return classic_gaussian_multiplier(epsilon, delta, paper=True)
    return _valid_gaussian_multiplier(epsilon, delta)


def rr_sigma(epsilon: float, delta: float, *, calibration: str = "standard") -> float:
    """Randomized response's σ per unit of the row-change bound.

    ``"standard"``: the analytic Gaussian (:func:`analytic_gaussian_multiplier`), exactly (ε, δ); ε = 1,
    δ = 1e-6 give 4.2247 where the classic ``sqrt(2·ln(1.25/δ))/ε`` gave 5.2988 (a report of ε ≈ 0.80 at a target
    of 1). ``"paper"``: ``sqrt(ln(1.25/δ))/ε`` = 3.7468 as printed (spec §7.1; it does not meet the target).
    """
    if _calibration(calibration) == "paper":
        return classic_gaussian_multiplier(epsilon, delta, paper=True)
    return analytic_gaussian_multiplier(epsilon, delta)


@dataclass(frozen=True, slots=True)
class PrivateLowRankCalibration:
    """Noise of private find-and-project (Hardt & Roth 2012, Fig. 4) for a target (ε, δ).

    Neighbouring relation: one row changes by a vector of L2 norm at most s (``row_change_bound``). Under
    ``"paper"`` the range finder runs at (ε/2, δ/2) and the projection at (ε/2, δ/2) (Lemma 6.1); under
    ``"standard"`` both are calibrated together to (ε, δ) by the PLD accountant (:func:`calibrate_private_low_rank`).
    All noise scales below are per unit of s.
    """

    epsilon: float
    delta: float
    rank: int
    """Target rank r."""
    oversampling: int
    """p; the sketch width is k = r + p."""
    calibration: str
    projection: str
    """``"paper"`` (Fig. 3, per-row noise ``α_i·ρ₂``) or ``"tight"`` (spec §3.7, one Gaussian on ``WᵀA``)."""
    range_sensitivity: float
    """Bound on ``‖eᵀΩ‖/‖e‖`` except with probability δ/4: the exact χ²_k quantile (standard) or Lemma 4.1's
    ``sqrt(2k·ln(8k/δ))`` (paper)."""
    range_rho: float
    """ρ₁: std of the range finder's noise ``N₁`` per unit of s."""
    projection_rho: float | None
    """ρ₂ of Fig. 3 (paper projection), else None."""
    projection_multiplier: float | None
    """σ/Δ of the tight projection, else None."""

    @property
    def width(self) -> int:
        """Sketch width k = r + p."""
        return self.rank + self.oversampling

    @property
    def range_multiplier(self) -> float:
        """ρ₁ over the sensitivity bound of Lemma 4.1."""
        return self.range_rho / self.range_sensitivity

    @property
    def range_failure(self) -> float:
        """Probability (over the secret Ω) that Lemma 4.1's sensitivity bound fails: δ/4."""
        return self.delta / 4.0

    def events(self) -> list[dp_event.DpEvent]:
        """The run's DpEvents.

        The range finder is a Gaussian of multiplier ``ρ₁/c_RF`` except with probability δ/4 over Ω, i.e. its
        privacy profile is at most that Gaussian's plus δ/4 (joint convexity of the hockey-stick divergence),
        which is the composition with ``EpsilonDeltaDpEvent(0, δ/4)``. The paper projection is k Gaussians of
        multiplier ρ₂ (row i: sensitivity ``α_i·s``, std ``α_i·ρ₂·s``), i.e. one of multiplier ``ρ₂/sqrt(k)``.
        """
        out: list[dp_event.DpEvent] = [
            dp_event.GaussianDpEvent(self.range_multiplier),
            EpsilonDeltaDpEvent(0.0, self.range_failure),
        ]
        if self.projection == "tight":
            assert self.projection_multiplier is not None
            out.append(dp_event.GaussianDpEvent(self.projection_multiplier))
        else:
            assert self.projection_rho is not None
            out.append(dp_event.GaussianDpEvent(self.projection_rho / math.sqrt(self.width)))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rank": self.rank,
            "oversampling": self.oversampling,
            "width": self.width,
            "calibration": self.calibration,
            "projection": self.projection,
            "range_sensitivity": self.range_sensitivity,
            "range_rho": self.range_rho,
            "range_multiplier": self.range_multiplier,
            "projection_rho": self.projection_rho,
            "projection_multiplier": self.projection_multiplier,
        }


def prf_chi2_sensitivity(width: int, failure: float) -> float:
    """The exact bound on ``‖eᵀΩ‖/‖e‖`` that holds except with probability ``failure``: ``sqrt(χ²_k quantile)``.

    ``eᵀΩ`` is ``N(0, ‖e‖²·I_k)`` for a secret standard Gaussian Ω (d×k) independent of the data, so
    ``‖eᵀΩ‖²/‖e‖²`` is χ² with k degrees of freedom; k = 4 at failure 2.5e-7 gives 6.03 where Lemma 4.1's union
    bound ``sqrt(2k·ln(4k/δ'))`` (at δ' = δ/2) gives 11.76.
    """
    from scipy import stats

    _count("width", width)
    if not 0.0 < failure < 1.0:
        raise InvalidParameterError(f"failure must be in (0, 1); got {failure}")
    return math.sqrt(float(stats.chi2.isf(failure, width)))


@functools.lru_cache(maxsize=256)
def _standard_low_rank_multiplier(epsilon: float, delta: float, failure: float) -> float:
    """Multiplier m of each of the two Gaussian steps (range finder, projection) that, with the range finder's
    failure probability, meets (ε, δ) by the PLD accountant (to within 0.5% of ε)."""

    def events(multiplier: float) -> list[dp_event.DpEvent]:
        return [dp_event.GaussianDpEvent(multiplier), EpsilonDeltaDpEvent(0.0, failure),
                dp_event.GaussianDpEvent(multiplier)]

    start = calibrate_gaussian(epsilon=epsilon, delta=delta - failure) * math.sqrt(2.0)
    return _calibrate_to_target(events, start, epsilon, delta)


def calibrate_private_low_rank(
    *,
    epsilon: float,
    delta: float,
    rank: int,
    oversampling: int,
    calibration: str = "standard",
    projection: str = "paper",
) -> PrivateLowRankCalibration:
    """Constants of PFP for a target (ε, δ).

    ``"paper"`` (spec §3.6 table): ρ₁ = prf_rho(ε/2, δ/2), ρ₂ = pproj_rho(ε/2, δ/2), the range finder's
    sensitivity by Lemma 4.1's union bound; ε = 1, δ = 1e-6, r = p = 2 give ρ₁ = 47.032 and ρ₂ = 366.750
    (spec §7.1). It does not meet the target.

    ``"standard"`` (default): the range finder's sensitivity is the exact χ² quantile
    (:func:`prf_chi2_sensitivity`, failure δ/4 over Ω), and both steps get the same Gaussian multiplier m, the
    smallest for which the PLD accountant puts the run's events (two Gaussians of multiplier m and
    ``EpsilonDeltaDpEvent(0, δ/4)``) at ≤ (ε, δ), to within 0.5% of ε. The paper projection then has
    ``ρ₂ = m·sqrt(k)`` (k Gaussians of multiplier ρ₂ compose to one of ``ρ₂/sqrt(k)``), the tight projection
    multiplier m. (The earlier constants, per-step (ε/2, δ/2) with the union bound and the projection's per-row
    advanced composition, reported ε = 0.361 at a target of 1.)
    """
    epsilon, delta = _target(epsilon, delta)
    _count("rank", rank)
    _count("oversampling", oversampling, minimum=0)
    _calibration(calibration)
    if projection not in ("paper", "tight"):
        raise InvalidParameterError(f"projection must be 'paper' or 'tight'; got {projection!r}")
    width = rank + oversampling
    half_eps, half_delta = epsilon / 2.0, delta / 2.0
    if calibration == "paper":
        return PrivateLowRankCalibration(
            epsilon=epsilon,
            delta=delta,
            rank=rank,
            oversampling=oversampling,
            calibration=calibration,
            projection=projection,
            range_sensitivity=prf_sensitivity(width, half_delta),
            range_rho=prf_rho(half_eps, half_delta, width, calibration=calibration),
            projection_rho=pproj_rho(half_eps, half_delta, width) if projection == "paper" else None,
            projection_multiplier=(
                tight_projection_multiplier(half_eps, half_delta, calibration=calibration) if projection == "tight"
                else None
            ),
        )
    failure = delta / 4.0
    sensitivity = prf_chi2_sensitivity(width, failure)
    multiplier = _standard_low_rank_multiplier(epsilon, delta, failure)
    return PrivateLowRankCalibration(
        epsilon=epsilon,
        delta=delta,
        rank=rank,
        oversampling=oversampling,
        calibration=calibration,
        projection=projection,
        range_sensitivity=sensitivity,
        range_rho=sensitivity * multiplier,
        projection_rho=multiplier * math.sqrt(width) if projection == "paper" else None,
        projection_multiplier=multiplier if projection == "tight" else None,
    )


def calibrate_randomized_response(*, epsilon: float, delta: float, calibration: str = "standard") -> float:
    """σ per unit of the row-change bound for randomized response (‖A − A'‖_F ≤ s): :func:`rr_sigma`."""
    return rr_sigma(epsilon, delta, calibration=calibration)
