"""Private low-rank approximation (seed 003) and randomized response: noise off, structure, sensitivity, noise scale."""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import dask
import numpy as np
import pytest
import scipy.sparse as sp
from hr_helpers import RecordingNoiseSource, chi2_bounds

from dppca_dask import load_lowrank, lowrank
from dppca_dask.accounting import ROW_CHANGE
from dppca_dask.coordinator import LocalExecutor, as_source, run_algorithm
from dppca_dask.datasets import gaussian_factor_matrix, incoherent_low_rank
from dppca_dask.errors import InvalidParameterError
from dppca_dask.kernels.hardt_roth import dense_rows
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.testing import ZeroNoiseSource
from dppca_dask.methods.hardt_roth.find_and_project import private_low_rank_run
from dppca_dask.methods.hardt_roth.linalg import prune, truncate_factors
from dppca_dask.methods.hardt_roth.low_rank_calibration import calibrate_private_low_rank, prf_sensitivity, rr_sigma
from dppca_dask.methods.hardt_roth.requests import LeftProjection
from dppca_dask.metrics import best_rank_error, frobenius_error

INF = float("inf")


def _pfp(matrix: Any, noise: NoiseSource, **kwargs: Any) -> Any:
    params = {"rank": 2, "oversampling": 2, "epsilon": 1.0, "delta": 1e-6, "row_norm_bound": INF,
              "row_change_bound": 1.0}
    params.update(kwargs)
    executor = LocalExecutor(as_source(matrix))
    return run_algorithm(executor, private_low_rank_run(n_cols=int(matrix.shape[1]), noise=noise, **params))


