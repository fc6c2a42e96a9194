"""Noise constants and accounting of the Hardt–Roth mechanisms (seeds 000 and 003) and randomized response.

Everything here is a function of public parameters only (ε, δ, T, k, C, the ladder length, the relation's bound),
never of the data, so it may be logged and cached.

Seed 000, private power iteration (Hardt & Roth 2013, Fig. 2 and 3):

- Fig. 2's noise scale ``σ = 2·ε⁻¹·sqrt(4·T·ln(1/δ))`` with per-coordinate std ``σ·sqrt(C/n)``
  (:func:`ppi_sigma`, :func:`ppi_noise_std`) and Fig. 3's split ``ε' = ε/sqrt(4k·ln(1/δ))``, ``δ' = δ/k``
  (:func:`rank_k_split`). The paper justifies σ by Theorems 2.4 and 2.6, which do not give it (spec §1.2); it is
  valid, with room to spare, by exact Gaussian composition: T rounds of multiplier σ are ``sqrt(T)/σ``-GDP
  (:func:`ppi_gdp_mu`). Reports here always come from the PLD accountant.
- :func:`calibrate_private_power` builds the noise of a whole run (k components, each a ladder of L runs of T
  rounds, optional Laplace-noised values) either by the paper's arithmetic (``calibration="paper"``) or by
  exact Gaussian composition calibrated to the target (``"standard"``, the default).

Seed 003, private find-and-project (Hardt & Roth 2012, Fig. 2–4) and randomized response: the constants of spec
§1.4 and §3.6 (:func:`prf_rho`, :func:`pproj_rho`, :func:`rr_sigma`), in the paper's form and in the corrected
``"standard"`` form, and :func:`calibrate_private_low_rank` with the run's DpEvents.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from dp_accounting import dp_event
from dp_accounting.pld import accountant as pld_accountant
from dp_accounting.pld import common as pld_common

from dppca_dask.accounting.calibration import calibrate_gaussian
from dppca_dask.accounting.composition import epsilon_for, gaussian_delta
from dppca_dask.accounting.events import EpsilonDeltaDpEvent
from dppca_dask.accounting.report import ENTRY_CHANGE, ROW_CHANGE
from dppca_dask.errors import InvalidParameterError

__all__ = [
    "CALIBRATIONS",
    "analytic_gaussian_multiplier",
    "DEFAULT_VALUE_SHARE",
    "PrivateLowRankCalibration",
    "PrivatePowerCalibration",
    "calibrate_private_low_rank",
    "calibrate_private_power",
    "calibrate_randomized_response",
    "classic_gaussian_multiplier",
    "entry_relation",
    "paper_rank_k_epsilon",
    "ppi_gdp_mu",
    "ppi_noise_std",
    "ppi_sigma",
    "pproj_rho",
    "prf_chi2_sensitivity",
    "prf_rho",
    "prf_sensitivity",
    "rank_k_split",
    "row_change_relation",
    "rr_sigma",
    "tight_projection_multiplier",
]

#: Calibration modes: corrected constants (default) or the paper's, for reproduction.
CALIBRATIONS = ("standard", "paper")
#: Share of ε that ``calibration="standard"`` gives the Laplace-noised values σ̂ of private power iteration.
DEFAULT_VALUE_SHARE = 0.1


# ----------------------------------------------------------------------------------------------------------
# validation and relations


def _target(epsilon: float, delta: float) -> tuple[float, float]:
    epsilon, delta = float(epsilon), float(delta)
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise InvalidParameterError(f"epsilon must be finite and > 0; got {epsilon}")
    if not 0.0 < delta < 1.0:
        raise InvalidParameterError(f"delta must be in (0, 1); got {delta}; pass e.g. delta=1e-6")
    return epsilon, delta


def _count(name: str, value: int, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return value


def _calibration(calibration: str) -> str:
    if calibration not in CALIBRATIONS:
        raise InvalidParameterError(f"calibration must be 'standard' or 'paper'; got {calibration!r}")
    return calibration


def entry_relation(entry_bound: float) -> str:
    """The entry-level neighbouring relation for a public bound b (seed 000, Def. 2.1 scaled by b)."""
    if entry_bound == 1.0:
        return ENTRY_CHANGE
    return f"one entry changes by at most {entry_bound:g}"


def row_change_relation(row_change_bound: float) -> str:
    """The row-change relation of seed 003 (Def. 2.1) for a public L2 bound s."""
    if row_change_bound == 1.0:
        return ROW_CHANGE
    return f"one row changes by a vector of L2 norm at most {row_change_bound:g}"


def classic_gaussian_multiplier(epsilon: float, delta: float, *, paper: bool = False) -> float:
    """σ/Δ of the textbook Gaussian mechanism: ``sqrt(2·ln(1.25/δ))/ε``, or the paper's ``sqrt(ln(1.25/δ))/ε``.

    The paper's Theorem 2.6/A.1 drops the factor 2 (seed 003 spec §1.4, erratum 3); it is offered only for
    reproduction.
    """
    epsilon, delta = _target(epsilon, delta)
    return math.sqrt((1.0 if paper else 2.0) * math.log(1.25 / delta)) / epsilon


def analytic_gaussian_multiplier(epsilon: float, delta: float) -> float:
    """σ/Δ of the analytic Gaussian mechanism (Balle & Wang 2018, Theorem 8): the smallest multiplier that is (ε, δ)-DP.

    Computed by dp-accounting's own ``get_smallest_gaussian_noise`` and then checked against the exact profile
    :func:`~dppca_dask.accounting.composition.gaussian_delta` (raised by 1e-9 relative steps until it holds), so
    the report's ε never exceeds the target. ε = 1, δ = 1e-6 give 4.2247 (the classic formula: 5.2988).
    """
    epsilon, delta = _target(epsilon, delta)
    multiplier = float(
        pld_accountant.get_smallest_gaussian_noise(pld_common.DifferentialPrivacyParameters(epsilon, delta), 1, 1.0)
    )
    while gaussian_delta(multiplier, epsilon) > delta:
        multiplier *= 1.0 + 1e-9
    return multiplier


def _valid_gaussian_multiplier(epsilon: float, delta: float) -> float:
    """The classic multiplier, raised to the analytic one when the classic formula is not enough (large ε).

    The classic bound is proved for ε < 1 only; the exact profile (Balle–Wang) decides beyond it.
    """
    classic = classic_gaussian_multiplier(epsilon, delta)
    if gaussian_delta(classic, epsilon) <= delta:
        return classic
    return max(classic, calibrate_gaussian(epsilon=epsilon, delta=delta))


# ----------------------------------------------------------------------------------------------------------
# seed 000: private power iteration


def ppi_sigma(epsilon: float, delta: float, n_iter: int) -> float:
    """Fig. 2, line 1: ``σ = 2·ε⁻¹·sqrt(4·T·ln(1/δ))`` (natural log).

    n = 1e4, C = 100, T = 20, ε = 1, δ = 1e-6 give σ = 66.4903 (spec §6.1).
    """
    epsilon, delta = _target(epsilon, delta)
    _count("n_iter", n_iter)
    return 2.0 / epsilon * math.sqrt(4.0 * n_iter * math.log(1.0 / delta))


def ppi_noise_std(sigma: float, coherence: float, dimension: int, *, entry_bound: float = 1.0) -> float:
    """Fig. 2, line 3(b): per-coordinate std ``σ·b·sqrt(C/n)`` of the noise ``g_t`` (b = 1 in the paper)."""
    return float(sigma) * float(entry_bound) * math.sqrt(float(coherence) / float(dimension))


def ppi_gdp_mu(sigma: float, n_iter: int) -> float:
    """μ of the μ-GDP guarantee of T rounds of noise multiplier σ: ``sqrt(T)/σ`` (exact Gaussian composition).

    With Fig. 2's σ this is ``ε/(4·sqrt(ln(1/δ)))`` whatever T (spec §1.2).
    """
    return math.sqrt(n_iter) / float(sigma)


def rank_k_split(epsilon: float, delta: float, n_components: int) -> tuple[float, float]:
    """Fig. 3, line 1: ``(ε', δ') = (ε/sqrt(4k·ln(1/δ)), δ/k)``; k = 4, ε = 1, δ = 1e-6 give (0.0672599, 2.5e-7)."""
    epsilon, delta = _target(epsilon, delta)
    _count("n_components", n_components)
    return epsilon / math.sqrt(4.0 * n_components * math.log(1.0 / delta)), delta / n_components


def paper_rank_k_epsilon(epsilon: float, delta: float, n_components: int) -> tuple[float, float]:
    """The total the paper's Theorem 2.4 gives Fig. 3: ``(sqrt(4k·ln(1/δ))·ε' + 4k·ε'², 2k·δ' + δ)``.

    That is ``(ε + ε²/ln(1/δ), 3δ)``, slightly above the target (spec §1.4, erratum 6); for reference only.
    """
    eps1, delta1 = rank_k_split(epsilon, delta, n_components)
    k = n_components
    return math.sqrt(2.0 * 2 * k * math.log(1.0 / delta)) * eps1 + 2.0 * 2 * k * eps1**2, 2 * k * delta1 + delta


@dataclass(frozen=True, slots=True)
class PrivatePowerCalibration:
    """Noise of a private power iteration run (Hardt & Roth 2013), from public parameters only.

    A run has ``n_components`` components; each runs ``n_runs`` ladder rungs (``1`` without the C-doubling
    wrapper) of ``n_iter`` rounds, and ``n_values`` Laplace-noised values σ̂ are released in total. Round t
    releases ``B·x + g`` with ``g ~ N(0, (sigma·b·sqrt(C/N))²)`` per coordinate, where ``b`` is the entry bound and
    B the input (``embedding_factor = sqrt(2)`` when B is the symmetric embedding of an asymmetric store, whose one
    entry change moves two entries of B). Neighbouring relation: one entry of the store changes by at most b.
    """

    epsilon: float
    """Target total ε."""
    delta: float
    """Target total δ."""
    n_iter: int
    """Rounds T per rung."""
    n_components: int
    """Components k."""
    n_runs: int
    """Rungs per component (C-doubling ladder length; 1 without it)."""
    n_values: int
    """Laplace-noised values σ̂ released."""
    embedding: bool
    """Whether B is the symmetric embedding of an asymmetric store."""
    calibration: str
    """``"standard"`` or ``"paper"``."""
    sigma: float
    """Fig. 2's σ as applied: per-coordinate std is ``sigma·b·sqrt(C/N)``."""
    noise_multiplier: float
    """σ over the L2 sensitivity ``embedding_factor·b·sqrt(C/N)`` of ``B·x`` (dp-accounting's multiplier)."""
    value_epsilon: float | None
    """ε of each Laplace release of σ̂ (scale ``b/value_epsilon``: its sensitivity is b), or None when none."""
    run_epsilon: float
    """ε of each PPI call by the paper's arithmetic (the per-call ε', before the embedding and the ladder)."""
    run_delta: float
    """δ of each PPI call by the paper's arithmetic."""

    @property
    def embedding_factor(self) -> float:
        """Sensitivity factor of the embedding: one entry of A is two entries of B (spec §0.7)."""
        return math.sqrt(2.0) if self.embedding else 1.0

    @property
    def n_rounds(self) -> int:
        """Gaussian releases the guarantee covers: ``n_components·n_runs·n_iter``."""
        return self.n_components * self.n_runs * self.n_iter

    @property
    def gdp_mu(self) -> float:
        """μ-GDP of all Gaussian rounds together: ``sqrt(n_rounds)/noise_multiplier``."""
        return math.sqrt(self.n_rounds) / self.noise_multiplier

    def events(self) -> list[dp_event.DpEvent]:
        """The DpEvents the guarantee covers: every round of every rung, and every value."""
        out: list[dp_event.DpEvent] = [
            dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(self.noise_multiplier), self.n_rounds)
        ]
        if self.n_values and self.value_epsilon is not None:
            out.append(dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(1.0 / self.value_epsilon), self.n_values))
        return out

    def paper_figure(self) -> dict[str, Any]:
        """The paper's own privacy statement for reference in the report (not the reported guarantee)."""
        out: dict[str, Any] = {
            "gdp_mu": self.gdp_mu,
            "source": "Hardt-Roth 2013, Lemma 3.4 and Fig. 3 (Theorems 2.4/2.6 as printed; valid by exact "
                      "Gaussian composition only, spec 000 section 1.2)",
        }
        if self.n_values:
            eps, delta = paper_rank_k_epsilon(self.epsilon, self.delta, self.n_components)
            out.update(epsilon=eps, delta=delta)
        else:
            out.update(epsilon=self.epsilon, delta=self.delta)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "n_iter": self.n_iter,
            "n_components": self.n_components,
            "n_runs": self.n_runs,
            "n_values": self.n_values,
            "embedding": self.embedding,
            "calibration": self.calibration,
            "sigma": self.sigma,
            "noise_multiplier": self.noise_multiplier,
            "value_epsilon": self.value_epsilon,
            "run_epsilon": self.run_epsilon,
            "run_delta": self.run_delta,
            "gdp_mu": self.gdp_mu,
        }


