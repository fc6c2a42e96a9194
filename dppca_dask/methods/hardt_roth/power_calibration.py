"""Noise constants and accounting of private power iteration (Hardt & Roth 2013, seed 000).

Everything here is a function of public parameters only (ε, δ, T, k, C, the ladder length, the relation's bound),
never of the data, so it may be logged and cached.

- Fig. 2's noise scale ``σ = 2·ε⁻¹·sqrt(4·T·ln(1/δ))`` with per-coordinate std ``σ·sqrt(C/n)``
  (:func:`ppi_sigma`, :func:`ppi_noise_std`) and Fig. 3's split ``ε' = ε/sqrt(4k·ln(1/δ))``, ``δ' = δ/k``
  (:func:`rank_k_split`). The paper justifies σ by Theorems 2.4 and 2.6, which do not give it (spec §1.2); it is
  valid, with room to spare, by exact Gaussian composition: T rounds of multiplier σ are ``sqrt(T)/σ``-GDP
  (:func:`ppi_gdp_mu`). Reports here always come from the PLD accountant.
- :func:`calibrate_private_power` builds the noise of a whole run (k components, each a ladder of L runs of T
  rounds, optional Laplace-noised values) either by the paper's arithmetic (``calibration="paper"``) or by
  exact Gaussian composition calibrated to the target (``"standard"``, the default).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, cast

from dp_accounting import dp_event

from dppca_dask.accounting.calibration import calibrate_gaussian
from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods.hardt_roth.multipliers import _calibrate_to_target, _calibration, _count, _target

__all__ = [
    "DEFAULT_VALUE_SHARE",
    "PrivatePowerCalibration",
    "calibrate_private_power",
    "paper_rank_k_epsilon",
    "ppi_gdp_mu",
    "ppi_noise_std",
    "ppi_sigma",
    "rank_k_split",
]

#: Share of ε that ``calibration="standard"`` gives the Laplace-noised values σ̂ of private power iteration.
DEFAULT_VALUE_SHARE = 0.1


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
