"""Golden constants and accounting of the Hardt–Roth mechanisms (seed 000 spec §6.1–6.3, seed 003 spec §7.1–7.2)."""

from __future__ import annotations

import math

import pytest
from dp_accounting import dp_event

from dppca_dask.accounting import ENTRY_CHANGE, ROW_CHANGE, build_report, epsilon_for, gaussian_delta, gaussian_epsilon
from dppca_dask.accounting.events import EpsilonDeltaDpEvent
from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods.hardt_roth.low_rank_calibration import (
    calibrate_private_low_rank,
    calibrate_randomized_response,
    pproj_rho,
    prf_chi2_sensitivity,
    prf_rho,
    prf_sensitivity,
    rr_sigma,
)
from dppca_dask.methods.hardt_roth.multipliers import classic_gaussian_multiplier
from dppca_dask.methods.hardt_roth.power_calibration import (
    calibrate_private_power,
    paper_rank_k_epsilon,
    ppi_gdp_mu,
    ppi_noise_std,
    ppi_sigma,
    rank_k_split,
)
from dppca_dask.methods.hardt_roth.relations import entry_relation, row_change_relation

# ------------------------------------------------------------------------------------------------ seed 000


def test_fig2_sigma_golden_values() -> None:
    # σ = 2/ε·sqrt(4·T·ln(1/δ)) = 2·sqrt(80·13.8155) = 66.4903; std = σ·sqrt(C/n) = σ·0.1; var = std².
    sigma = ppi_sigma(1.0, 1e-6, 20)
    assert sigma == pytest.approx(66.4903, rel=1e-6)
    std = ppi_noise_std(sigma, 100, 10_000)
    assert std == pytest.approx(6.64903, rel=1e-6)
    assert std**2 == pytest.approx(44.2096, rel=1e-5)
    assert ppi_noise_std(sigma, 100, 10_000, entry_bound=3.0) == pytest.approx(3 * 6.64903, rel=1e-6)


def test_worst_case_c_equals_n_gives_sigma_per_coordinate() -> None:
    # spec §6.8: C = n reduces to std = σ per coordinate.
    sigma = ppi_sigma(0.5, 1e-5, 7)
    assert ppi_noise_std(sigma, 4096, 4096) == pytest.approx(sigma, rel=1e-15)


def test_fig3_split_golden_values() -> None:
    # ε' = 1/sqrt(16·ln(1e6)) = 0.0672599; Laplace scale 1/ε' = 14.8677; δ' = δ/k = 2.5e-7.
    eps1, delta1 = rank_k_split(1.0, 1e-6, 4)
    assert eps1 == pytest.approx(0.0672599, rel=1e-6)
    assert 1.0 / eps1 == pytest.approx(14.8677, rel=1e-5)
    assert delta1 == pytest.approx(2.5e-7, rel=1e-12)
    # The literal Theorem 2.4 total: sqrt(4k·ln(1/δ))·ε' + 4k·ε'² = 1 + 1/ln(1e6) = 1.0724, and 3δ.
    total, total_delta = paper_rank_k_epsilon(1.0, 1e-6, 4)
    assert total == pytest.approx(1.0 + 1.0 / math.log(1e6), rel=1e-12)
    assert total == pytest.approx(1.072, abs=5e-4)
    assert total_delta == pytest.approx(3e-6, rel=1e-12)


@pytest.mark.parametrize("n_iter", [1, 5, 20, 74])
def test_gdp_mu_of_fig2_does_not_depend_on_t(n_iter: int) -> None:
    # μ_GDP = sqrt(T)/σ = ε/(4·sqrt(ln(1/δ))) for every T (spec §1.2).
    sigma = ppi_sigma(1.0, 1e-6, n_iter)
    assert ppi_gdp_mu(sigma, n_iter) == pytest.approx(1.0 / (4.0 * math.sqrt(math.log(1e6))), rel=1e-12)