def _lowrank(matrix: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        from dppca_dask.errors import NotPrivateWarning
        warnings.simplefilter("ignore", NotPrivateWarning)
        warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
        return lowrank(matrix, client="local", **kwargs)


# ------------------------------------------------------------------------------------------------ noise off


def test_noise_off_pfp_equals_hmt_with_the_same_test_matrix() -> None:
    planted = gaussian_factor_matrix(120, 300, 2, seed=1)
    out = _pfp(planted.matrix, ZeroNoiseSource())
    omega = np.random.default_rng(0).standard_normal((300, 4))  # the zero source's generator draws Ω first
    w, _ = np.linalg.qr(planted.matrix @ omega)
    reference = w @ (w.T @ planted.matrix)  # HMT (Fig. 1): P_Y A
    np.testing.assert_allclose(out.left @ out.right, reference, atol=1e-9)
    # exactly rank-r input with k ≥ r: the range finder captures it
    assert frobenius_error(planted.matrix, (out.left, out.right)) / np.linalg.norm(planted.matrix) < 1e-10


def test_noise_off_hmt_bound_on_a_decaying_spectrum() -> None:
    # Thm 3.1: E‖A − P_Y A‖_F ≤ sqrt(1 + r/(p−1))·‖A − A_r‖_F, mean over 30 trials (noise off)
    planted = incoherent_low_rank(80, 200, 10.0 * 0.6 ** np.arange(12), seed=2)
    errors = []
    for trial in range(30):
        noise = ZeroNoiseSource()
        noise._rng = np.random.default_rng(trial)  # a fresh Ω per trial
        out = _pfp(planted.matrix, noise, oversampling=3)
        errors.append(frobenius_error(planted.matrix, (out.left, out.right)))
    bound = math.sqrt(1 + 2 / (3 - 1)) * best_rank_error(planted.matrix, 2)
    assert float(np.mean(errors)) <= bound


def test_noise_off_randomized_response_is_the_truncated_svd() -> None:
    planted = incoherent_low_rank(60, 90, [9.0, 5.0, 1.0], seed=3)
    result = _lowrank(planted.matrix, rank=2, epsilon=1.0, delta=1e-6, mechanism="randomized-response",
                      row_norm_bound=INF, row_change_bound=1.0, noise=ZeroNoiseSource())
    best = (planted.left[:, :2] * planted.values[:2]) @ planted.right[:, :2].T
    np.testing.assert_allclose(result.to_dense(), best, atol=1e-10)
    assert not result.private


# ------------------------------------------------------------------------------------------------ structure


def test_output_structure(seeded_noise: Callable[[int], NoiseSource]) -> None:
    planted = gaussian_factor_matrix(150, 400, 2, seed=4)
    out = _pfp(planted.matrix, seeded_noise(1), oversampling=3)
    k = 5
    assert out.left.shape == (150, k) and out.right.shape == (k, 400)
    np.testing.assert_allclose(out.left.T @ out.left, np.eye(k), atol=1e-10)  # WᵀW = I
    assert np.linalg.matrix_rank(out.left @ out.right) <= k
    np.testing.assert_allclose(out.alphas, np.max(np.abs(out.left), axis=0))  # α = 1: no pruning
    assert out.projection_sensitivity == pytest.approx(float(np.max(np.linalg.norm(out.left, axis=1))))


def test_pruning(rng: np.random.Generator) -> None:
    w, _ = np.linalg.qr(rng.standard_normal((200, 4)))
    pruned = prune(w, 0.1)
    assert np.all(np.abs(pruned) <= 0.1) and np.all(np.linalg.norm(pruned, axis=0) <= 1.0 + 1e-12)
    np.testing.assert_array_equal(prune(w, 1.0), w)  # α = 1 is a no-op (|W_ij| ≤ 1)
    flipped = w * np.array([1.0, -1.0, -1.0, 1.0])
    np.testing.assert_array_equal(np.max(np.abs(prune(flipped, 0.1)), axis=0), np.max(np.abs(pruned), axis=0))


def test_pruned_left_factor_and_truncation(seeded_noise: Callable[[int], NoiseSource]) -> None:
    planted = gaussian_factor_matrix(150, 300, 2, scale=5.0, seed=5)
    pruned = _pfp(planted.matrix, seeded_noise(2), prune_alpha=0.15, left_factor="pruned")
    assert np.all(np.abs(pruned.left) <= 0.15)
    assert np.all(pruned.alphas <= 0.15)
    full = _pfp(planted.matrix, seeded_noise(3))
    truncated = _pfp(planted.matrix, seeded_noise(3), truncate=True)
    assert truncated.left.shape == (150, 2) and truncated.right.shape == (2, 300)
    np.testing.assert_allclose(truncated.left.T @ truncated.left, np.eye(2), atol=1e-10)
    u, s, vt = np.linalg.svd(full.left @ full.right, full_matrices=False)
    np.testing.assert_allclose(truncated.left @ truncated.right, (u[:, :2] * s[:2]) @ vt[:2], atol=1e-8)


def test_truncate_factors_with_a_non_orthonormal_left(rng: np.random.Generator) -> None:
    left, right = rng.standard_normal((50, 4)), rng.standard_normal((4, 30))
    l_r, r_r = truncate_factors(left, right, 2, orthonormal_left=False)
    u, s, vt = np.linalg.svd(left @ right, full_matrices=False)
    np.testing.assert_allclose(l_r @ r_r, (u[:, :2] * s[:2]) @ vt[:2], atol=1e-10)


# ------------------------------------------------------------------------------------------------ sensitivity


def test_projection_sensitivity_brute_force(rng: np.random.Generator) -> None:
    # spec §7.3: A' = A + e_i eᵀ, ‖e‖ = 1: row j of Wᵀ(A − A') has norm |W_ij| ≤ α_j, ‖Wᵀ(A − A')‖_F = ‖W_(i)‖
    m, n, k = 30, 12, 3
    w, _ = np.linalg.qr(rng.standard_normal((m, k)))
    a = rng.standard_normal((m, n))
    alphas = np.max(np.abs(w), axis=0)
    with dask.config.set({"dppca_dask.in-memory-partitions": 1}):  # all m rows in partition 0
        executor = LocalExecutor(as_source(a))
    base = executor.execute(LeftProjection(left={0: w})).total.T
    np.testing.assert_allclose(base, w.T @ a, atol=1e-12)
    for i in range(m):
        e = rng.standard_normal(n)
        e /= np.linalg.norm(e)
        neighbour = a.copy()
        neighbour[i] += e
        change = w.T @ (a - neighbour)
        np.testing.assert_allclose(np.linalg.norm(change, axis=1), np.abs(w[i]), atol=1e-12)
        assert np.all(np.linalg.norm(change, axis=1) <= alphas + 1e-12)
        assert np.linalg.norm(change) == pytest.approx(np.linalg.norm(w[i]), rel=1e-12)


def test_clipping_is_one_lipschitz(rng: np.random.Generator) -> None:
    # a row change of at most s moves the clipped row by at most s (and zeroing a clipped row by at most c)
    block = rng.standard_normal((40, 8)) * 3.0
    for _ in range(50):
        changed = block.copy()
        changed[7] += rng.standard_normal(8) * rng.uniform(0, 2)
        for c in (0.5, 1.0, 4.0):
            before = dense_rows(block, np.linalg.norm(block, axis=1), row_norm_bound=c)
            after = dense_rows(changed, np.linalg.norm(changed, axis=1), row_norm_bound=c)
            assert np.linalg.norm(before - after) <= np.linalg.norm(block[7] - changed[7]) + 1e-12
            assert np.linalg.norm(before[7]) <= c + 1e-12


def test_range_finder_sensitivity_tail(rng: np.random.Generator) -> None:
    # spec §7.4: over 1e5 draws, P{‖eᵀΩ‖ > sqrt(2k·ln(4k/δ))} ≤ δ/2 with δ = 0.1 (eᵀΩ ~ N(0, I_k) for unit e)
    k, delta = 4, 0.1
    draws = rng.standard_normal((100_000, k))
    frequency = float(np.mean(np.linalg.norm(draws, axis=1) > prf_sensitivity(k, delta)))
    assert frequency <= delta / 2


# ------------------------------------------------------------------------------------------------ noise scale


@pytest.mark.parametrize("calibration", ["standard", "paper"])
def test_pfp_noise_scale_on_the_zero_matrix(
    recording: Callable[[], RecordingNoiseSource], calibration: str
) -> None:
    # On A = 0: Y = N₁ (std s·ρ₁) and M = N₂ (row i: std s·α_i·ρ₂); checked on the released M itself.
    m, n, s = 300, 500, 2.0
    noise = recording()
    with warnings.catch_warnings():
        from dppca_dask.errors import NotPrivateWarning
        warnings.simplefilter("ignore", NotPrivateWarning)
        warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
        out = _pfp(sp.csr_array((m, n)), noise, row_change_bound=s, calibration=calibration)
    cal = calibrate_private_low_rank(epsilon=1.0, delta=1e-6, rank=2, oversampling=2, calibration=calibration)
    range_noise = next(v for key, _kind, _s, v in noise.draws if key.endswith("range-finder/gaussian"))
    low, high = chi2_bounds(range_noise.size)
    assert low <= float(np.sum(range_noise**2)) / (s * cal.range_rho) ** 2 <= high
    low, high = chi2_bounds(out.right.size)
    statistic = float(np.sum((out.right / (s * out.alphas[:, None] * cal.projection_rho)) ** 2))
    assert low <= statistic <= high
    # spec §7.8: E‖W N‖²_F = n·ρ²·Σα_i² for orthonormal W, so ‖B‖²_F follows the same χ² scaled
    assert np.linalg.norm(out.left @ out.right) == pytest.approx(np.linalg.norm(out.right), rel=1e-9)


def test_tight_projection_noise_scale(recording: Callable[[], RecordingNoiseSource]) -> None:
    m, n = 300, 400
    out = _pfp(sp.csr_array((m, n)), recording(), projection="tight", oversampling=4)
    cal = calibrate_private_low_rank(epsilon=1.0, delta=1e-6, rank=2, oversampling=4, projection="tight")
    std = out.projection_sensitivity * cal.projection_multiplier
    low, high = chi2_bounds(out.right.size)
    assert low <= float(np.sum(out.right**2)) / std**2 <= high
    assert out.projection_sensitivity <= math.sqrt(6) * float(np.max(out.alphas)) + 1e-12  # Δ_M ≤ sqrt(k)·max|W|


def test_randomized_response_noise_scale(recording: Callable[[], RecordingNoiseSource]) -> None:
    noise = recording()
    _lowrank(sp.csr_array((200, 150)), rank=2, epsilon=0.5, delta=1e-6, mechanism="randomized-response",
             row_norm_bound=3.0, noise=noise)
    ((key, _kind, std, values),) = noise.draws
    expected = 3.0 * rr_sigma(0.5, 1e-6)  # s·(analytic Gaussian multiplier at (ε, δ)) with s = c = 3
    assert key == "randomized-response/gaussian" and std == pytest.approx(expected, rel=1e-12)
    low, high = chi2_bounds(values.size)
    assert low <= float(np.sum(values**2)) / expected**2 <= high


# ------------------------------------------------------------------------------------------------ utility


def test_randomized_response_error_matches_its_prediction(seed: int) -> None:
    # spec §7.11: for a strong rank-r signal E‖A − B_RR‖_F ≈ σ·sqrt(r(m+n) − r²), here within ±3% over 3 runs
    planted = gaussian_factor_matrix(100, 3000, 2, scale=3.0, seed=6)
    errors = []
    for r in range(3):
        result = _lowrank(planted.matrix, rank=2, epsilon=1.0, delta=1e-6, mechanism="randomized-response",
                          row_norm_bound=INF, row_change_bound=1.0, seed=seed * 10 + r)
        errors.append(frobenius_error(planted.matrix, (result.left, result.right)))
    predicted = rr_sigma(1.0, 1e-6) * math.sqrt(2 * (100 + 3000) - 4)
    assert float(np.mean(errors)) == pytest.approx(predicted, rel=0.03)


def test_paper_constants_lose_to_randomized_response_at_test_scale(seed: int) -> None:
    # spec §7.12: with the paper's constants PFP is worse than randomized response at m ≤ 1e3, and its error is
    # the predicted projection noise sqrt(n·ρ₂²·Σα_i²) (the range finder's error is far smaller).
    planted = gaussian_factor_matrix(100, 3000, 2, scale=3.0, seed=7)
    pfp = _lowrank(planted.matrix, rank=2, epsilon=1.0, delta=1e-6, calibration="paper", row_norm_bound=INF,
                   row_change_bound=1.0, seed=seed)
    rr = _lowrank(planted.matrix, rank=2, epsilon=1.0, delta=1e-6, mechanism="randomized-response",
                  row_norm_bound=INF, row_change_bound=1.0, seed=seed + 1)
    pfp_error = frobenius_error(planted.matrix, (pfp.left, pfp.right))
    assert pfp_error > frobenius_error(planted.matrix, (rr.left, rr.right))
    rho2 = pfp.provenance["calibration"]["projection_rho"]
    predicted = math.sqrt(3000 * rho2**2 * float(np.sum(np.asarray(pfp.extras["alphas"]) ** 2)))
    assert pfp_error == pytest.approx(predicted, rel=0.1)
    assert not pfp.privacy.meets_target


def test_paper_calibration_warns_that_it_misses_the_target() -> None:
    planted = gaussian_factor_matrix(40, 60, 2, seed=8)
    with pytest.warns(UserWarning, match="do not meet"):
        lowrank(planted.matrix, rank=2, epsilon=1.0, delta=1e-6, calibration="paper", row_norm_bound=INF,
                row_change_bound=1.0, client="local", noise=ZeroNoiseSource())


# ------------------------------------------------------------------------------------------------ API


def test_lowrank_report_and_roundtrip(tmp_path: Any, seed: int) -> None:
    planted = gaussian_factor_matrix(80, 120, 2, seed=9)
    result = _lowrank(planted.matrix / 20.0, rank=2, epsilon=1.0, delta=1e-6, seed=seed)
    report = result.privacy
    assert report.neighbouring == ROW_CHANGE and report.meets_target
    assert report.group_privacy["neighbouring"].startswith("replace one row")
    assert report.group_privacy["epsilon"] > report.epsilon
    # the two steps share one multiplier, so the report summarises them as one Gaussian composed twice
    assert sorted(e["type"] for e in report.events) == ["EpsilonDeltaDpEvent", "SelfComposedDpEvent"]
    assert 0.99 <= report.epsilon <= 1.0
    assert result.rank == 4 and result.shape == (80, 120)
    assert result.provenance["parameters"]["row_change_bound"] == 1.0
    result.save(tmp_path / "out")
    loaded = load_lowrank(tmp_path / "out")
    np.testing.assert_array_equal(loaded.left, result.left)
    np.testing.assert_array_equal(loaded.right, result.right)
    assert loaded.privacy.neighbouring == ROW_CHANGE and loaded.mechanism == "private-low-rank"
    assert "left" not in result.to_dict()


def test_randomized_response_refuses_what_does_not_fit(seeded_noise: Callable[[int], NoiseSource]) -> None:
    noise = seeded_noise(4)
    with pytest.raises(InvalidParameterError, match=r"would need about 0\.00 GiB \(320000 bytes\)"):
        lowrank(np.ones((100, 100)), rank=2, epsilon=1.0, delta=1e-6, mechanism="randomized-response",
                max_dense_bytes=1000, client="local", noise=noise)
    assert not noise.released_keys


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mechanism": "svd"}, "mechanism must be one of"),
        ({"rank": 0}, "rank"),
        ({"epsilon": -1.0}, "epsilon"),
        ({"delta": 0.0}, "delta"),
        ({"calibration": "tight"}, "calibration"),
        ({"oversampling": -1}, "oversampling"),
        ({"rank": 20, "oversampling": 2}, "rank \\+ oversampling"),
        ({"prune_alpha": 0.0}, "prune_alpha"),
        ({"left_factor": "w"}, "left_factor"),
        ({"projection": "exact"}, "projection"),
        ({"row_norm_bound": 0.0}, "row_norm_bound"),
        ({"row_norm_bound": INF}, "row_change_bound"),
        ({"row_change_bound": -2.0}, "row_change_bound"),
        ({"seed": "x"}, "seed"),
        ({"seed": 1, "noise": ZeroNoiseSource()}, "either seed or noise"),
        ({"coherence": 4.0}, "do not apply"),
        ({"mechanism": "randomized-response", "oversampling": 3}, "do not apply"),
        ({"mechanism": "randomized-response", "rank": 30}, "rank must be"),
        ({"mechanism": "randomized-response", "max_dense_bytes": 0}, "max_dense_bytes"),
        ({"mechanism": "private-power", "row_norm_bound": 2.0}, "do not apply"),
        ({"mechanism": "private-power", "rank": 2}, "symmetric=True"),
        ({"mechanism": "private-power", "entry_bound": 0.0}, "entry_bound"),
        ({"mechanism": "private-power", "coherence": -1.0}, "coherence"),
        ({"mechanism": "private-power", "n_iter": 0}, "n_iter"),
        ({"mechanism": "private-power", "symmetric": True, "rank": 30}, "rank must be"),
    ],
)
def test_lowrank_validates_before_reading(kwargs: dict, match: str) -> None:
    params: dict[str, Any] = {"rank": 2, "epsilon": 1.0, "delta": 1e-6}
    params.update(kwargs)
    with pytest.raises(InvalidParameterError, match=match):
        lowrank(np.ones((20, 20)), client="local", **params)


