"""The seed-004 paper's own arithmetic (Lemma 3.1) and its inverse for calibration="paper"."""

from __future__ import annotations

import math

import pytest
from dp_accounting import GaussianDpEvent

from dppca_dask.accounting import EpsilonDeltaDpEvent, epsilon_for
from dppca_dask.methods.adaptive_power.paper import (
    PaperCalibration,
    lemma31_epsilon_delta,
    paper_adaptive_power_calibration,
    paper_adaptive_power_epsilon,
)
from dppca_dask.errors import InvalidParameterError


def test_lemma31_closed_form() -> None:
    # ε' = 2(T·ε₀² + sqrt(2·ln(1/δ₀)·T)·ε₀), δ' = (T+1)·δ₀; T = 30, ε₀ = 0.05, δ₀ = 1e-8:
    # 2(30·0.0025 + sqrt(60·ln(1e8))·0.05) = 2(0.075 + 33.24525…·0.05) = 3.474516…
    epsilon, delta = lemma31_epsilon_delta(epsilon0=0.05, delta0=1e-8, n_iter=30)
    assert epsilon == pytest.approx(2 * (30 * 0.05**2 + math.sqrt(2 * math.log(1e8) * 30) * 0.05), rel=1e-15)
    assert epsilon == pytest.approx(3.474516, abs=1e-6)
    assert delta == pytest.approx(31e-8, rel=1e-15)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 2.0, 8.0])
@pytest.mark.parametrize("delta", [1e-9, 1e-6, 1e-3])
@pytest.mark.parametrize("n_iter", [1, 10, 30, 200])
def test_paper_calibration_inverts_the_lemma(epsilon: float, delta: float, n_iter: int) -> None:
    cal = paper_adaptive_power_calibration(epsilon=epsilon, delta=delta, n_iter=n_iter)
    assert cal.delta0 == pytest.approx(delta / (n_iter + 1), rel=1e-15)
    back = lemma31_epsilon_delta(epsilon0=cal.epsilon0, delta0=cal.delta0, n_iter=n_iter)
    assert back[0] == pytest.approx(epsilon, rel=1e-12)
    assert back[1] == pytest.approx(delta, rel=1e-12)
    # the proof's Gaussian constant: σ/θ = 2·sqrt(ln(2/δ₀))/ε₀ (the larger of the two printed ones)
    assert cal.noise_multiplier == pytest.approx(2 * math.sqrt(math.log(2 / cal.delta0)) / cal.epsilon0, rel=1e-15)
    assert cal.noise_multiplier > math.sqrt(2 * math.log(2 / cal.delta0)) / cal.epsilon0
    assert cal.epsilon_svt == cal.epsilon0


def test_paper_calibration_reference() -> None:
    # (2, 1e-6), T = 30: δ₀ = 1e-6/31, ε₀ = 2/(sqrt(60·ln(31e6)) + sqrt(60·ln(31e6) + 120)) = 0.0302317…
    cal = paper_adaptive_power_calibration(epsilon=2.0, delta=1e-6, n_iter=30)
    assert cal.epsilon0 == pytest.approx(0.030231667, abs=1e-9)
    assert cal.noise_multiplier == pytest.approx(280.2277, abs=1e-4)
    assert cal.to_dict()["noise_multiplier"] == cal.noise_multiplier
    assert isinstance(cal, PaperCalibration)


def test_paper_noise_is_far_above_what_the_accountant_needs() -> None:
    # the accountant's figure for the paper's noise is well inside the target: Lemma 3.1 is loose
    cal = paper_adaptive_power_calibration(epsilon=2.0, delta=1e-6, n_iter=30)
    events = [EpsilonDeltaDpEvent(cal.epsilon_svt), GaussianDpEvent(cal.noise_multiplier)] * 30
    assert epsilon_for(events, delta=1e-6) < 2.0


def test_paper_figure_of_a_run() -> None:
    cal = paper_adaptive_power_calibration(epsilon=2.0, delta=1e-6, n_iter=30)
    figure = paper_adaptive_power_epsilon(
        epsilon_svt=cal.epsilon_svt, noise_multiplier=cal.noise_multiplier, n_iter=30, delta=1e-6
    )
    # equal per-iteration ε for both steps: the printed formula, which gives back the target
    assert figure["epsilon"] == pytest.approx(2.0, rel=1e-12)
    assert figure["epsilon0_gaussian"] == pytest.approx(cal.epsilon0, rel=1e-12)
    assert figure["delta"] == 1e-6 and figure["delta0"] == pytest.approx(1e-6 / 31, rel=1e-15)
    # different ε for the two steps: the two halves of the Lemma are summed
    figure = paper_adaptive_power_epsilon(epsilon_svt=0.05, noise_multiplier=15.26, n_iter=30, delta=1e-6)
    delta0 = 1e-6 / 31
    root = math.sqrt(2 * math.log(1 / delta0) * 30)
    e_gauss = 2 * math.sqrt(math.log(2 / delta0)) / 15.26
    assert figure["epsilon"] == pytest.approx(30 * 0.05**2 + root * 0.05 + 30 * e_gauss**2 + root * e_gauss)
    assert "Lemma 3.1" in figure["source"]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: lemma31_epsilon_delta(epsilon0=0.0, delta0=1e-8, n_iter=3), "epsilon0 must be finite and > 0"),
        (lambda: lemma31_epsilon_delta(epsilon0=0.1, delta0=1.0, n_iter=3), r"delta0 must be in \(0, 1\)"),
        (lambda: lemma31_epsilon_delta(epsilon0=0.1, delta0=1e-8, n_iter=0), "n_iter must be an integer >= 1"),
        (lambda: paper_adaptive_power_calibration(epsilon=-1.0, delta=1e-6, n_iter=3), "epsilon must be finite"),
        (lambda: paper_adaptive_power_epsilon(epsilon_svt=0.1, noise_multiplier=0.0, n_iter=3, delta=1e-6),
         "noise_multiplier must be finite and > 0"),
        (lambda: paper_adaptive_power_epsilon(epsilon_svt=0.1, noise_multiplier=1.0, n_iter=3, delta=0.0),
         r"delta must be in \(0, 1\)"),
    ],
)
def test_errors(call: object, message: str) -> None:
    with pytest.raises(InvalidParameterError, match=message):
        call()  # type: ignore[operator]