def calibrate_private_power(
    *,
    epsilon: float,
    delta: float,
    n_iter: int,
    n_components: int = 1,
    n_runs: int = 1,
    n_values: int = 0,
    embedding: bool = False,
    calibration: str = "standard",
    value_share: float = DEFAULT_VALUE_SHARE,
) -> PrivatePowerCalibration:
    """Noise scales of a private power iteration run for a target total (ε, δ).

    Parameters
    ----------
    epsilon, delta
        Target total guarantee.
    n_iter
        Rounds T of each PPI call.
    n_components
        k (sequential deflation, Fig. 3).
    n_runs
        Rungs L of the C-doubling wrapper per component (Remark 4.5); 1 without it.
    n_values
        Laplace-noised values σ̂ released (Fig. 3, line 3(b)); 0 for Fig. 2 alone.
    embedding
        The input is the symmetric embedding of an asymmetric store (rank 1).
    calibration
        ``"standard"`` (default) or ``"paper"``.
    value_share
        Share of ε for the values under ``"standard"``.

    Returns
    -------
    PrivatePowerCalibration

    Notes
    -----
    Privacy contract: one entry of the store changes by at most b. Round t releases ``B·x_{t-1} + g_t``; the
    ∞-norm check guarantees ``‖x_{t-1}‖²_∞ ≤ C/N``, so ``‖(B − B')x_{t-1}‖ ≤ f·b·sqrt(C/N)`` with ``f = sqrt(2)``
    for the embedding (two entries of B, spec §0.7) and 1 otherwise; a σ̂ release ``‖B_{i-1}v‖ + Lap`` has
    sensitivity b (on the embedding the value is ``ûᵀAv̂``, also of sensitivity b). Deflation subtracts released
    values only, so later calls keep these sensitivities.

    - ``"paper"``: each PPI call runs at the paper's per-call (ε_r, δ_r): (ε, δ), halved for the embedding
      (group privacy as the paper argues), split by Fig. 3 when values are released, divided by L for the ladder;
      ``σ = ppi_sigma(ε_r, δ_r, T)`` applied to the sensitivity of one entry of B, so the multiplier the
      accountant sees is ``σ/f``; values get ``Lap(b/ε')``.
    - ``"standard"``: each value gets ``Lap(b/ε_v)`` with ``ε_v = value_share·ε/n_values``, and the multiplier
      of the ``k·L·T`` Gaussian rounds is the smallest for which the PLD accountant (the report's own code) puts
      the whole composition, rounds and values, at ≤ (ε, δ), to within 0.5% of ε (the report states ε in
      ``[0.995·ε, ε]``; basic composition of the values with the rounds reported 0.968 at a target of 1).

    Both emit ``GaussianDpEvent(noise_multiplier)`` per round (self-composed ``k·L·T`` times) and
    ``LaplaceDpEvent(1/value_epsilon)`` per value.
    """
    epsilon, delta = _target(epsilon, delta)
    _count("n_iter", n_iter)
    _count("n_components", n_components)
    _count("n_runs", n_runs)
    _count("n_values", n_values, minimum=0)
    _calibration(calibration)
    factor = math.sqrt(2.0) if embedding else 1.0
    run_eps, run_delta = (epsilon / 2.0, delta / 2.0) if embedding else (epsilon, delta)
    split_eps, split_delta = (
        rank_k_split(run_eps, run_delta, n_components) if n_values else (run_eps, run_delta)
    )
    run_eps, run_delta = split_eps / n_runs, split_delta / n_runs
    n_rounds = n_components * n_runs * n_iter

    if calibration == "paper":
        sigma = ppi_sigma(run_eps, run_delta, n_iter)
        return PrivatePowerCalibration(
            epsilon=epsilon, delta=delta, n_iter=n_iter, n_components=n_components, n_runs=n_runs,
            n_values=n_values, embedding=bool(embedding), calibration=calibration, sigma=sigma,
            noise_multiplier=sigma / factor, value_epsilon=split_eps if n_values else None,
            run_epsilon=run_eps, run_delta=run_delta,
        )

    if not 0.0 < value_share < 1.0:
        raise InvalidParameterError(f"value_share must be in (0, 1); got {value_share}")
    value_epsilon = value_share * epsilon / n_values if n_values else None
    multiplier = _standard_power_multiplier(epsilon, delta, n_rounds, n_values, value_epsilon)
    return PrivatePowerCalibration(
        epsilon=epsilon, delta=delta, n_iter=n_iter, n_components=n_components, n_runs=n_runs,
        n_values=n_values, embedding=bool(embedding), calibration=calibration, sigma=multiplier * factor,
        noise_multiplier=multiplier, value_epsilon=value_epsilon, run_epsilon=run_eps, run_delta=run_delta,
    )


