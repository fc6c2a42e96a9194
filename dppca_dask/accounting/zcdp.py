"""Zero-concentrated differential privacy (zCDP): closed forms and conversions to (ε, δ).

ρ-zCDP (Bun–Steinke 2016) means Rényi DP of order α at most ρ·α for every α > 1; it composes by adding ρ.
- The Gaussian mechanism with noise multiplier m (std = m × L2-sensitivity) is exactly ``1/(2m²)``-zCDP.
- An ε-DP mechanism is ``ε²/2``-zCDP (Bun–Steinke, Prop. 1.4).
- ρ-zCDP implies (ε, δ)-DP with the tight conversion of Canonne–Kamath–Steinke 2020 (Prop. 12, also Asoodeh
  et al. 2021): ``ε = min_{α>1} [αρ + ln(1 − 1/α) − (ln δ + ln α)/(α − 1)]``, and with the classic loose bound
  ``ε = ρ + 2·sqrt(ρ·ln(1/δ))`` (Bun–Steinke, Prop. 1.3).

In this library zCDP only *splits* a budget (the SVT share of
:func:`~dppca_dask.methods.adaptive_power.calibration.calibrate_adaptive_power`);
the reported guarantee comes from the PLD accountant.
"""

from __future__ import annotations

import math

from scipy import optimize

from dppca_dask.errors import InvalidParameterError

__all__ = [
    "gaussian_rho",
    "pure_dp_rho",
    "zcdp_epsilon",
    "zcdp_epsilon_loose",
    "zcdp_rho_for",
]


def _check_delta(delta: float) -> None:
    if not (0.0 < delta < 1.0):
        raise InvalidParameterError(f"delta must be in (0, 1); got {delta}; pass e.g. delta=1e-6")


def _check_rho(rho: float) -> None:
    if math.isnan(rho) or rho < 0:
        raise InvalidParameterError(f"rho must be >= 0; got {rho}")


def gaussian_rho(noise_multiplier: float) -> float:
    """ρ of the Gaussian mechanism: ``1/(2·noise_multiplier²)``.

    Parameters
    ----------
    noise_multiplier
        Noise standard deviation divided by the L2 sensitivity; ``> 0`` (``math.inf`` gives 0).

    Returns
    -------
    float
        The exact zCDP parameter (the Rényi divergence of order α is ``α/(2m²)``).
    """
    if not noise_multiplier > 0:
        raise InvalidParameterError(f"noise_multiplier must be > 0; got {noise_multiplier}")
    return 1.0 / (2.0 * noise_multiplier**2)


def pure_dp_rho(epsilon: float) -> float:
    """ρ of an ε-DP mechanism: ``ε²/2`` (Bun–Steinke 2016, Prop. 1.4)."""
    if math.isnan(epsilon) or epsilon < 0:
        raise InvalidParameterError(f"epsilon must be >= 0; got {epsilon}")
    return epsilon**2 / 2.0


def zcdp_epsilon_loose(rho: float, *, delta: float) -> float:
    """ε of ρ-zCDP at δ by the classic bound ``ρ + 2·sqrt(ρ·ln(1/δ))`` (Bun–Steinke 2016, Prop. 1.3)."""
    _check_rho(rho)
    _check_delta(delta)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def _cks_objective(alpha: float, rho: float, log_delta: float) -> float:
    return alpha * rho + math.log1p(-1.0 / alpha) - (log_delta + math.log(alpha)) / (alpha - 1.0)


def zcdp_epsilon(rho: float, *, delta: float) -> float:
    """ε of ρ-zCDP at δ by the tight conversion of Canonne–Kamath–Steinke 2020 (Prop. 12).

    Parameters
    ----------
    rho
        ρ ≥ 0 (``math.inf`` gives ``math.inf``).
    delta
        δ in (0, 1).

    Returns
    -------
    float
        ``min_{α>1} [αρ + ln(1 − 1/α) − (ln δ + ln α)/(α − 1)]``, clipped at 0.

    Notes
    -----
    The objective's derivative is ``ρ + (ln α + ln δ)/(α − 1)²``, whose sign is that of
    ``g(α) = ρ(α − 1)² + ln α + ln δ``; g increases strictly from ``ln δ < 0`` at α = 1, so the minimiser is its
    unique root, found by Brent's method (to machine precision) in ``[1, 1 + sqrt(ln(1/δ)/ρ)]``, where g ≥ 0.
    Reference: ρ = 1/32, δ = 1e-3 gives 0.6880024554878085.
    """
    _check_rho(rho)
    _check_delta(delta)
    if rho == 0.0:
        return 0.0
    if math.isinf(rho):
        return math.inf
    log_delta = math.log(delta)
    upper = 1.0 + math.sqrt(-log_delta / rho)

    def slope_sign(alpha: float) -> float:
        return rho * (alpha - 1.0) ** 2 + math.log(alpha) + log_delta

    if slope_sign(upper) <= 0.0:  # only by rounding: g(upper) = ln(upper) > 0 in exact arithmetic
        upper *= 2.0
    alpha = optimize.brentq(slope_sign, 1.0, upper, xtol=1e-14, rtol=4 * 2.0**-52, maxiter=500)
    alpha = max(alpha, math.nextafter(1.0, 2.0))
    return max(0.0, _cks_objective(alpha, rho, log_delta))


def zcdp_rho_for(epsilon: float, *, delta: float) -> float:
    """The largest ρ such that ρ-zCDP implies (ε, δ)-DP by :func:`zcdp_epsilon`.

    Parameters
    ----------
    epsilon
        Target ε > 0.
    delta
        Target δ in (0, 1).

    Returns
    -------
    float
        ρ with ``zcdp_epsilon(ρ, delta=delta) ≤ epsilon`` (verified), within a relative 1e-12 of the largest.
    """
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise InvalidParameterError(f"epsilon must be finite and > 0; got {epsilon}")
    _check_delta(delta)
    # The loose bound is larger than the tight one, so its inverse is a valid lower end.
    lower = (math.sqrt(math.log(1.0 / delta) + epsilon) - math.sqrt(math.log(1.0 / delta))) ** 2
    while lower > 0 and zcdp_epsilon(lower, delta=delta) > epsilon:  # only by rounding
        lower *= 0.5
    upper = max(2.0 * lower, 1e-300)
    while zcdp_epsilon(upper, delta=delta) <= epsilon:
        lower, upper = upper, upper * 2.0
    rho = optimize.brentq(
        lambda r: zcdp_epsilon(r, delta=delta) - epsilon, lower, upper, xtol=1e-300, rtol=1e-13, maxiter=500
    )
    while zcdp_epsilon(rho, delta=delta) > epsilon:  # never overshoot: step down past rounding
        rho *= 1.0 - 1e-13
    return rho