def test_to_dense_refuses_large_outputs() -> None:
    result = _lowrank(np.eye(30), rank=1, epsilon=1.0, delta=1e-6, noise=ZeroNoiseSource(), oversampling=0)
    with pytest.raises(InvalidParameterError, match="keep it factored"):
        result.to_dense(max_bytes=10)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rank": 0}, "rank"),
        ({"oversampling": -1}, "oversampling"),
        ({"rank": 20}, "rank \\+ oversampling must be <= the number of columns"),
        ({"row_change_bound": INF}, "row_change_bound"),
        ({"prune_alpha": 0.0}, "prune_alpha"),
        ({"left_factor": "w"}, "left_factor"),
        # a negative bound made the clip factors negative (a -> -|c|·a/‖a‖ is not 1-Lipschitz: the sensitivity
        # fails) and NaN left the rows unclipped
        ({"row_norm_bound": -1.0}, "row_norm_bound must be > 0"),
        ({"row_norm_bound": float("nan")}, "row_norm_bound must be > 0"),
        ({"row_norm_bound": 0.0}, "row_norm_bound must be > 0"),
    ],
)
def test_private_low_rank_run_rejects_bad_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        _pfp(np.ones((30, 20)), ZeroNoiseSource(), **kwargs)


def test_private_low_rank_run_needs_enough_rows() -> None:
    from dppca_dask.errors import InvalidInputError

    noise = ZeroNoiseSource()
    with pytest.raises(InvalidInputError, match="exceeds the number of rows"):
        _pfp(np.ones((3, 20)), noise)
    assert noise.released_keys == {"private-low-rank/range-finder/omega"}  # Ω drawn, nothing released