@pytest.mark.parametrize(
    ("epsilon", "delta", "exact"),
    # spec §1.2 table: the ε the paper's σ actually achieves at the target δ (exact Gaussian composition)
    [(0.1, 1e-6, 0.022), (0.5, 1e-6, 0.124), (1.0, 1e-6, 0.260), (1.0, 1e-3, 0.186), (2.0, 1e-6, 0.545),
     (5.0, 1e-6, 1.46)],
)
def test_paper_sigma_is_valid_by_exact_gaussian_composition(epsilon: float, delta: float, exact: float) -> None:
    n_iter = 20
    merged = ppi_sigma(epsilon, delta, n_iter) / math.sqrt(n_iter)  # T Gaussians of σ = one of σ/sqrt(T)
    achieved = gaussian_epsilon(merged, delta)
    assert achieved == pytest.approx(exact, rel=0.02, abs=1.5e-3)
    assert achieved <= epsilon
    # and the accountant agrees on the run's events
    cal = calibrate_private_power(epsilon=epsilon, delta=delta, n_iter=n_iter, calibration="paper")
    assert cal.sigma == pytest.approx(ppi_sigma(epsilon, delta, n_iter), rel=1e-15)
    assert epsilon_for(cal.events(), delta=delta) == pytest.approx(achieved, rel=1e-9)


def test_paper_embedding_halves_the_budget_and_accounts_the_group_factor() -> None:
    cal = calibrate_private_power(epsilon=1.0, delta=1e-6, n_iter=20, embedding=True, calibration="paper")
    # Fig. 2 at (ε/2, δ/2) on B; one entry of A is two entries of B: the multiplier w.r.t. A is σ/sqrt(2).
    assert cal.sigma == pytest.approx(ppi_sigma(0.5, 5e-7, 20), rel=1e-15)
    assert cal.noise_multiplier == pytest.approx(cal.sigma / math.sqrt(2.0), rel=1e-15)
    assert cal.embedding_factor == pytest.approx(math.sqrt(2.0))
    assert epsilon_for(cal.events(), delta=1e-6) < 1.0


def test_paper_rank_k_uses_fig3_split_and_laplace_scale() -> None:
    cal = calibrate_private_power(epsilon=1.0, delta=1e-6, n_iter=20, n_components=4, n_values=4,
                                  calibration="paper")
    eps1, delta1 = rank_k_split(1.0, 1e-6, 4)
    assert cal.run_epsilon == pytest.approx(eps1) and cal.run_delta == pytest.approx(delta1)
    assert cal.sigma == pytest.approx(ppi_sigma(eps1, delta1, 20), rel=1e-15)
    assert cal.value_epsilon == pytest.approx(eps1)  # Lap(1/ε'): scale 14.8677
    report = build_report(cal.events(), target_epsilon=1.0, target_delta=1e-6, neighbouring=ENTRY_CHANGE)
    assert report.meets_target  # exact composition: well inside the paper's claim
    assert cal.paper_figure()["epsilon"] == pytest.approx(paper_rank_k_epsilon(1.0, 1e-6, 4)[0])


def test_paper_c_doubling_divides_each_run_by_the_ladder_length() -> None:
    cal = calibrate_private_power(epsilon=1.0, delta=1e-6, n_iter=10, n_runs=8, calibration="paper")
    assert cal.run_epsilon == pytest.approx(1.0 / 8) and cal.run_delta == pytest.approx(1e-6 / 8)
    assert cal.sigma == pytest.approx(ppi_sigma(1.0 / 8, 1e-6 / 8, 10), rel=1e-15)
    assert cal.n_rounds == 80


@pytest.mark.parametrize(
    ("kwargs"),
    [
        {"n_iter": 20},
        {"n_iter": 10, "n_components": 3, "n_values": 3},
        {"n_iter": 5, "n_runs": 12, "embedding": True},
        {"n_iter": 30, "n_components": 2, "n_runs": 4, "n_values": 1},
    ],
)
@pytest.mark.parametrize(("epsilon", "delta"), [(0.25, 1e-6), (1.0, 1e-6), (4.0, 1e-5)])
def test_standard_calibration_meets_the_target_tightly(kwargs: dict, epsilon: float, delta: float) -> None:
    cal = calibrate_private_power(epsilon=epsilon, delta=delta, **kwargs)
    achieved = epsilon_for(cal.events(), delta=delta)
    assert achieved <= epsilon
    if not kwargs.get("n_values"):
        assert achieved == pytest.approx(epsilon, rel=1e-6)  # all budget to the Gaussian rounds, exactly
    else:
        assert achieved > 0.9 * epsilon  # the values' share is composed basically, the rest exactly
    # standard is never noisier than the paper's σ
    paper = calibrate_private_power(epsilon=epsilon, delta=delta, calibration="paper", **kwargs)
    assert cal.noise_multiplier < paper.noise_multiplier