@functools.lru_cache(maxsize=256)
def _standard_power_multiplier(
    epsilon: float, delta: float, n_rounds: int, n_values: int, value_epsilon: float | None
) -> float:
    """Gaussian multiplier of ``n_rounds`` rounds that, with the Laplace values, meets (ε, δ) by the PLD accountant."""
    merged = calibrate_gaussian(epsilon=epsilon, delta=delta)
    if not n_values:
        return merged * math.sqrt(n_rounds)  # Gaussians only: exact in closed form

    def events(multiplier: float) -> list[dp_event.DpEvent]:
        return [
            dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(multiplier), n_rounds),
            dp_event.SelfComposedDpEvent(dp_event.LaplaceDpEvent(1.0 / float(cast(float, value_epsilon))), n_values),
        ]

    return _calibrate_to_target(events, merged * math.sqrt(n_rounds), epsilon, delta)


#: A calibrated composition reports ε in ``[(1 − _TARGET_SLACK)·target, target]``.
_TARGET_SLACK = 0.005


def _calibrate_to_target(
    events: Callable[[float], list[dp_event.DpEvent]], start: float, epsilon: float, delta: float
) -> float:
    """The smallest multiplier m (to within 0.5% of ε) whose ``events(m)`` the PLD accountant puts at ≤ (ε, δ).

    ``start`` is a lower bound (the multiplier of the Gaussian part alone at the whole target). The reported ε
    is nearly proportional to 1/m, so a fixed-point step ``m ← m·ε(m)/goal`` converges in a few evaluations;
    the answer is checked with :func:`~dppca_dask.accounting.composition.epsilon_for`, the report's own code.
    """
    goal = epsilon * (1.0 - _TARGET_SLACK / 2.0)
    multiplier = start
    for _ in range(30):
        achieved = epsilon_for(events(multiplier), delta=delta)
        if (1.0 - _TARGET_SLACK) * epsilon <= achieved <= epsilon:
            return multiplier
        if not math.isfinite(achieved):
            multiplier *= 2.0
            continue
        multiplier *= achieved / goal
    while not epsilon_for(events(multiplier), delta=delta) <= epsilon:
        multiplier *= 1.01
    return multiplier


# ----------------------------------------------------------------------------------------------------------
# seed 003: private range finder, private projection, randomized response


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