@pytest.mark.parametrize(("kwargs", "match"), [({"rank": 0}, "rank"), ({"row_change_bound": 0.0}, "row_change_bound"),
                                               ({"row_norm_bound": -2.0}, "row_norm_bound must be > 0"),
                                               ({"row_norm_bound": float("nan")}, "row_norm_bound must be > 0")])
def test_randomized_response_run_rejects_bad_parameters(kwargs: dict, match: str) -> None:
    from dppca_dask.methods.hardt_roth.randomized_response import randomized_response_run

    params = {"rank": 2, "epsilon": 1.0, "delta": 1e-6, "row_norm_bound": 1.0, "row_change_bound": 1.0}
    params.update(kwargs)
    with pytest.raises(InvalidParameterError, match=match):
        run_algorithm(LocalExecutor(as_source(np.ones((5, 5)))),
                      randomized_response_run(n_cols=5, noise=ZeroNoiseSource(), **params))


def test_result_objects_check_their_factors(tmp_path: Any) -> None:
    from dppca_dask.errors import StoreNotFoundError
    from dppca_dask.results import LowRankResult

    with pytest.raises(InvalidParameterError, match="factors must be"):
        LowRankResult(left=np.ones((4, 2)), right=np.ones((3, 5)), mechanism="x", privacy={})
    with pytest.raises(StoreNotFoundError, match="no result.json"):
        load_lowrank(tmp_path)