def test_standard_embedding_scales_noise_by_sqrt2() -> None:
    square = calibrate_private_power(epsilon=1.0, delta=1e-6, n_iter=20)
    embedded = calibrate_private_power(epsilon=1.0, delta=1e-6, n_iter=20, embedding=True)
    assert embedded.noise_multiplier == pytest.approx(square.noise_multiplier, rel=1e-12)
    assert embedded.sigma == pytest.approx(math.sqrt(2.0) * square.sigma, rel=1e-12)


def test_private_power_calibration_rejects_bad_parameters() -> None:
    with pytest.raises(InvalidParameterError, match="n_iter"):
        calibrate_private_power(epsilon=1.0, delta=1e-6, n_iter=0)
    with pytest.raises(InvalidParameterError, match="calibration"):
        calibrate_private_power(epsilon=1.0, delta=1e-6, n_iter=3, calibration="loose")
    with pytest.raises(InvalidParameterError, match="value_share"):
        calibrate_private_power(epsilon=1.0, delta=1e-6, n_iter=3, n_values=1, value_share=1.5)
    with pytest.raises(InvalidParameterError, match="epsilon"):
        calibrate_private_power(epsilon=0.0, delta=1e-6, n_iter=3)
    with pytest.raises(InvalidParameterError, match="delta"):
        calibrate_private_power(epsilon=1.0, delta=1.0, n_iter=3)


def test_relations_name_their_bounds() -> None:
    assert entry_relation(1.0) == ENTRY_CHANGE
    assert entry_relation(5.0) == "one entry changes by at most 5"
    assert row_change_relation(1.0) == ROW_CHANGE
    assert row_change_relation(2.5) == "one row changes by a vector of L2 norm at most 2.5"


# ------------------------------------------------------------------------------------------------ seed 003


@pytest.mark.parametrize(
    ("r", "p", "epsilon", "delta", "rho1_paper", "rho1_standard", "rho2", "rr_paper", "rr_standard"),
    [  # spec §7.1
        (2, 2, 1.0, 1e-6, 47.032, 130.614, 366.750, 3.7468, 4.2247),
        (10, 11, 1.0, 1e-6, 112.815, 313.304, 879.723, 3.7468, 4.2247),
        (5, 6, 0.5, 1e-5, 150.048, 384.344, 1077.807, 6.8516, 7.0318),
        (2, 2, 1.0, 1e-3, 36.439, 75.197, 209.885, 2.6704, 2.5747),
    ],
)
def test_seed003_golden_constants(
    r: int, p: int, epsilon: float, delta: float, rho1_paper: float, rho1_standard: float, rho2: float,
    rr_paper: float, rr_standard: float,
) -> None:
    # ρ₁ paper = (4/ε)·sqrt(2k·ln(8k/δ)); standard = (2/ε)·sqrt(2k·ln(8k/δ))·sqrt(2·ln(5/δ));
    # ρ₂ = (4/ε)·sqrt(8k·ln(8k/δ)·ln(4/δ)); σ_RR = sqrt(ln(1.25/δ))/ε (paper) or the analytic Gaussian (standard).
    paper = calibrate_private_low_rank(epsilon=epsilon, delta=delta, rank=r, oversampling=p, calibration="paper")
    assert paper.range_rho == pytest.approx(rho1_paper, rel=1e-4)
    assert paper.projection_rho == pytest.approx(rho2, rel=1e-4)
    assert rr_sigma(epsilon, delta, calibration="paper") == pytest.approx(rr_paper, rel=1e-4)
    assert calibrate_randomized_response(epsilon=epsilon, delta=delta) == pytest.approx(rr_standard, rel=1e-4)
    # the step functions at (ε/2, δ/2) give the same numbers
    k = r + p
    assert prf_rho(epsilon / 2, delta / 2, k) == pytest.approx(rho1_standard, rel=1e-4)
    assert pproj_rho(epsilon / 2, delta / 2, k) == pytest.approx(rho2, rel=1e-4)
    assert paper.range_sensitivity == pytest.approx(prf_sensitivity(k, delta / 2), rel=1e-15)


@pytest.mark.parametrize(
    ("epsilon", "achieved"),  # spec §1.4: with σ/Δ = 2/ε the range finder's δ does not depend on the target
    [(0.05, 2.2e-4), (0.1, 4.5e-4), (0.5, 2.7e-3), (1.0, 6.8e-3)],
)
def test_paper_range_finder_delta_is_far_above_any_target(epsilon: float, achieved: float) -> None:
    multiplier = prf_rho(epsilon, 1e-6, 4, calibration="paper") / prf_sensitivity(4, 1e-6)
    assert multiplier == pytest.approx(2.0 / epsilon, rel=1e-12)
    assert gaussian_delta(multiplier, epsilon) == pytest.approx(achieved, rel=0.06)


