"""The Gaussian calibration and ε come from dp-accounting's exact functions and match the closed-form root found
independently (Balle & Wang 2018, Theorem 8: δ(ε) = Φ(1/(2s) − εs) − e^ε·Φ(−1/(2s) − εs)) to 1e-9 relative."""

from __future__ import annotations

import math

import pytest
from scipy import optimize, stats

from dppca_dask.accounting import calibrate_gaussian, gaussian_epsilon
from dppca_dask.accounting.composition import gaussian_delta


def _log_delta(s: float, epsilon: float) -> float:
    x = stats.norm.logcdf(1.0 / (2.0 * s) - epsilon * s)
    y = epsilon + stats.norm.logcdf(-1.0 / (2.0 * s) - epsilon * s)
    return -math.inf if y >= x else float(x + math.log1p(-math.exp(y - x)))


def _reference_sigma(epsilon: float, delta: float) -> float:
    """The root of δ(ε; s) = δ in s, bracketed and solved here without dp-accounting."""
    lo, hi = 1e-3, 1.0
    while _log_delta(hi, epsilon) > math.log(delta):
        lo, hi = hi, hi * 2.0
    return optimize.brentq(lambda s: _log_delta(s, epsilon) - math.log(delta), lo, hi, xtol=1e-15, rtol=1e-14)


def _reference_epsilon(s: float, delta: float) -> float:
    hi = 1.0
    while _log_delta(s, hi) > math.log(delta):
        hi *= 2.0
    return optimize.brentq(lambda e: _log_delta(s, e) - math.log(delta), 0.0, hi, xtol=1e-15, rtol=1e-14)


@pytest.mark.parametrize("epsilon", [0.01, 0.1, 0.5, 1.0, 4.0, 20.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-6, 1e-2])
@pytest.mark.parametrize("count", [1, 7])
def test_calibrate_gaussian_matches_the_closed_form_root(epsilon: float, delta: float, count: int) -> None:
    multiplier = calibrate_gaussian(epsilon=epsilon, delta=delta, count=count)
    expected = _reference_sigma(epsilon, delta) * (1.0 + 1e-9) * math.sqrt(count)  # the documented 1e-9 margin
    assert multiplier == pytest.approx(expected, rel=1e-9)
    # Never overshoots: the composed Gaussian (multiplier / sqrt(count)) meets δ at ε.
    assert gaussian_delta(multiplier / math.sqrt(count), epsilon) <= delta


@pytest.mark.parametrize("multiplier", [0.3, 1.0, 2.5, 10.0, 100.0])
@pytest.mark.parametrize("delta", [1e-12, 1e-6, 1e-2])
def test_gaussian_epsilon_matches_the_closed_form_root(multiplier: float, delta: float) -> None:
    epsilon = gaussian_epsilon(multiplier, delta)
    if gaussian_delta(multiplier, 0.0) <= delta:
        assert epsilon == 0.0
        return
    assert epsilon == pytest.approx(_reference_epsilon(multiplier, delta), rel=1e-9)
    assert gaussian_delta(multiplier, epsilon) <= delta  # never below the true ε


def test_known_value() -> None:
    # The value the former hand-written Brent search returned for (ε, δ) = (1, 1e-12): 6.557822074016675.
    assert calibrate_gaussian(epsilon=1.0, delta=1e-12) == pytest.approx(6.557822074016675, rel=1e-9)


def test_round_trip() -> None:
    # ε(σ(ε)) gives back ε (from below: σ carries a 1e-9 margin).
    for epsilon in (0.05, 1.0, 8.0):
        multiplier = calibrate_gaussian(epsilon=epsilon, delta=1e-6)
        assert gaussian_epsilon(multiplier, 1e-6) == pytest.approx(epsilon, rel=1e-7)
        assert gaussian_epsilon(multiplier, 1e-6) <= epsilon
