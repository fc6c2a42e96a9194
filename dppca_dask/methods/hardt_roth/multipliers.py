"""What the calibrations of both Hardt–Roth papers share: the checks of their arguments, the Gaussian mechanism's
multiplier (the textbook, the paper's and the analytic one) and the search for the smallest multiplier whose
composition the PLD accountant puts at the target.

Everything here is a function of public parameters only (ε, δ, counts), never of the data.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from dp_accounting import dp_event
from dp_accounting.pld import accountant as pld_accountant
from dp_accounting.pld import common as pld_common

from dppca_dask.accounting.calibration import calibrate_gaussian
from dppca_dask.accounting.composition import epsilon_for, gaussian_delta
from dppca_dask.errors import InvalidParameterError

__all__ = ["CALIBRATIONS", "analytic_gaussian_multiplier", "classic_gaussian_multiplier"]

#: Calibration modes: corrected constants (default) or the paper's, for reproduction.
CALIBRATIONS = ("standard", "paper")


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