@pytest.mark.parametrize(
    ("epsilon", "delta", "paper_delta", "standard_delta"),  # spec §1.4 table (Balle–Wang δ at the target ε)
    [(0.1, 1e-6, 6.0e-7, 2.1e-10), (0.5, 1e-6, 3.6e-6, 1.3e-9), (1.0, 1e-6, 9.3e-6, 3.2e-9),
     (1.0, 1e-3, 7.1e-4, 8.2e-6)],
)
def test_gaussian_constant_of_the_paper_fails_and_the_standard_one_holds(
    epsilon: float, delta: float, paper_delta: float, standard_delta: float
) -> None:
    paper = gaussian_delta(classic_gaussian_multiplier(epsilon, delta, paper=True), epsilon)
    standard = gaussian_delta(classic_gaussian_multiplier(epsilon, delta), epsilon)
    assert paper == pytest.approx(paper_delta, rel=0.06)
    assert standard == pytest.approx(standard_delta, rel=0.06)
    assert standard <= delta


@pytest.mark.parametrize(("epsilon", "delta"), [(0.25, 1e-6), (1.0, 1e-6), (4.0, 1e-6), (20.0, 1e-6)])
@pytest.mark.parametrize("projection", ["paper", "tight"])
def test_standard_pfp_is_calibrated_to_its_target_by_the_accountant(
    epsilon: float, delta: float, projection: str
) -> None:
    cal = calibrate_private_low_rank(epsilon=epsilon, delta=delta, rank=2, oversampling=2, projection=projection)
    # the exact chi-square quantile, not the union bound: P(chi2_4 > c^2) = delta/4
    assert cal.range_sensitivity == pytest.approx(prf_chi2_sensitivity(4, delta / 4), rel=1e-15)
    assert cal.range_sensitivity < prf_sensitivity(4, delta / 2)
    assert cal.range_failure == pytest.approx(delta / 4)
    report = build_report(cal.events(), target_epsilon=epsilon, target_delta=delta, neighbouring=ROW_CHANGE)
    assert report.meets_target
    assert 0.99 * epsilon <= epsilon_for(cal.events(), delta=delta) <= epsilon
    # both steps get the same multiplier: range finder rho1/c_RF, projection rho2/sqrt(k) (or the tight one)
    step = cal.projection_multiplier if projection == "tight" else cal.projection_rho / math.sqrt(cal.width)
    assert cal.range_multiplier == pytest.approx(step, rel=1e-12)


def test_range_finder_chi2_constant_and_the_default_before_after() -> None:
    # issue 8.11: the union bound gave 11.76 (k = 4, failure 2.5e-7), the exact quantile 6.03; the earlier
    # per-step constants reported 0.361 at a target of 1, the calibrated ones report within 1% of it.
    from scipy import stats

    assert prf_sensitivity(4, 5e-7) == pytest.approx(11.76, abs=0.01)
    assert prf_chi2_sensitivity(4, 2.5e-7) == pytest.approx(6.03, abs=0.01)
    assert stats.chi2.sf(prf_chi2_sensitivity(4, 2.5e-7) ** 2, 4) == pytest.approx(2.5e-7, rel=1e-6)
    old = [dp_event.GaussianDpEvent(prf_rho(0.5, 5e-7, 4) / prf_sensitivity(4, 5e-7)),
           EpsilonDeltaDpEvent(0.0, 2.5e-7), dp_event.GaussianDpEvent(pproj_rho(0.5, 5e-7, 4) / 2.0)]
    assert epsilon_for(old, delta=1e-6) == pytest.approx(0.361, abs=0.002)
    cal = calibrate_private_low_rank(epsilon=1.0, delta=1e-6, rank=2, oversampling=2)
    assert 0.99 <= epsilon_for(cal.events(), delta=1e-6) <= 1.0
    with pytest.raises(InvalidParameterError, match="failure"):
        prf_chi2_sensitivity(4, 0.0)


