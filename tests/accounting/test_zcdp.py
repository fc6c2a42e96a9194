"""zCDP closed forms, the tight (Canonne–Kamath–Steinke) and loose conversions, and the inverse."""

from __future__ import annotations

import math

import pytest
from dp_accounting import ZCDpEvent
from dp_accounting.rdp import RdpAccountant

from dppca_dask.accounting import gaussian_rho, pure_dp_rho, zcdp_epsilon, zcdp_epsilon_loose, zcdp_rho_for
from dppca_dask.errors import InvalidParameterError

RHOS = [0.0, 1e-8, 1e-4, 1 / 32, 0.1, 1.0, 10.0]
DELTAS = [1e-12, 1e-6, 1e-3, 0.1, 0.5]


def test_cks_reference_value() -> None:
    # ε = min_{α>1} αρ + ln(1 − 1/α) − (ln δ + ln α)/(α − 1) at ρ = 1/32, δ = 1e-3 (accounting.md)
    assert zcdp_epsilon(1 / 32, delta=1e-3) == pytest.approx(0.6880024554878085, rel=1e-12)


def test_loose_closed_form() -> None:
    # ρ + 2·sqrt(ρ·ln(1/δ)) at ρ = 1/32, δ = 1e-3: 1/32 + 2·sqrt(ln(1000)/32) = 0.96048054721...
    assert zcdp_epsilon_loose(1 / 32, delta=1e-3) == pytest.approx(1 / 32 + 2 * math.sqrt(math.log(1000) / 32))
    assert zcdp_epsilon_loose(0.0, delta=1e-6) == 0.0


def test_gaussian_and_pure_closed_forms() -> None:
    assert gaussian_rho(10.0) == 1 / 200  # 1/(2m²)
    assert gaussian_rho(math.inf) == 0.0
    assert pure_dp_rho(0.05) == pytest.approx(0.05**2 / 2, rel=1e-15)  # ε²/2
    # the multiplier in seed 000's check: T Gaussians with σ give ρ = T/(2σ²)
    assert 20 * gaussian_rho(66.4903) == pytest.approx(20 / (2 * 66.4903**2))


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("rho", RHOS)
def test_tight_is_below_loose_and_below_the_rdp_accountant(rho: float, delta: float) -> None:
    tight = zcdp_epsilon(rho, delta=delta)
    assert 0.0 <= tight <= zcdp_epsilon_loose(rho, delta=delta) + 1e-12
    # dp-accounting evaluates the same conversion on a fixed grid of orders: never below the continuous minimum
    rdp = RdpAccountant().compose(ZCDpEvent(rho)).get_epsilon(delta)
    assert tight <= rdp + 1e-9
    if rho >= 1e-4:
        assert rdp <= tight * 1.05 + 1e-9  # and close to it where the grid is dense enough


def test_edge_values() -> None:
    assert zcdp_epsilon(0.0, delta=1e-6) == 0.0
    assert zcdp_epsilon(math.inf, delta=1e-6) == math.inf
    # a huge δ allows ε = 0 for small ρ
    assert zcdp_epsilon(1e-6, delta=0.9) == 0.0


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("epsilon", [1e-3, 0.1, 0.5, 1.0, 2.0, 10.0, 100.0])
def test_inverse_is_the_largest_rho_meeting_the_target(epsilon: float, delta: float) -> None:
    rho = zcdp_rho_for(epsilon, delta=delta)
    assert zcdp_epsilon(rho, delta=delta) <= epsilon  # never overshoots
    assert zcdp_epsilon(rho * (1 + 1e-9), delta=delta) > epsilon  # and is tight


def test_monotone_in_rho() -> None:
    values = [zcdp_epsilon(r, delta=1e-6) for r in RHOS]
    assert values == sorted(values)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: zcdp_epsilon(-1.0, delta=1e-6), "rho must be >= 0"),
        (lambda: zcdp_epsilon(math.nan, delta=1e-6), "rho must be >= 0"),
        (lambda: zcdp_epsilon(0.1, delta=0.0), r"delta must be in \(0, 1\)"),
        (lambda: zcdp_epsilon_loose(0.1, delta=1.0), r"delta must be in \(0, 1\)"),
        (lambda: zcdp_epsilon_loose(-0.1, delta=0.5), "rho must be >= 0"),
        (lambda: zcdp_rho_for(0.0, delta=1e-6), "epsilon must be finite and > 0"),
        (lambda: zcdp_rho_for(math.inf, delta=1e-6), "epsilon must be finite and > 0"),
        (lambda: zcdp_rho_for(1.0, delta=2.0), r"delta must be in \(0, 1\)"),
        (lambda: gaussian_rho(0.0), "noise_multiplier must be > 0"),
        (lambda: pure_dp_rho(-0.5), "epsilon must be >= 0"),
    ],
)
def test_errors(call: object, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        call()  # type: ignore[operator]
