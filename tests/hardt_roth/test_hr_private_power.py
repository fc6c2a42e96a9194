"""Private power iteration (seed 000): noise off, fail behaviour, structure, sensitivity, noise scale, accounting."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from dp_accounting import dp_event
from hr_helpers import ALPHA, RecordingNoiseSource, chi2_bounds, gamma_bounds

from dppca_dask import lowrank
from dppca_dask.accounting import ENTRY_CHANGE, epsilon_for, flatten_events
from dppca_dask.coordinator import LocalExecutor, as_source, run_algorithm
from dppca_dask.datasets import coherent_psd, gaussian_factor_matrix, incoherent_psd
from dppca_dask.errors import InvalidInputError, InvalidParameterError, MechanismFailedError
from dppca_dask.kernels.hardt_roth import assemble
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.testing import ZeroNoiseSource
from dppca_dask.methods.hardt_roth.power_calibration import calibrate_private_power, ppi_sigma
from dppca_dask.methods.hardt_roth.power_iteration import (
    coherence_ladder,
    default_ladder_start,
    private_power_run,
)
from dppca_dask.methods.hardt_roth.requests import EmbeddedProduct, RowProduct
from dppca_dask.metrics import sin2


def _run(matrix: Any, noise: NoiseSource, **kwargs: Any) -> Any:
    executor = LocalExecutor(as_source(matrix))
    return run_algorithm(executor, private_power_run(n_cols=int(matrix.shape[1]), noise=noise, **kwargs))


def _top_eigvecs(matrix: np.ndarray, k: int) -> np.ndarray:
    values, vectors = np.linalg.eigh(matrix)
    return vectors[:, np.argsort(values)[::-1][:k]]


# ------------------------------------------------------------------------------------------------ noise off


def test_noise_off_equals_power_iteration_from_the_same_start() -> None:
    planted = incoherent_psd(150, [100.0, 60.0, 30.0], seed=1)
    out = _run(planted.matrix, ZeroNoiseSource(), epsilon=1.0, delta=1e-6, n_iter=7, symmetric=True)
    # the reference: the same start vector (the zero source's generator), A x normalised T times
    x = np.random.default_rng(0).standard_normal(150)
    x /= np.linalg.norm(x)
    for _ in range(7):
        x = planted.matrix @ x
        x /= np.linalg.norm(x)
    np.testing.assert_allclose(out.components[0], x, atol=1e-12)


def test_noise_off_rank_k_matches_eigendecomposition() -> None:
    planted = incoherent_psd(120, [100.0, 40.0, 10.0], seed=2)
    out = _run(planted.matrix, ZeroNoiseSource(), epsilon=1.0, delta=1e-6, n_iter=60, n_components=2,
               symmetric=True, release_values=True)
    truth = _top_eigvecs(planted.matrix, 2)
    for i in range(2):
        assert sin2(out.components[i], truth[:, i]) < 1e-12
    np.testing.assert_allclose(out.values, [100.0, 40.0], rtol=1e-9)
    # B_k = Σ σ̂_i v_i v_iᵀ is the best rank-2 approximation (never the residual A − B_k)
    b_k = (out.components.T * out.values) @ out.components
    best = (planted.left[:, :2] * planted.values[:2]) @ planted.left[:, :2].T
    assert np.linalg.norm(b_k - best) < 1e-8
    assert np.linalg.norm(b_k - (planted.matrix - best)) > 50.0


def test_noise_off_embedding_finds_both_singular_vectors() -> None:
    planted = gaussian_factor_matrix(80, 30, 2, seed=3)
    out = _run(planted.matrix, ZeroNoiseSource(), epsilon=1.0, delta=1e-6, n_iter=80)
    assert out.components.shape == (1, 30) and out.left.shape == (80,)
    assert out.dimension == 110 and out.n_rows == 80
    assert sin2(out.components[0], planted.right[:, 0]) < 1e-10
    assert sin2(out.left, planted.left[:, 0]) < 1e-10


def test_embedding_product_equals_the_explicit_embedding(rng: np.random.Generator) -> None:
    a = sp.random(23, 9, density=0.4, random_state=np.random.default_rng(5), format="csr")
    embedded = sp.bmat([[None, a], [a.T, None]]).toarray()
    x = rng.standard_normal(32)
    with dask.config.set({"dppca_dask.in-memory-partitions": 1}):  # all 23 rows in partition 0
        executor = LocalExecutor(as_source(a))
    offsets = [0, 23]
    agg = executor.execute(EmbeddedProduct(x_cols=x[23:], x_rows={0: x[offsets[0] : offsets[1]]}))
    np.testing.assert_allclose(np.concatenate([assemble(agg), agg.total]), embedded @ x, atol=1e-12)


# ------------------------------------------------------------------------------------------------ failing


def _coherent_failure(seeded: NoiseSource) -> MechanismFailedError:
    planted = coherent_psd(2000, [1e5, 2e4], support=20, seed=4)  # μ = 2000/20 = 100
    with pytest.raises(MechanismFailedError) as info:
        _run(planted.matrix, seeded, epsilon=1.0, delta=1e-6, n_iter=20, symmetric=True, coherence=50.0)
    return info.value


def test_coherent_input_with_c_below_mu_fails_with_a_public_message(
    seeded_noise: Callable[[int], NoiseSource],
) -> None:
    noise = seeded_noise(1)
    error = _coherent_failure(noise)
    message = str(error)
    assert "C=50" in message and "N=2000" in message and "coherence" in message
    # only public values: parameters and a round number, no data-derived number
    numbers = {tok.strip(";:,()=") for tok in message.replace("=", " ").split()}
    allowed = {"50", "2000", "0", "C/N", "[[0,", "A],", "[A^T,", "0]]"} | {str(t) for t in range(1, 21)}
    assert {t for t in numbers if any(ch.isdigit() for ch in t)} <= allowed
    assert error.exit_code == 4
    # the failure came after some rounds were released (the iterate aligned with the spiky u₁)
    assert any(key.endswith("iter-1") for key in noise.released_keys)


def test_incoherent_input_with_the_theorem_c_does_not_fail(seeded_noise: Callable[[int], NoiseSource]) -> None:
    planted = incoherent_psd(2000, [1e4, 5e3, 4e3], seed=5)
    mu = 2000 * float(np.max(planted.left**2))  # μ of a PSD matrix from its thin eigenbasis
    # Theorems 5.7/5.8's C ≥ 9μ·ln n (Lemma 4.3's 16μ·ln n exceeds n at this size, spec §4.1)
    c_bound = 9.0 * mu * math.log(2000)
    assert c_bound < 2000
    out = _run(planted.matrix, seeded_noise(2), epsilon=1.0, delta=1e-6, n_iter=20, symmetric=True,
               coherence=c_bound)
    assert out.coherence == (c_bound,)


def test_c_below_two_log_n_fails_at_round_one_before_any_release(
    seeded_noise: Callable[[int], NoiseSource],
) -> None:
    planted = incoherent_psd(2000, [1e4], seed=6)
    noise = seeded_noise(3)
    with pytest.raises(MechanismFailedError, match="before round 1 "):
        _run(planted.matrix, noise, epsilon=1.0, delta=1e-6, n_iter=5, symmetric=True, coherence=2.0)
    assert all(key.endswith("/start") for key in noise.released_keys)


def test_c_doubling_recovers_from_a_coherent_input(seeded_noise: Callable[[int], NoiseSource]) -> None:
    planted = coherent_psd(2000, [1e5, 2e4], support=20, seed=4)
    out = _run(planted.matrix, seeded_noise(4), epsilon=1.0, delta=1e-6, n_iter=20, symmetric=True,
               coherence=16.0, c_doubling=True)
    ladder = coherence_ladder(16.0, 2000)
    assert ladder == (16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2000.0)
    assert out.coherence[0] >= 64.0  # C ≥ μ/2 at least; smaller rungs fail
    assert out.failed_rungs[0] >= 2
    assert sin2(out.components[0], planted.left[:, 0]) < 0.05
    # the guarantee covers every rung's T rounds, including the rungs skipped after the success
    counts = sum(c for e, c in flatten_events(out.events) if isinstance(e, dp_event.GaussianDpEvent))
    assert counts == len(ladder) * 20
    assert out.n_releases < counts
    assert epsilon_for(out.events, delta=1e-6) <= 1.0


def test_default_ladder_start_passes_the_start_vector() -> None:
    assert default_ladder_start(2000) == 16.0  # 2·ln 2000 = 15.2
    assert default_ladder_start(50_049) == 32.0
    with pytest.raises(InvalidParameterError, match="coherence"):
        coherence_ladder(0.0, 100)


# ------------------------------------------------------------------------------------------------ structure


def test_lowrank_private_power_returns_b_k_factored_and_symmetric(seed: int) -> None:
    planted = incoherent_psd(300, [1e4, 5e3, 1e3], seed=7)
    with warnings.catch_warnings():
        from dppca_dask.errors import NotPrivateWarning
        warnings.simplefilter("ignore", NotPrivateWarning)
        warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
        result = lowrank(planted.matrix, rank=2, epsilon=1.0, delta=1e-6, mechanism="private-power",
                         symmetric=True, coherence=60.0, client="local", seed=seed)
    assert result.rank == 2 and result.shape == (300, 300)
    dense = result.to_dense()
    np.testing.assert_allclose(dense, dense.T, atol=1e-9)  # B_k symmetric
    np.testing.assert_allclose(result.right, result.extras["values"][:, None] * result.left.T)
    best = (planted.left[:, :2] * planted.values[:2]) @ planted.left[:, :2].T
    assert np.linalg.norm(dense - best, 2) < 0.1 * planted.values[0]  # close to A_k, not the residual
    assert result.privacy.neighbouring == ENTRY_CHANGE
    assert result.privacy.epsilon <= 1.0
    values = result.extras["values"]
    assert abs(values[0] - 1e4) < 0.05 * 1e4 and abs(values[1] - 5e3) < 0.1 * 5e3


def test_symmetric_flag_symmetrises_instead_of_checking(seeded_noise: Callable[[int], NoiseSource]) -> None:
    # issue 8.3: a symmetry check released a free bit (exit 2 on an asymmetric neighbour of a symmetric store).
    # Now an asymmetric square store runs on (A + A^T)/2, with exactly the releases and passes of a symmetric one.
    symmetric = incoherent_psd(40, [30.0, 10.0], seed=8).matrix
    neighbour = symmetric.copy()
    neighbour[3, 17] += 1.0  # one entry changed by b = 1: asymmetric
    outs = []
    for matrix in (symmetric, neighbour):
        out = _run(matrix, ZeroNoiseSource(), epsilon=1.0, delta=1e-6, n_iter=6, n_components=2,
                   symmetric=True, release_values=True)
        outs.append(out)
    assert outs[0].n_passes == outs[1].n_passes and outs[0].n_releases == outs[1].n_releases
    assert [type(e) for e in outs[0].events] == [type(e) for e in outs[1].events]
    # noise off: power iteration on the symmetrisation, from the zero source's start vector
    sym = 0.5 * (neighbour + neighbour.T)
    x = np.random.default_rng(0).standard_normal(40)
    x /= np.linalg.norm(x)
    for _ in range(6):
        x = sym @ x
        x /= np.linalg.norm(x)
    np.testing.assert_allclose(outs[1].components[0], x, atol=1e-10)
    noise = seeded_noise(5)
    with pytest.raises(InvalidInputError, match="square store"):
        _run(np.ones((30, 20)), noise, epsilon=1.0, delta=1e-6, symmetric=True)
    assert not noise.released_keys


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_components": 2}, "symmetric=True"),
        ({"n_iter": 0}, "n_iter"),
        ({"entry_bound": 0.0}, "entry_bound"),
        ({"coherence": 0.5}, "coherence"),
    ],
)
def test_run_rejects_bad_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        _run(np.eye(4), ZeroNoiseSource(), epsilon=1.0, delta=1e-6, **kwargs)


def test_fixed_seed_reproduces_the_output(seeded_noise: Callable[[int], NoiseSource]) -> None:
    planted = gaussian_factor_matrix(60, 20, 2, seed=8)
    first = _run(planted.matrix, seeded_noise(6), epsilon=1.0, delta=1e-6, n_iter=6)
    second = _run(planted.matrix, seeded_noise(6), epsilon=1.0, delta=1e-6, n_iter=6)
    np.testing.assert_array_equal(first.components, second.components)
    np.testing.assert_array_equal(first.left, second.left)
    # the sparse and dense inputs give the same result under the same noise
    third = _run(sp.csr_array(planted.matrix), seeded_noise(6), epsilon=1.0, delta=1e-6, n_iter=6)
    np.testing.assert_allclose(third.components, first.components, atol=1e-10)


# ------------------------------------------------------------------------------------------------ sensitivity


def test_sensitivity_brute_force_symmetric(rng: np.random.Generator) -> None:
    # spec §6.2: for every neighbour A' = A + α e_s e_tᵀ (|α| ≤ b) and x passing the check, ‖(A − A')x‖ ≤ b·sqrt(C/n)
    n, b = 6, 2.0
    a = rng.standard_normal((n, n))
    a = a + a.T
    for _ in range(20):
        x = rng.standard_normal(n)
        x /= np.linalg.norm(x)
        c_bound = n * float(np.max(x * x))  # the smallest C this x passes
        for s in range(n):
            for t in range(n):
                for alpha in (-b, b):
                    neighbour = a.copy()
                    neighbour[s, t] += alpha
                    change = np.linalg.norm(a @ x - neighbour @ x)
                    assert change <= b * math.sqrt(c_bound / n) + 1e-12
                    # σ̂: | ‖A v‖ − ‖A' v‖ | ≤ b for a unit v
                    assert abs(np.linalg.norm(a @ x) - np.linalg.norm(neighbour @ x)) <= b + 1e-12


def test_sensitivity_brute_force_embedding(rng: np.random.Generator) -> None:
    # one entry of A is two entries of B = [[0, A], [Aᵀ, 0]]: ‖(B − B')x‖ ≤ sqrt(2)·b·sqrt(C/N)
    m, n, b = 4, 3, 1.0
    a = rng.standard_normal((m, n))

    def embed(mat: np.ndarray) -> np.ndarray:
        return np.block([[np.zeros((m, m)), mat], [mat.T, np.zeros((n, n))]])

    worst = 0.0
    for _ in range(30):
        x = rng.standard_normal(m + n)
        x /= np.linalg.norm(x)
        c_bound = (m + n) * float(np.max(x * x))
        for s in range(m):
            for t in range(n):
                neighbour = a.copy()
                neighbour[s, t] += b
                change = np.linalg.norm((embed(a) - embed(neighbour)) @ x)
                bound = math.sqrt(2.0) * b * math.sqrt(c_bound / (m + n))
                assert change <= bound + 1e-12
                worst = max(worst, change / bound)
    assert worst > 0.9  # the factor sqrt(2) is needed (x_s and x_{m+t} can both be near the maximum)


def test_symmetric_kernel_path_equals_the_matrix_product(rng: np.random.Generator) -> None:
    a = rng.standard_normal((37, 37))
    x = rng.standard_normal(37)
    agg = LocalExecutor(as_source(a)).execute(RowProduct(x=x))
    np.testing.assert_allclose(assemble(agg), a @ x, atol=1e-12)


# ------------------------------------------------------------------------------------------------ noise scale


@pytest.mark.parametrize("calibration", ["standard", "paper"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_noise_scale_on_the_zero_matrix(
    recording: Callable[[], RecordingNoiseSource], calibration: str, symmetric: bool
) -> None:
    # On A = 0 every release is pure noise; its std must be σ·b·sqrt(C/N) with σ calibrated independently.
    n, d = (400, 400) if symmetric else (300, 100)
    b, c_bound, t = 2.0, 64.0, 6
    noise = recording()
    out = _run(sp.csr_array((n, d)), noise, epsilon=0.7, delta=1e-6, n_iter=t, symmetric=symmetric,
               coherence=c_bound, entry_bound=b, calibration=calibration)
    dimension = n if symmetric else n + d
    assert out.dimension == dimension
    if calibration == "paper":
        sigma = ppi_sigma(0.7, 1e-6, t) if symmetric else ppi_sigma(0.35, 5e-7, t)
    else:
        cal = calibrate_private_power(epsilon=0.7, delta=1e-6, n_iter=t, embedding=not symmetric)
        sigma = cal.noise_multiplier * (1.0 if symmetric else math.sqrt(2.0))
    expected_std = sigma * b * math.sqrt(c_bound / dimension)
    gaussian = [values for key, kind, _std, values in noise.draws if kind == "gaussian"]
    assert len(gaussian) == t
    z = np.concatenate(gaussian)
    low, high = chi2_bounds(z.size)
    assert low <= float(np.sum(z**2)) / expected_std**2 <= high
    assert all(std == pytest.approx(expected_std, rel=1e-12) for _k, kind, std, _v in noise.draws)


def test_values_are_laplace_with_the_calibrated_scale(recording: Callable[[], RecordingNoiseSource]) -> None:
    # σ̂_i of the zero matrix is pure Laplace noise: Σ|σ̂_i| ~ Gamma(k, b/ε_v); checked on the released values.
    k, b = 6, 3.0
    noise = recording()
    out = _run(sp.csr_array((200, 200)), noise, epsilon=1.0, delta=1e-6, n_iter=2, n_components=k,
               symmetric=True, entry_bound=b, release_values=True)
    cal = calibrate_private_power(epsilon=1.0, delta=1e-6, n_iter=2, n_components=k, n_values=k)
    scale = b / cal.value_epsilon
    low, high = gamma_bounds(k, scale)
    assert low <= float(np.sum(np.abs(out.values))) <= high
    assert [s for _k, kind, s, _v in noise.draws if kind == "laplace"] == [pytest.approx(scale)] * k


def test_sign_symmetry(seed: int) -> None:
    # Lemma 4.1: sign(⟨u_i, x_T⟩) is uniform; with 300 runs the mean sign is within z·/sqrt(300) at α = 1e-6.
    from scipy import stats

    planted = incoherent_psd(60, [30.0, 20.0, 10.0], seed=9)
    source = as_source(planted.matrix)
    signs = []
    for r in range(300):
        with warnings.catch_warnings():
            from dppca_dask.errors import NotPrivateWarning
            warnings.simplefilter("ignore", NotPrivateWarning)
            warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
            noise = NoiseSource.from_seed(seed * 1000 + r)
        out = run_algorithm(LocalExecutor(source), private_power_run(
            n_cols=60, epsilon=1.0, delta=1e-6, n_iter=4, symmetric=True, noise=noise))
        signs.append(np.sign(planted.left.T @ out.components[0]))
    signs = np.asarray(signs)
    bound = stats.norm.isf(ALPHA / 2) / math.sqrt(len(signs))
    assert np.all(np.abs(signs.mean(axis=0)) <= bound)


# ------------------------------------------------------------------------------------------------ values and signs


def test_embedding_value_pairs_the_signs_of_u_and_v() -> None:
    # power iteration on [[0, A], [Aᵀ, 0]] leaves the relative sign of u and v arbitrary; σ̂ = ûᵀAv̂ carries it,
    # so σ̂·û v̂ᵀ is A's best rank-1 approximation (noise off), never its negative
    planted = gaussian_factor_matrix(70, 25, 2, seed=10)
    for start in range(4):
        noise = ZeroNoiseSource()
        noise._rng = np.random.default_rng(start)
        out = _run(planted.matrix, noise, epsilon=1.0, delta=1e-6, n_iter=81, release_values=True)
        b_1 = out.values[0] * np.outer(out.left, out.components[0])
        best = planted.values[0] * np.outer(planted.left[:, 0], planted.right[:, 0])
        assert np.linalg.norm(b_1 - best) < 1e-6 * planted.values[0]


def test_signed_values_deflate_an_indefinite_matrix(rng: np.random.Generator) -> None:
    # spec §1.4: deflation by ‖B v‖ > 0 is wrong when the top-|λ| eigenvalue is negative; the Rayleigh quotient
    # (an option beyond the paper) deflates it correctly
    q, _ = np.linalg.qr(rng.standard_normal((80, 3)))
    matrix = (q * np.array([10.0, -6.0, 1.0])) @ q.T
    best = (q[:, :2] * np.array([10.0, -6.0])) @ q[:, :2].T
    signed = _run(matrix, ZeroNoiseSource(), epsilon=1.0, delta=1e-6, n_iter=80, n_components=2, symmetric=True,
                  release_values=True, signed_values=True)
    np.testing.assert_allclose(signed.values, [10.0, -6.0], rtol=1e-8)
    b_signed = (signed.components.T * signed.values) @ signed.components
    assert np.linalg.norm(b_signed - best) < 1e-6
    paper = _run(matrix, ZeroNoiseSource(), epsilon=1.0, delta=1e-6, n_iter=80, n_components=2, symmetric=True,
                 release_values=True)
    np.testing.assert_allclose(paper.values, [10.0, 6.0], rtol=1e-8)  # ‖B₁v₂‖ = 6 > 0: the wrong sign
    b_paper = (paper.components.T * paper.values) @ paper.components
    assert np.linalg.norm(b_paper - best) > 10.0


def test_embedding_value_noise_has_scale_b_over_epsilon(recording: Callable[[], RecordingNoiseSource]) -> None:
    noise = recording()
    _run(sp.csr_array((50, 20)), noise, epsilon=1.0, delta=1e-6, n_iter=2, entry_bound=3.0, release_values=True)
    cal = calibrate_private_power(epsilon=1.0, delta=1e-6, n_iter=2, n_values=1, embedding=True)
    (scale,) = [s for _k, kind, s, _v in noise.draws if kind == "laplace"]
    assert scale == pytest.approx(3.0 / cal.value_epsilon)  # sensitivity b: |ûᵀ(A − A')v̂| ≤ b·‖û‖_∞·‖v̂‖_∞


def test_an_empty_store_is_refused_before_any_release() -> None:
    noise = ZeroNoiseSource()
    with pytest.raises(InvalidInputError, match="no rows"):
        _run(np.zeros((0, 5)), noise, epsilon=1.0, delta=1e-6)
    assert not noise.released_keys


def test_utility_on_an_incoherent_matrix_follows_the_noise_law(seed: int) -> None:
    # spec §4.1(a)/§6.6: n = 4000, λ = σ₁·(1, .5, .4, .3, .2), σ₁ = 1e4, T = ⌈4 ln σ₁⌉ = 37, C = 2μ, the paper's σ:
    # σ₁ − ‖A x_T‖ ≈ C·σ²/(2σ₁) (13.1 in the spec's simulation), far inside Theorem 4.4's form with K = 1
    n, sigma1, t = 4000, 1e4, 37
    planted = incoherent_psd(n, sigma1 * np.array([1.0, 0.5, 0.4, 0.3, 0.2]), seed=13)
    c_bound = 2.0 * n * float(np.max(planted.left**2))
    gaps = []
    for r in range(3):
        with warnings.catch_warnings():
            from dppca_dask.errors import NotPrivateWarning
            warnings.simplefilter("ignore", NotPrivateWarning)
            warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
            noise = NoiseSource.from_seed(seed * 100 + r)
        out = _run(planted.matrix, noise, epsilon=1.0, delta=1e-6, n_iter=t, symmetric=True, coherence=c_bound,
                   calibration="paper")
        x = out.components[0]
        gaps.append(sigma1 - float(np.linalg.norm(planted.matrix @ x)))
    sigma = ppi_sigma(1.0, 1e-6, t)
    predicted = c_bound * sigma**2 / (2 * sigma1)
    assert 0.5 * predicted <= float(np.mean(gaps)) <= 1.5 * predicted
    assert max(gaps) <= t * math.sqrt(c_bound * math.log(n) * math.log(1e6))  # Thm 4.4 with K = 1, k = γ = 1


@pytest.mark.parametrize("symmetric", [True, False])
def test_large_finite_entries_do_not_overflow_the_iterate_norm(
    symmetric: bool, seeded_noise: Callable[[int], NoiseSource]
) -> None:
    # The entry relation leaves values unbounded: entries of 1e160 are valid input, and ‖B·x‖ ≈ 1e160 is finite,
    # but its square is not; the run normalises (and releases ‖B_{i-1}v‖) without squaring past float64's range
    planted = incoherent_psd(40, [30.0, 12.0], seed=3)
    matrix = planted.matrix * 1e160
    kwargs: dict[str, Any] = {"n_components": 2, "release_values": True} if symmetric else {}
    out = _run(matrix, seeded_noise(5), epsilon=1.0, delta=1e-6, n_iter=8, symmetric=symmetric, **kwargs)
    assert np.all(np.isfinite(out.components)) and np.all(np.isfinite(out.values))
    np.testing.assert_allclose(np.linalg.norm(out.components, axis=1), 1.0, rtol=1e-12)
    if symmetric:  # noise of std ≈ sqrt(C/N)·σ is nothing next to 1e160: the top eigenpair comes out
        assert sin2(out.components[0], planted.left[:, 0]) < 1e-3
        assert abs(out.values[0] / (30.0 * 1e160) - 1.0) < 1e-3


def test_symmetrisation_does_not_overflow_a_finite_product(seeded_noise: Callable[[int], NoiseSource]) -> None:
    # (A x + Aᵀ x)/2 for a symmetric A is A x, finite for any finite entries, but A x + Aᵀ x overflows when the
    # entries are near float64's limit: B x is halved before the sum
    matrix = np.eye(6)
    matrix[0, 0] = 1.7e308
    out = _run(matrix, seeded_noise(2), epsilon=1.0, delta=1e-6, n_iter=4, symmetric=True, n_components=2,
               release_values=True)
    assert sin2(out.components[0], np.eye(6)[0]) < 1e-12
    assert abs(out.values[0] / 1.7e308 - 1.0) < 1e-9 and np.isfinite(out.values[1])


def test_an_iterate_is_normalised_or_refused_whatever_its_entries() -> None:
    """``_unit`` (each round's noisy iterate): a norm whose square overflows still normalises; a vanished iterate,
    one with a NaN entry (whose norm was 0 before) and one with an infinite entry are refused, each saying which.
    ``_unit_or_zero`` leaves a zero or non-finite half as it is (its value's release refuses a non-finite one)."""
    from dppca_dask.methods.hardt_roth.power_iteration import _unit, _unit_or_zero

    np.testing.assert_allclose(_unit(np.array([3e300, -4e300])), [0.6, -0.8], rtol=1e-15)
    with pytest.raises(InvalidParameterError, match="vanished"):
        _unit(np.zeros(3))
    for bad in (np.array([1.0, np.nan]), np.array([np.inf, 1.0]), np.array([-np.inf, np.nan])):
        with pytest.raises(InvalidParameterError, match="not finite"):
            _unit(bad)
    assert np.array_equal(_unit_or_zero(np.zeros(2)), np.zeros(2))
    assert np.isnan(_unit_or_zero(np.array([np.nan, 1.0]))).any()