def test_range_finder_error_meets_theorem_42_on_average(seed: int) -> None:
    # spec §7.7: E‖A − WWᵀA‖_F ≤ sqrt(1 + r/(p−1))·sqrt(Σ_{j>r}(σ_j + ρ₁)²) = sqrt(3)·sqrt(m − r)·ρ₁ for an exactly
    # rank-r A (r = p = 2), mean over 20 runs (p = 2 is heavy-tailed, so single runs are not checked)
    planted = gaussian_factor_matrix(200, 3000, 2, scale=3.0, seed=11)
    source = as_source(planted.matrix)
    errors = []
    for r in range(20):
        with warnings.catch_warnings():
            from dppca_dask.errors import NotPrivateWarning
            warnings.simplefilter("ignore", NotPrivateWarning)
            warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
            noise = NoiseSource.from_seed(seed * 100 + r)
        out = run_algorithm(LocalExecutor(source), private_low_rank_run(
            n_cols=3000, rank=2, oversampling=2, epsilon=1.0, delta=1e-6, row_norm_bound=None, row_change_bound=1.0,
            noise=noise))
        w = out.left
        errors.append(float(np.linalg.norm(planted.matrix - w @ (w.T @ planted.matrix))))
    rho1 = calibrate_private_low_rank(epsilon=1.0, delta=1e-6, rank=2, oversampling=2).range_rho
    assert float(np.mean(errors)) <= math.sqrt(3.0) * math.sqrt(198) * rho1


