"""The tensor power method (seed 002, Alg. 1 and Alg. 2): spec §5 checks 1–5, 8 and 9."""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.kernels import tensor as K
from dppca_dask.methods.tensor import moment_power_method, online_power_method, tensor_power_method
from dppca_dask.methods.tensor.power import drive, power_run


def orthonormal(rng: np.random.Generator, d: int, k: int) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((d, k)))
    return q


def low_rank(weights: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    return np.einsum("r,ir,jr,kr->ijk", weights, vectors, vectors, vectors)


def symmetric(rng: np.random.Generator, d: int) -> np.ndarray:
    g = rng.standard_normal((d, d, d))
    return sum(g.transpose(p) for p in itertools.permutations(range(3))) / 6


def match(found: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """For each true vector (columns of truth), the index of the found row closest to it."""
    return np.argmax(np.abs(found @ truth), axis=0)


def test_primitives_agree(rng):  # check 1
    d, L = 7, 4
    t = symmetric(rng, d)
    u = rng.standard_normal((d, L))
    loop = np.zeros((d, L))
    for i, j, k in itertools.product(range(d), repeat=3):
        loop[i] += t[i, j, k] * u[j] * u[k]
    kron = t.reshape(d, d * d) @ np.stack([np.kron(u[:, c], u[:, c]) for c in range(L)], axis=1)
    np.testing.assert_allclose(K.dense_vector(t, u), loop, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(kron, loop, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(K.dense_scalar(t, u), np.einsum("il,il->l", u, loop), rtol=1e-12)
    weights, vectors = rng.uniform(1, 2, 3), orthonormal(rng, d, 3)
    np.testing.assert_allclose(K.dense_vector(low_rank(weights, vectors), u), K.deflation_vector(weights, vectors, u),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(K.dense_scalar(low_rank(weights, vectors), u), K.deflation_scalar(weights, vectors, u),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("sparse", [False, True])
def test_moment_identity(rng, sparse):  # check 2
    n, d, L = 40, 6, 3
    x = rng.standard_normal((n, d)) * (rng.random((n, d)) < 0.6)
    u = rng.standard_normal((d, L))
    dense = np.einsum("ni,nj,nk->ijk", x, x, x)
    block = sp.csr_array(x) if sparse else x
    vector, scalar = K.moment_partial(block, np.linalg.norm(x, axis=1), u)
    np.testing.assert_allclose(vector, K.dense_vector(dense, u), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(scalar, K.dense_scalar(dense, u), rtol=1e-10, atol=1e-10)


def test_topic_and_pair_contractions_match_brute_force(rng):
    n, d, L = 12, 5, 3
    counts = rng.integers(0, 3, size=(n, d)).astype(float)
    counts[0] = 0
    counts[1] = [2, 0, 0, 0, 0]  # too short for triples, counts for pairs
    v = rng.standard_normal((d, L))
    y = rng.standard_normal((d, 2))
    triples = np.zeros((d, d, d))
    pairs = np.zeros((d, d))
    for c in counts:
        words = np.repeat(np.arange(d), c.astype(int))
        ell = len(words)
        for a, b in itertools.permutations(range(ell), 2):
            pairs[words[a], words[b]] += 1.0 / (ell * (ell - 1))
        for a, b, e in itertools.permutations(range(ell), 3):
            triples[words[a], words[b], words[e]] += 1.0 / (ell * (ell - 1) * (ell - 2))
    vector, scalar = K.topic_partial(sp.csr_array(counts), v)
    np.testing.assert_allclose(vector, K.dense_vector(triples, v), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(scalar, K.dense_scalar(triples, v), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(K.pair_partial(sp.csr_array(counts), y), pairs @ y, rtol=1e-10, atol=1e-12)


def test_noiseless_closed_form(rng):  # check 3
    d, k = 10, 4
    weights, vectors = rng.uniform(1, 2, k), orthonormal(rng, d, k)
    t = low_rank(weights, vectors)
    u0 = rng.standard_normal(d)
    u0 /= np.linalg.norm(u0)
    c = vectors.T @ u0
    u = u0
    for step in range(1, 5):
        u = K.dense_vector(t, u)
        u /= np.linalg.norm(u)
        expected = vectors @ (weights ** (2**step - 1) * c ** (2**step))
        expected /= np.linalg.norm(expected)
        np.testing.assert_allclose(u, expected, rtol=1e-10, atol=1e-12)


def test_exact_recovery(rng, seed):  # check 4
    d, k = 20, 5
    weights, vectors = rng.uniform(1, 2, k), orthonormal(rng, d, k)
    result = tensor_power_method(low_rank(weights, vectors), n_components=k, n_restarts=20, n_iter=20, seed=seed)
    order = match(result.components, vectors)
    assert sorted(order) == list(range(k))
    np.testing.assert_allclose(result.components[order], vectors.T, atol=1e-8)
    np.testing.assert_allclose(result.eigenvalues[order], weights, atol=1e-8)
    assert result.n_queries == k * 21


def test_explicit_and_implicit_deflation_same_iterates(rng, seed):  # check 5
    d, k = 8, 3
    t = low_rank(rng.uniform(1, 2, k), orthonormal(rng, d, k)) + 1e-3 * symmetric(rng, d)
    a = tensor_power_method(t, n_components=k, n_restarts=5, n_iter=6, seed=seed, keep_trajectory=True)
    b = tensor_power_method(t, n_components=k, n_restarts=5, n_iter=6, seed=seed, deflation="explicit",
                            keep_trajectory=True)
    for x, y in zip(a.trajectory, b.trajectory, strict=True):
        np.testing.assert_allclose(x, y, atol=1e-10)
    np.testing.assert_allclose(a.eigenvalues, b.eigenvalues, atol=1e-10)


def test_perturbation_grows_linearly(rng, seed):  # check 6 (slope of the error in σ)
    d, k = 10, 3
    weights, vectors = np.array([1.0, 0.75, 0.5]), orthonormal(rng, d, k)
    noise = symmetric(rng, d)
    noise /= np.abs(K.dense_scalar(noise, rng.standard_normal((d, 200)) / np.sqrt(d))).max()  # ≈ unit op norm
    errors = []
    sigmas = np.array([1e-4, 1e-3, 1e-2])
    for sigma in sigmas:
        r = tensor_power_method(low_rank(weights, vectors) + sigma * noise, n_components=k, n_restarts=10,
                                n_iter=30, seed=seed)
        order = match(r.components, vectors)
        errors.append(np.abs(r.eigenvalues[order] - weights).max() + np.abs(np.abs(r.components[order] @ vectors)
                                                                             .diagonal() - 1).max())
    slope = np.polyfit(np.log(sigmas), np.log(errors), 1)[0]
    assert 0.7 < slope < 1.3


def test_adversarial_and_weak_noise_norms(rng):  # check 7
    d = 12
    e = np.eye(d)
    v2 = e[1]
    adversarial = sum(np.einsum("i,j,k->ijk", v2, e[i], e[i]) + np.einsum("i,j,k->ijk", e[i], v2, e[i])
                      + np.einsum("i,j,k->ijk", e[i], e[i], v2) for i in range(d))
    u = rng.standard_normal((d, 50))
    u /= np.linalg.norm(u, axis=0)
    np.testing.assert_allclose(K.dense_vector(adversarial, u), v2[:, None] + 2 * (v2 @ u) * u, atol=1e-12)
    assert abs(K.dense_scalar(adversarial, v2) - 3.0) < 1e-12
    r = tensor_power_method(adversarial, n_components=1, n_restarts=10, n_iter=30, seed=0)
    assert abs(r.eigenvalues[0] - 3.0) < 1e-6
    weak = sum(np.einsum("i,j,k->ijk", e[i], e[i], e[i]) for i in range(3, d))
    r = tensor_power_method(weak, n_components=1, n_restarts=10, n_iter=30, seed=0)
    assert abs(r.eigenvalues[0] - 1.0) < 1e-6


def test_moment_store_matches_dense(rng, seed):
    n, d, k = 400, 6, 2
    x = rng.standard_normal((n, d))
    dense = np.einsum("ni,nj,nk->ijk", x, x, x) / n
    a = moment_power_method(x, n_components=k, n_restarts=4, n_iter=5, seed=seed)
    b = tensor_power_method(dense, n_components=k, n_restarts=4, n_iter=5, seed=seed)
    np.testing.assert_allclose(a.components, b.components, atol=1e-9)
    np.testing.assert_allclose(a.eigenvalues, b.eigenvalues, atol=1e-9)


def ica_rows(rng: np.random.Generator, n: int, weights: np.ndarray, vectors: np.ndarray, p: float = 0.1,
             s: float = 0.5) -> np.ndarray:
    """Spec §3.3 generator: E[x^{⊗3}] = Σ λ_i v_i^{⊗3} exactly."""
    c = (weights / (p * (1 - p) * (1 - 2 * p))) ** (1 / 3)
    a = c * ((rng.random((n, len(weights))) < p) - p)
    return a @ vectors.T + s * rng.choice([-1.0, 1.0], size=(n, vectors.shape[0]))


def test_online_step_equals_batch_alg1_step(rng, seed):  # check 8
    d, k, L, R, rows = 6, 2, 3, 3, 50
    x = ica_rows(rng, k * R * rows, np.array([1.0, 0.75]), orthonormal(rng, d, k))
    blocks = [x[i * rows:(i + 1) * rows] for i in range(k * R)]
    seen = []

    def execute(request):
        block = blocks[request.partitions[0]]
        seen.append(request.partitions[0])
        return (*K.moment_partial(block, np.linalg.norm(block, axis=1), request.u), rows)

    from dppca_dask.methods.tensor.requests import MomentStep

    state = {}
    run = power_run(query=lambda u, i, t: MomentStep(u, partitions=[i * R + t]),
                    answer=lambda agg, u: (agg[0] / rows, agg[1] / rows), dim=d, n_components=k, n_restarts=L,
                    n_iter=R, start=lambda i: np.random.default_rng(seed + i).standard_normal((d, L)), online=True,
                    keep_trajectory=True)
    result = drive(run, execute)
    assert seen == list(range(k * R))  # each batch once, in order
    # first component, step by step against the dense batch tensors
    u = result.trajectory[0]
    for t in range(R):
        block = blocks[t]
        dense = np.einsum("ni,nj,nk->ijk", block, block, block) / rows
        nxt = K.dense_vector(dense, u)
        np.testing.assert_allclose(result.trajectory[t + 1], nxt / np.linalg.norm(nxt, axis=0), atol=1e-10)
        if t == R - 1:  # λ̂ at u_{R−1} on the last batch
            state["lam"] = K.dense_scalar(dense, u)
        u = result.trajectory[t + 1]
    assert np.isclose(result.eigenvalues[0], state["lam"].max(), atol=1e-10)


def test_online_uses_each_partition_once_and_recovers(rng, seed):  # checks 9, 10
    d, k = 12, 2
    weights, vectors = np.array([1.0, 0.6]), orthonormal(rng, d, k)
    R, rows = 8, 20_000
    x = ica_rows(rng, k * R * rows, weights, vectors)
    import dask.array as da

    r = online_power_method(da.from_array(x, chunks=(rows, d)), n_components=k, n_restarts=8, n_iter=R, seed=seed)
    order = match(r.components, vectors)
    assert np.abs(np.abs(r.components[order] @ vectors).diagonal()).min() > 0.95
    with pytest.raises(InvalidParameterError, match="partitions are needed"):
        online_power_method(da.from_array(x, chunks=(rows, d)), n_components=k, n_restarts=2, n_iter=R + 1)


def test_online_memory_is_linear_in_d(rng, seed):  # check 9: no d² allocation at d = 2000
    d, k, L, R, rows = 2000, 2, 4, 2, 50
    blocks = [sp.random_array((rows, d), density=0.01, rng=rng, format="csr") for _ in range(k * R)]
    import dask.array as da

    stacked = da.concatenate([da.from_array(b.toarray(), chunks=(rows, d)) for b in blocks])
    tracemalloc.start()
    online_power_method(stacked, n_components=k, n_restarts=L, n_iter=R, seed=seed)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 0.25 * d * d * 8  # a d×d float64 matrix is 32 MB; blocks are rows×d = 0.8 MB each


def test_bad_input():
    with pytest.raises(InvalidParameterError, match="exceeds the dimension"):
        tensor_power_method(np.zeros((3, 3, 3)), n_components=4)
    with pytest.raises(InvalidInputError, match="not symmetric"):
        tensor_power_method(np.arange(27.0).reshape(3, 3, 3), n_components=1)
    with pytest.raises(InvalidInputError, match="d×d×d"):
        tensor_power_method(np.zeros((3, 3)), n_components=1)
    with pytest.raises(InvalidInputError, match="NaN"):
        tensor_power_method(np.full((2, 2, 2), np.nan), n_components=1)
    with pytest.raises(InvalidParameterError, match="n_restarts"):
        tensor_power_method(np.zeros((3, 3, 3)), n_components=1, n_restarts=0)
    with pytest.raises(InvalidParameterError, match="deflation"):
        tensor_power_method(np.zeros((3, 3, 3)), n_components=1, deflation="both")
    with pytest.raises(InvalidParameterError, match="partitions_per_step"):
        online_power_method(np.zeros((4, 3)), n_components=1, partitions_per_step=0)


def test_pair_clipping_matches_per_document_brute_force(rng):
    n, d, k, clip = 30, 6, 2, 0.2
    counts = rng.integers(0, 3, size=(n, d)).astype(float)
    counts[0] = [5, 0, 0, 0, 0, 0]  # one repeated word: ‖P2_doc‖_F = 1, clipped
    y, _ = np.linalg.qr(rng.standard_normal((d, k)))
    expected = np.zeros((d, k))
    clipped = 0
    for c in counts:
        ell = c.sum()
        if ell < 3:
            continue
        product = (np.outer(c, c) - np.diag(c)) @ y / (ell * (ell - 1))
        norm = np.linalg.norm(product)
        clipped += norm > clip
        expected += product * min(1.0, clip / norm) if norm > 0 else product
    assert clipped >= 1
    got = K.pair_partial(sp.csr_array(counts), y, min_length=3, clip=clip)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(K.pair_partial(counts, y, min_length=3, clip=clip), expected, rtol=1e-10, atol=1e-12)


def test_whitened_topic_contraction_clips_each_document(rng):
    n, d, k, L = 25, 7, 3, 2
    counts = rng.integers(0, 3, size=(n, d)).astype(float)
    counts[0] = [6, 0, 0, 0, 0, 0, 0]
    w = rng.standard_normal((d, k))
    v = w @ rng.standard_normal((k, L))
    block = sp.csr_array(counts)
    vector, scalar = K.topic_partial(block, v)
    full_vec, full_sca = K.whitened_topic_partial(block, v, w, np.full(L, np.inf))
    np.testing.assert_allclose(full_vec, w.T @ vector, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(full_sca, scalar, rtol=1e-10, atol=1e-12)
    clip = np.array([0.5, 2.0])
    expected_vec, expected_sca = np.zeros((k, L)), np.zeros(L)
    for c in counts:  # document by document
        vec_doc, sca_doc = K.topic_partial(sp.csr_array(c[None, :]), v)
        g = w.T @ vec_doc
        f = np.minimum(1.0, clip / np.maximum(np.linalg.norm(g, axis=0), 1e-300))
        expected_vec += g * f
        expected_sca += sca_doc * f
    got_vec, got_sca = K.whitened_topic_partial(block, v, w, clip)
    np.testing.assert_allclose(got_vec, expected_vec, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(got_sca, expected_sca, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_moment_store_on_a_cluster_matches_in_process(rng, seed, local_client, tmp_path):
    import dppca_dask

    x = rng.standard_normal((600, 5))
    store = dppca_dask.write_matrix(tmp_path / "rows.zarr", x, rows_per_partition=200)
    a = moment_power_method(store, n_components=2, n_restarts=3, n_iter=3, seed=seed, client=local_client)
    b = moment_power_method(x, n_components=2, n_restarts=3, n_iter=3, seed=seed, client="local")
    np.testing.assert_allclose(a.components, b.components, atol=1e-9)
    assert a.n_queries == 2 * 4  # one pass per iteration, the L restarts together