def test_projection_per_row_composition_arithmetic() -> None:
    # Lemma 4.6: per row (ε₀, δ/(2k)) with ε₀ = ε/sqrt(8k·ln(2/δ)); advanced composition over k rows gives
    # ε/2 + ε²/(4·ln(2/δ)) ≤ ε and δ.
    epsilon, delta, k = 1.0, 1e-6, 4
    eps0 = epsilon / math.sqrt(8 * k * math.log(2 / delta))
    total = math.sqrt(2 * k * math.log(2 / delta)) * eps0 + 2 * k * eps0**2
    assert total == pytest.approx(epsilon / 2 + epsilon**2 / (4 * math.log(2 / delta)), rel=1e-12)
    assert total <= epsilon
    # and ρ₂ is at least the per-row classic Gaussian constant ε₀⁻¹·sqrt(2·ln(2.5k/δ))
    assert pproj_rho(epsilon, delta, k) >= math.sqrt(2 * math.log(2.5 * k / delta)) / eps0


def test_paper_pfp_does_not_meet_its_target() -> None:
    cal = calibrate_private_low_rank(epsilon=1.0, delta=1e-6, rank=2, oversampling=2, calibration="paper")
    report = build_report(cal.events(), target_epsilon=1.0, target_delta=1e-6, neighbouring=ROW_CHANGE)
    assert not report.meets_target
    assert report.epsilon > 1.0


def test_large_epsilon_raises_the_classic_constant_to_the_analytic_one() -> None:
    # the classic bound is proved for ε < 1; at ε = 20 it fails and the analytic multiplier is used instead
    classic = classic_gaussian_multiplier(20.0, 1e-6)
    assert gaussian_delta(classic, 20.0) > 1e-6
    sigma = rr_sigma(20.0, 1e-6)
    assert sigma > classic and gaussian_delta(sigma, 20.0) <= 1e-6


def test_seed003_calibration_rejects_bad_parameters() -> None:
    with pytest.raises(InvalidParameterError, match="projection"):
        calibrate_private_low_rank(epsilon=1.0, delta=1e-6, rank=2, oversampling=2, projection="exact")
    with pytest.raises(InvalidParameterError, match="oversampling"):
        calibrate_private_low_rank(epsilon=1.0, delta=1e-6, rank=2, oversampling=-1)
    with pytest.raises(InvalidParameterError, match="width"):
        prf_sensitivity(0, 1e-6)
    with pytest.raises(InvalidParameterError, match="delta"):
        prf_sensitivity(4, 0.0)


@pytest.mark.parametrize(("epsilon", "delta"), [(1.0, 1e-6), (0.1, 1e-6), (0.5, 1e-5), (4.0, 1e-9)])
def test_randomized_response_is_the_analytic_gaussian_and_reports_its_target(epsilon: float, delta: float) -> None:
    from dp_accounting.pld import accountant, common

    sigma = rr_sigma(epsilon, delta)
    reference = accountant.get_smallest_gaussian_noise(common.DifferentialPrivacyParameters(epsilon, delta), 1, 1.0)
    assert sigma == pytest.approx(reference, rel=1e-6)
    assert gaussian_delta(sigma, epsilon) <= delta
    assert sigma < classic_gaussian_multiplier(epsilon, delta)
    reported = epsilon_for([dp_event.GaussianDpEvent(sigma)], delta=delta)
    assert epsilon * 0.99 <= reported <= epsilon
    if (epsilon, delta) == (1.0, 1e-6):  # the classic formula's 5.2988 reported about 0.80
        assert sigma == pytest.approx(4.2247, rel=1e-4)
        assert epsilon_for([dp_event.GaussianDpEvent(5.2988)], delta=delta) < 0.85


@pytest.mark.parametrize(
    ("n_components", "n_values", "n_runs", "embedding"), [(1, 0, 1, True), (2, 1, 1, False), (4, 4, 1, False),
                                                          (1, 1, 4, True)],
)
def test_standard_private_power_reports_its_target_within_one_percent(
    n_components: int, n_values: int, n_runs: int, embedding: bool
) -> None:
    # the Laplace values and the Gaussian rounds are calibrated together by the PLD accountant (basic composition
    # of the two parts reported 0.968 at a target of 1)
    cal = calibrate_private_power(epsilon=1.0, delta=1e-6, n_iter=20, n_components=n_components,
                                  n_values=n_values, n_runs=n_runs, embedding=embedding)
    reported = epsilon_for(cal.events(), delta=1e-6)
    assert 0.99 <= reported <= 1.0
    report = build_report(cal.events(), target_epsilon=1.0, target_delta=1e-6, neighbouring=ENTRY_CHANGE)
    assert report.meets_target and report.epsilon >= 0.99
