"""Coherence utilities, generated test matrices and error metrics (seed 000 spec §6.11–6.12, seed 003 spec §7.9)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.coherence import (
    c_coherence,
    embedding_coherence,
    mu0_coherence,
    mu_coherence,
    top_k_coherence,
    vector_coherence,
)
from dppca_dask.datasets import (
    coherent_low_rank,
    coherent_psd,
    gaussian_factor_matrix,
    incoherent_low_rank,
    incoherent_psd,
    lower_bound_matrix,
)
from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.metrics import best_rank_error, frobenius_error, sin2, spectral_error, subspace_sin2, top_singular

# ------------------------------------------------------------------------------------------------ coherence


def test_mu_of_random_and_spiky_bases(rng: np.random.Generator) -> None:
    n = 1000
    q, _ = np.linalg.qr(rng.standard_normal((n, 3)))
    a = (q * [3.0, 2.0, 1.0]) @ q.T
    mu = mu_coherence(a)
    assert 1.0 <= mu <= 4.0 * math.log(n)  # O(log n) for a random basis
    spiky = np.zeros((n, n))
    spiky[0, 0] = 1.0
    assert mu_coherence(spiky) == pytest.approx(n)  # a basis containing e_1 has μ = n
    assert mu_coherence(np.eye(5), full=True) == pytest.approx(5.0)


def test_mu0_mu_k_and_lemma_54(rng: np.random.Generator) -> None:
    planted = incoherent_low_rank(400, 300, [5.0, 4.0, 3.0], seed=1)
    mu, mu0 = mu_coherence(planted.matrix), mu0_coherence(planted.matrix)
    assert 1.0 <= mu0 <= mu and mu0 <= 400 / 3 + 1e-9
    assert top_k_coherence(planted.matrix, 1) <= mu + 1e-12
    assert mu0_coherence(planted.left) == pytest.approx(mu0, rel=1e-9)  # of the basis or of the matrix
    # Lemma 5.4: ‖w‖²_∞ ≤ (r/n)·μ₀(U) for every unit w in range(U)
    for _ in range(100):
        w = planted.left @ rng.standard_normal(3)
        w /= np.linalg.norm(w)
        assert float(np.max(w * w)) <= 3 / 400 * mu0 + 1e-12


def test_c_coherence(rng: np.random.Generator) -> None:
    planted = gaussian_factor_matrix(500, 200, 2, seed=2)
    c = c_coherence(planted.matrix)
    assert 2.0 <= c <= 4.0  # Gaussian-factor matrices: C ≈ 2.5–3.5 (spec §7.9)
    assert c <= math.sqrt(2 * mu0_coherence(planted.matrix)) + 1e-9  # Lemma 5.13: C ≤ sqrt(r·μ₀)
    spike = rng.standard_normal((100, 20)) * 1e-6
    spike[3] = 1e3
    assert c_coherence(spike) == pytest.approx(10.0, rel=1e-6)  # one dominant row: C ≈ sqrt(m)
    assert c_coherence(sp.csr_array(planted.matrix)) == pytest.approx(c)
    with pytest.raises(InvalidInputError, match="zero matrix"):
        c_coherence(np.zeros((3, 3)))


def test_vector_and_embedding_coherence() -> None:
    assert vector_coherence(np.ones(16)) == pytest.approx(1.0)
    assert vector_coherence(np.eye(16)[0]) == pytest.approx(16.0)
    with pytest.raises(InvalidInputError, match="zero vector"):
        vector_coherence(np.zeros(4))
    planted = incoherent_low_rank(60, 40, [3.0, 1.0], seed=3)
    expected = 100 * max(np.max(planted.left[:, 0] ** 2), np.max(planted.right[:, 0] ** 2)) / 2
    assert embedding_coherence(planted.matrix) == pytest.approx(expected, rel=1e-9)


def test_coherence_helpers_reject_bad_input() -> None:
    with pytest.raises(InvalidParameterError, match="rank"):
        mu_coherence(np.eye(4), rank=9)
    with pytest.raises(InvalidInputError, match="2-D"):
        mu_coherence(np.ones(4))
    with pytest.raises(InvalidInputError, match="too large"):
        mu_coherence(sp.csr_array((30_000, 30_000)))


# ------------------------------------------------------------------------------------------------ generators


def test_lower_bound_family() -> None:
    n, c = 64, 8.0
    planted = lower_bound_matrix(n, c, seed=3)
    m = planted.matrix.toarray()
    s = n // 8
    d = m[0]
    assert set(np.unique(d)) == {0.0, 1.0} and d.sum() == n // 2
    assert np.all(m[:s] == d) and np.all(m[s:] == 0)  # the first n/C rows are D, the rest zero
    assert mu_coherence(m) == pytest.approx(c)
    sigma1 = n / math.sqrt(2 * c)
    assert np.linalg.norm(m, 2) == pytest.approx(sigma1)
    v = np.random.default_rng(0).standard_normal(n)
    v /= np.linalg.norm(v)
    d_bar = d / np.linalg.norm(d)
    assert np.linalg.norm(m @ v) == pytest.approx(sigma1 * abs(d_bar @ v))
    for bad in [(63, 8.0), (64, 3.0), (64, 1.0), (64, 128.0)]:
        with pytest.raises(InvalidParameterError):
            lower_bound_matrix(*bad)


def test_planted_generators_have_their_coherence() -> None:
    inc = incoherent_psd(500, [4.0, 2.0], seed=4)
    np.testing.assert_allclose(inc.matrix, inc.matrix.T)
    assert np.all(np.linalg.eigvalsh(inc.matrix) > -1e-9)
    coh = coherent_psd(500, [4.0, 2.0, 1.0], support=25, seed=4)
    assert mu_coherence(coh.matrix, rank=1) == pytest.approx(20.0)  # u₁ on 25 coordinates: μ₁ = 500/25
    np.testing.assert_allclose(coh.left.T @ coh.left, np.eye(3), atol=1e-12)
    low = coherent_low_rank(300, 80, [5.0, 3.0], row_support=15, seed=5)
    assert mu_coherence(low.matrix) == pytest.approx(20.0)
    shared = coherent_low_rank(300, 80, [5.0, 3.0], row_support=150, col_support=10, seed=5)
    np.testing.assert_allclose(shared.left.T @ shared.left, np.eye(2), atol=1e-12)
    with pytest.raises(InvalidParameterError, match="support"):
        coherent_low_rank(30, 8, [1.0], row_support=0)
    with pytest.raises(InvalidParameterError, match="exceeds the support"):
        coherent_low_rank(5, 8, [3.0, 2.0, 1.0], row_support=2)
    with pytest.raises(InvalidParameterError, match="singular_values"):
        incoherent_low_rank(10, 10, [-1.0])
    with pytest.raises(InvalidParameterError, match="rank"):
        gaussian_factor_matrix(10, 10, 0)


def test_generators_are_reproducible() -> None:
    a = gaussian_factor_matrix(30, 40, 2, seed=11).matrix
    np.testing.assert_array_equal(a, gaussian_factor_matrix(30, 40, 2, seed=11).matrix)
    assert not np.array_equal(a, gaussian_factor_matrix(30, 40, 2, seed=12).matrix)
    noisy = incoherent_low_rank(30, 40, [2.0], noise=0.1, seed=1)
    assert np.linalg.matrix_rank(noisy.matrix) == 30


# ------------------------------------------------------------------------------------------------ metrics


def test_metrics_against_numpy(rng: np.random.Generator) -> None:
    a = rng.standard_normal((50, 40))
    left, right = rng.standard_normal((50, 3)), rng.standard_normal((3, 40))
    b = left @ right
    assert frobenius_error(a, (left, right)) == pytest.approx(np.linalg.norm(a - b))
    assert frobenius_error(sp.csr_array(a), (left, right)) == pytest.approx(np.linalg.norm(a - b), rel=1e-9)
    assert frobenius_error(a, b) == pytest.approx(np.linalg.norm(a - b))
    assert spectral_error(a, (left, right)) == pytest.approx(np.linalg.norm(a - b, 2))
    s = np.linalg.svd(a, compute_uv=False)
    assert best_rank_error(a, 3) == pytest.approx(math.sqrt(float(np.sum(s[3:] ** 2))))
    assert best_rank_error(a, 3, ord="2") == pytest.approx(s[3])
    assert best_rank_error(a, 40) == 0.0
    u, sv, vt = top_singular(a, 2)
    np.testing.assert_allclose(sv, s[:2])
    with pytest.raises(InvalidParameterError, match="ord"):
        best_rank_error(a, 1, ord="nuc")
    with pytest.raises(InvalidParameterError, match="k must be"):
        top_singular(a, 0)


def test_large_sparse_metrics_do_not_densify(rng: np.random.Generator) -> None:
    a = sp.random(3000, 2000, density=0.002, random_state=np.random.default_rng(1), format="csr")
    u, s, vt = top_singular(a, 2)
    assert spectral_error(a, (u * s, vt)) == pytest.approx(best_rank_error(a, 2, ord="2"), rel=1e-6)
    assert frobenius_error(a, (u * s, vt)) ** 2 == pytest.approx(
        float(np.sum(a.data**2)) - float(np.sum(s**2)), rel=1e-6)


def test_angles(rng: np.random.Generator) -> None:
    x = rng.standard_normal(10)
    assert sin2(x, -3 * x) == pytest.approx(0.0, abs=1e-15)
    assert sin2(np.eye(3)[0], np.eye(3)[1]) == pytest.approx(1.0)
    with pytest.raises(InvalidParameterError, match="zero vector"):
        sin2(x, np.zeros(10))
    q, _ = np.linalg.qr(rng.standard_normal((10, 3)))
    assert subspace_sin2(q, q @ rng.standard_normal((3, 3))) == pytest.approx(0.0, abs=1e-12)
    assert subspace_sin2(np.eye(10)[:, :2], np.eye(10)[:, 2:4]) == pytest.approx(1.0)
    assert subspace_sin2(x, 2 * x) == pytest.approx(0.0, abs=1e-12)
