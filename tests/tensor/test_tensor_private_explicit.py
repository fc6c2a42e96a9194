"""Alg. 3 on explicit tensors: calibration golden values, composition, sensitivity, noise scale, utility trend."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from dppca_dask.accounting import epsilon_for
from dppca_dask.errors import InvalidParameterError
from dppca_dask.kernels import tensor as K
from dppca_dask.mechanisms.testing import AuditingNoiseSource, ZeroNoiseSource
from dppca_dask.methods.tensor import tensor_power_method
from dppca_dask.methods.tensor.private import (
    ENTRY_ORBIT,
    GaussianReleaser,
    calibrate_tensor,
    dwork_roth_epsilon,
    entry_scalar_sensitivity,
    entry_vector_sensitivity,
    paper_tensor_calibration,
    private_tensor_power_method,
)

ALPHA = 1e-6


def symmetrize(i: int, j: int, k: int, d: int) -> np.ndarray:
    """The paper's neighbour: the *sum* over the six permutations of e_i⊗e_j⊗e_k."""
    out = np.zeros((d, d, d))
    for a, b, c in itertools.permutations((i, j, k)):
        out[a, b, c] += 1.0
    return out


@pytest.mark.parametrize(
    ("k", "L", "R", "K_", "delta_prime", "epsilon_prime", "nu"),
    [(3, 30, 20, 1890, 2.646e-9, 5.7139e-3, 6.6369e3), (1, 10, 10, 110, 4.545e-8, 2.3685e-2, 1.4828e3)],
)
def test_paper_calibration_golden_values(k, L, R, K_, delta_prime, epsilon_prime, nu):  # check 11
    # K = kL(R+1); δ' = δ/(2K); ε' = ε/√(K(4+ln(2/δ))); ν = 6√(2 ln(1.25/δ'))/ε' (spec 002 §1.4 reference values)
    plan = calibrate_tensor(epsilon=1.0, delta=1e-5, n_components=k, n_restarts=L, n_iter=R, calibration="paper")
    assert plan.n_releases == K_
    assert plan.paper["delta_prime"] == pytest.approx(delta_prime, rel=1e-3)
    assert plan.paper["epsilon_prime"] == pytest.approx(epsilon_prime, rel=1e-4)
    assert plan.paper["nu"] == pytest.approx(nu, rel=1e-4)
    assert plan.noise_multiplier == pytest.approx(nu / 6, rel=1e-4)


@pytest.mark.parametrize(
    ("epsilon", "delta", "k", "L", "R", "ratio"),
    [(1, 1e-5, 3, 30, 20, 1.289), (0.1, 1e-6, 3, 30, 20, 1.258), (10, 1e-5, 3, 30, 20, 1.862), (1, 1e-2, 2, 5, 5, 1.177)],
)
def test_paper_calibration_overshoots_by_advanced_composition(epsilon, delta, k, L, R, ratio):  # §1.4 table
    count = k * L * (R + 1)
    paper = paper_tensor_calibration(epsilon, delta, count)
    assert dwork_roth_epsilon(paper["epsilon_prime"], count, delta / 2) / epsilon == pytest.approx(ratio, abs=2e-3)


@pytest.mark.parametrize(("epsilon", "delta"), [(0.1, 1e-6), (1.0, 1e-5), (8.0, 1e-9)])
def test_standard_calibration_meets_target(epsilon, delta):
    plan = calibrate_tensor(epsilon=epsilon, delta=delta, n_components=2, n_restarts=5, n_iter=5)
    achieved = epsilon_for(plan.events(), delta=delta)
    assert achieved <= epsilon
    assert achieved >= 0.999 * epsilon  # tight, no wasted budget


def test_calibration_bad_input():
    with pytest.raises(InvalidParameterError, match="calibration"):
        calibrate_tensor(epsilon=1, delta=1e-6, n_components=1, n_restarts=1, n_iter=1, calibration="loose")
    with pytest.raises(InvalidParameterError, match="epsilon"):
        calibrate_tensor(epsilon=0, delta=1e-6, n_components=1, n_restarts=1, n_iter=1)
    with pytest.raises(InvalidParameterError, match="delta"):
        calibrate_tensor(epsilon=1, delta=1.0, n_components=1, n_restarts=1, n_iter=1)
    with pytest.raises(InvalidParameterError, match="not both"):
        private_tensor_power_method(np.zeros((2, 2, 2)), n_components=1, epsilon=1, delta=1e-6, seed=1,
                                    noise=ZeroNoiseSource())