class _CountingExecutor(LocalExecutor):
    def __init__(self, source: Any) -> None:
        super().__init__(source)
        self.requests: list[str] = []

    def execute(self, request: Any) -> Any:
        self.requests.append(type(request).__name__)
        return super().execute(request)


def test_two_passes_over_the_data() -> None:
    # spec §7.14: PFP reads the data exactly twice (A'Ω, then W'ᵀA'); randomized response once
    from dppca_dask.methods.hardt_roth.randomized_response import randomized_response_run

    matrix = gaussian_factor_matrix(50, 80, 2, seed=12).matrix
    executor = _CountingExecutor(as_source(matrix))
    out = run_algorithm(executor, private_low_rank_run(
        n_cols=80, rank=2, oversampling=2, epsilon=1.0, delta=1e-6, row_norm_bound=None, row_change_bound=1.0,
        noise=ZeroNoiseSource(), truncate=True))
    assert executor.requests == ["RowProduct", "LeftProjection"] and out.n_passes == 2
    executor = _CountingExecutor(as_source(matrix))
    run_algorithm(executor, randomized_response_run(
        n_cols=80, rank=2, epsilon=1.0, delta=1e-6, row_norm_bound=None, row_change_bound=1.0,
        noise=ZeroNoiseSource()))
    assert executor.requests == ["DenseRows"]
