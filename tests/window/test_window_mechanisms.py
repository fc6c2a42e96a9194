"""Wishart, JL (sampled from the Gram) and Gaussian matrix releases: golden constants and noise scale.

Statistical assertions are two-sided at a false-failure rate of alpha = 1e-6 each, on exact sufficient statistics
of a release of the all-zero Gram (pure noise):
- Wishart: ``R = GᵀG`` with G a ``⌈τ⌉×d`` standard normal matrix, so ``tr(R) ~ χ²(⌈τ⌉·d)``;
- JL: ``c²σ²·ZᵀZ`` with ``Z_ij ~ N(0, 1/m)``, so ``m·tr(ZᵀZ) ~ χ²(m·d)``;
- Gaussian: the upper triangle's ``Σz²/σ² ~ χ²(d(d+1)/2)``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dppca_dask.accounting.events import EpsilonDeltaDpEvent
from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.testing import AuditingNoiseSource, ZeroNoiseSource
from dppca_dask.mechanisms.wishart import (
    jl_gram_mechanism,
    jl_sigma,
    symmetric_gaussian_mechanism,
    wishart_mechanism,
    wishart_tau,
)

ALPHA = 1e-6
pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")


def _two_sided(dist, statistic: float) -> bool:
    return bool(dist.cdf(statistic) > ALPHA / 2 and dist.sf(statistic) > ALPHA / 2)


def test_golden_tau_and_sigma():
    # seed001 spec §1.3 at ε = 1, δ = 1e-5, d = 10: ln(4/δ) = 12.899220, ln(1/δ) = 11.512925
    assert wishart_tau(10, epsilon=1, delta=1e-5, rule="alg7") == 171  # ⌊10 + 14·11.512925⌋
    assert wishart_tau(10, epsilon=1, delta=1e-5, rule="thm14") == pytest.approx(190.589, abs=1e-3)  # 10 + 14·12.8992
    assert wishart_tau(10, epsilon=1, delta=1e-5) == pytest.approx(371.178, abs=1e-3)  # 10 + 28·12.8992 (thm11)
    assert jl_sigma(sketch_rows=1, epsilon=1, delta=1e-5) == pytest.approx(70.364, abs=1e-3)  # 16·√12.8992 + 12.8992
    assert jl_sigma(sketch_rows=1, rank_bound=3, epsilon=1, delta=1e-5) == pytest.approx(112.431, abs=1e-3)
    assert jl_sigma(sketch_rows=48, epsilon=1, delta=1e-5) == pytest.approx(112.431, abs=1e-3)  # 4·√(48·12.8992) + ..
    assert wishart_tau(10, epsilon=2, delta=1e-5) == pytest.approx(10 + 7 * math.log(4e5))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: wishart_tau(0, epsilon=1, delta=1e-5), "dim must be a positive integer"),
        (lambda: wishart_tau(3, epsilon=0, delta=1e-5), "epsilon must be finite and > 0"),
        (lambda: wishart_tau(3, epsilon=1, delta=1.0), "delta must be in"),
        (lambda: wishart_tau(3, epsilon=1, delta=1e-5, rule="thm99"), "tau_rule must be one of"),
        (lambda: jl_sigma(sketch_rows=0, epsilon=1, delta=1e-5), "sketch_rows must be a positive integer"),
        (lambda: jl_sigma(sketch_rows=2, rank_bound=True, epsilon=1, delta=1e-5), "rank_bound must be"),
    ],
)
def test_bad_parameters(call, message):
    with pytest.raises(InvalidParameterError, match=message):
        call()


def test_bad_gram_refused_before_any_draw():
    noise = AuditingNoiseSource(0)
    with pytest.raises(InvalidParameterError, match="square"):
        wishart_mechanism(np.zeros((2, 3)), row_norm_bound=1, epsilon=1, delta=1e-5, noise=noise, release="w")
    with pytest.raises(InvalidInputError, match="NaN or infinite"):
        jl_gram_mechanism(np.full((2, 2), np.nan), row_norm_bound=1, epsilon=1, delta=1e-5, sketch_rows=2,
                          noise=noise, release="j")
    assert noise.records == []


def test_wishart_noise_scale(seed):
    d, c = 5, 2.0
    noise = NoiseSource.from_seed(seed)
    noisy, tau, event = wishart_mechanism(np.zeros((d, d)), row_norm_bound=c, epsilon=1.0, delta=1e-5,
                                          noise=noise, release="w")
    assert tau == math.ceil(wishart_tau(d, epsilon=1.0, delta=1e-5)) and event == EpsilonDeltaDpEvent(1.0, 1e-5)
    assert np.allclose(noisy, noisy.T) and np.linalg.eigvalsh(noisy).min() > 0
    assert _two_sided(stats.chi2(tau * d), float(np.trace(noisy)) / c**2)


def test_wishart_identity_given_the_gram(seed):
    # release − K is exactly c²·Wis(τ, I) whatever K: same draws on two Grams differ by the Gram difference
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((30, 4))
    gram = rows.T @ rows
    a, _, _ = wishart_mechanism(gram, row_norm_bound=1, epsilon=1, delta=1e-3, noise=NoiseSource.from_seed(seed),
                                release="w")
    b, _, _ = wishart_mechanism(np.zeros((4, 4)), row_norm_bound=1, epsilon=1, delta=1e-3,
                                noise=NoiseSource.from_seed(seed), release="w")
    assert np.allclose(a - b, gram)


def test_jl_noise_scale(seed):
    d, m, c = 4, 9, 1.5
    noise = NoiseSource.from_seed(seed)
    noisy, sigma, _ = jl_gram_mechanism(np.zeros((d, d)), row_norm_bound=c, epsilon=1.0, delta=1e-5,
                                        sketch_rows=m, noise=noise, release="j")
    assert sigma == jl_sigma(sketch_rows=m, epsilon=1.0, delta=1e-5)
    assert _two_sided(stats.chi2(m * d), m * float(np.trace(noisy)) / (c * c * sigma * sigma))


def test_jl_sampled_from_the_gram_has_the_right_mean(seed):
    # E[ÃᵀÃ] = K + σ²I; with zero noise draws the release is 0, and with draws Z it is rootᵀZᵀZ·root
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((50, 3))
    gram = rows.T @ rows
    zero, sigma, _ = jl_gram_mechanism(gram, row_norm_bound=1, epsilon=1, delta=1e-5, sketch_rows=2,
                                       noise=ZeroNoiseSource(), release="j")
    assert np.allclose(zero, 0)
    total = np.zeros((3, 3))
    reps = 400
    source = NoiseSource.from_seed(seed)
    for i in range(reps):
        noisy, sigma, _ = jl_gram_mechanism(gram, row_norm_bound=1, epsilon=1, delta=1e-5, sketch_rows=3,
                                            noise=source, release=f"j{i}")
        total += noisy
    mean = total / reps
    target = gram + sigma**2 * np.eye(3)
    # each diagonal entry is target_ii·χ²(m)/m: over 400 draws its relative sd is sqrt(2/(3·400)) ≈ 0.041;
    # 6 sd (two-sided tail < 2e-9) per entry
    assert np.all(np.abs(np.diag(mean) / np.diag(target) - 1) < 6 * math.sqrt(2 / (3 * reps)))


def test_symmetric_gaussian_noise_scale(seed):
    d, c, multiplier = 8, 0.5, 3.0
    noisy, event = symmetric_gaussian_mechanism(np.zeros((d, d)), row_norm_bound=c, noise_multiplier=multiplier,
                                                noise=NoiseSource.from_seed(seed), release="g")
    assert np.array_equal(noisy, noisy.T) and event.noise_multiplier == multiplier
    upper = noisy[np.triu_indices(d)]
    assert _two_sided(stats.chi2(d * (d + 1) // 2), float(np.sum((upper / (multiplier * c * c)) ** 2)))


def test_hardened_sampler_is_refused_for_wishart_and_jl():
    pytest.importorskip("opendp")
    noise = NoiseSource.from_entropy(sampler="hardened")
    for call in (
        lambda: wishart_mechanism(np.eye(2), row_norm_bound=1, epsilon=1, delta=1e-5, noise=noise, release="w"),
        lambda: jl_gram_mechanism(np.eye(2), row_norm_bound=1, epsilon=1, delta=1e-5, sketch_rows=2, noise=noise,
                                  release="j"),
    ):
        with pytest.raises(InvalidParameterError, match="no hardened"):
            call()


def test_registry_entries_plan_from_public_parameters():
    from dppca_dask.methods import get_mechanism, mechanism_names

    assert mechanism_names("window")[:3] == ("gaussian", "wishart", "jl")
    wishart = get_mechanism("wishart", "window").plan({"epsilon": 1.0, "delta": 1e-5}, n_rows=None, n_cols=10)
    assert wishart.calibration["tau"] == math.ceil(wishart_tau(10, epsilon=1.0, delta=1e-5))
    assert wishart.events == (EpsilonDeltaDpEvent(1.0, 1e-5),) and wishart.neighbouring == "add/remove one row"
    rows = get_mechanism("gaussian", "window").plan({"epsilon": 1.0, "delta": 1e-5, "rows_window": True},
                                                    n_rows=None, n_cols=3)
    assert rows.calibration["l2_sensitivity"] == pytest.approx(math.sqrt(2)) and "oldest row" in rows.neighbouring
    validate = get_mechanism("jl", "window").validate
    with pytest.raises(InvalidParameterError, match="unknown parameter"):
        validate({"epsilon": 1.0, "delta": 1e-5, "n_iter": 3})
    with pytest.raises(InvalidParameterError, match="epsilon must be finite"):
        validate({"epsilon": True, "delta": 1e-5})
    with pytest.raises(InvalidParameterError, match="delta must be in"):
        validate({"epsilon": 1.0, "delta": 2.0})