def test_sensitivity_brute_force(rng):  # check 12
    d = 6
    u = rng.standard_normal((d, 4))
    u /= np.linalg.norm(u, axis=0)
    bound_v, bound_s = entry_vector_sensitivity(u), entry_scalar_sensitivity(u)
    worst_v, worst_s = np.zeros(4), np.zeros(4)
    for i, j, k in itertools.product(range(d), repeat=3):
        for sign in (1.0, -1.0):
            delta_t = sign * symmetrize(i, j, k, d)
            worst_v = np.maximum(worst_v, np.linalg.norm(K.dense_vector(delta_t, u), axis=0))
            worst_s = np.maximum(worst_s, np.abs(K.dense_scalar(delta_t, u)))
    assert np.all(worst_v <= bound_v * (1 + 1e-12))
    assert np.all(worst_s <= bound_s * (1 + 1e-12))
    np.testing.assert_allclose(worst_v, bound_v, rtol=1e-12)  # attained at i = j = k = argmax |u_i|
    np.testing.assert_allclose(worst_s, bound_s, rtol=1e-12)
    assert symmetrize(0, 1, 2, d).sum() == 6 and symmetrize(0, 0, 0, d)[0, 0, 0] == 6


def test_zero_noise_reproduces_alg1():  # check 5, second half
    d, k = 8, 2
    rng = np.random.default_rng(3)
    q, _ = np.linalg.qr(rng.standard_normal((d, k)))
    t = np.einsum("r,ir,jr,kr->ijk", np.array([2.0, 1.0]), q, q, q)
    private = private_tensor_power_method(t, n_components=k, epsilon=1, delta=1e-6, n_restarts=4, n_iter=6,
                                          noise=ZeroNoiseSource())
    plain = tensor_power_method(t, n_components=k, n_restarts=4, n_iter=6, seed=0)  # the zero source's generator
    np.testing.assert_allclose(private.components, plain.components, atol=1e-12)
    np.testing.assert_allclose(private.eigenvalues, plain.eigenvalues, atol=1e-12)
    assert not private.private


def test_noise_scale_chi_square(seed):  # check 11: std = m·6‖u‖∞² (vector), m·6‖u‖∞³ (scalar)
    d, L, m = 50, 8, 3.0
    rng = np.random.default_rng(seed)
    u = rng.standard_normal((d, L))
    u /= np.linalg.norm(u, axis=0)
    noise = AuditingNoiseSource(seed)
    releaser = GaussianReleaser(noise, m, entry_vector_sensitivity, entry_scalar_sensitivity)
    z = releaser.vector(0, 0, np.zeros((d, L)), u) / (m * entry_vector_sensitivity(u))
    stat = float((z * z).sum())
    assert stats.chi2.ppf(ALPHA / 2, d * L) < stat < stats.chi2.isf(ALPHA / 2, d * L)
    scalars = np.concatenate([releaser.scalar(c, np.zeros(L), u) / (m * entry_scalar_sensitivity(u))
                              for c in range(200)])
    stat = float((scalars**2).sum())
    assert stats.chi2.ppf(ALPHA / 2, scalars.size) < stat < stats.chi2.isf(ALPHA / 2, scalars.size)
    for record in noise.records:
        assert record.scale == pytest.approx(m * record.sensitivity, rel=1e-12)


def test_run_releases_k_l_r_plus_one_gaussians(seed):
    d = 5
    noise = AuditingNoiseSource(seed)
    r = private_tensor_power_method(np.zeros((d, d, d)), n_components=2, epsilon=1, delta=1e-6, n_restarts=3,
                                    n_iter=4, noise=noise)
    assert len(noise.records) == 2 * 3 * (4 + 1)
    assert r.privacy.neighbouring == ENTRY_ORBIT
    assert r.privacy.epsilon <= 1.0
    assert "paper" in r.privacy.figures


@pytest.mark.parametrize("calibration", ["paper", "standard"])
def test_utility_trend(calibration):  # check 13: incoherent v1 recovered at λ1 = 1e5, not at 1e2; coherent worse
    d = 64
    hadamard = np.array([[1.0]])
    while hadamard.shape[0] < d:
        hadamard = np.block([[hadamard, hadamard], [hadamard, -hadamard]])
    rng = np.random.default_rng(7)
    incoherent = hadamard[:, 5] * rng.choice([-1.0, 1.0], d) / math.sqrt(d)
    coherent = np.eye(d)[0]

    def corr(v, lam, s):
        t = lam * np.einsum("i,j,k->ijk", v, v, v)
        r = private_tensor_power_method(t, n_components=1, epsilon=1.0, delta=1e-5, n_restarts=10, n_iter=10,
                                        calibration=calibration, noise=AuditingNoiseSource(s))
        return abs(float(r.components[0] @ v))

    assert np.median([corr(incoherent, 1e5, s) for s in range(3)]) > 0.999
    assert np.median([corr(incoherent, 1e2, s) for s in range(3)]) < 0.5
    assert np.median([corr(coherent, 1e4, s) for s in range(3)]) < np.median([corr(incoherent, 1e4, s)
                                                                                for s in range(3)])
