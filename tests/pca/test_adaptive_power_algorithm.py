"""Adaptive private power iteration (seed 004): noise scale, noise off against scipy, one noise draw per release,
executor equivalence, an empirical privacy smoke test, resume, and utility against Analyze Gauss.

Statistical assertions use a false-failure rate of alpha = 1e-6 each (exact distributions: chi-square for sums of
squared Gaussians, Clopper-Pearson for proportions). All randomness is seeded.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats
from scipy.sparse.linalg import svds

from dppca_dask import pca
from dppca_dask.methods.adaptive_power.sequential import AdaptivePowerState, adaptive_power_run  # noqa: F401
from dppca_dask.coordinator import LocalExecutor, as_source, run_algorithm
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.testing import ZeroNoiseSource

ALPHA = 1e-6


class RecordingNoise(NoiseSource):
    """Seeded noise (not private) that records (release key, sampler, scale, values) of every draw."""

    def __init__(self, seed: int) -> None:
        super().__init__(np.random.default_rng(seed), private=False, description=f"recording seed={seed}")
        self.draws: list[tuple[str | None, str, float, np.ndarray]] = []

    def _gaussian(self, std: float, size: Any) -> Any:
        values = super()._gaussian(std, size)
        self.draws.append((self.current_release, "gaussian", std, np.asarray(values)))
        return values

    def _laplace(self, scale: float, size: Any) -> Any:
        values = super()._laplace(scale, size)
        self.draws.append((self.current_release, "laplace", scale, np.asarray(values)))
        return values


class NoiseOff(ZeroNoiseSource):
    """No privacy noise at all, but a (seeded) random starting vector: power iteration without privacy."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        self._start = np.random.default_rng(seed)

    def _gaussian(self, std: float, size: Any) -> Any:
        if self.current_release and self.current_release.endswith("/init"):
            return self._start.standard_normal(size)
        return super()._gaussian(std, size)


def _run(matrix: Any, noise: NoiseSource, **kwargs: Any) -> Any:
    params = dict(n_iter=5, n_components=1, row_norm_bound=1.0, epsilon_svt=0.5, noise_multiplier=3.0, cutoff=10.0,
                  grid=ThresholdGrid.for_bound(1.0))
    params.update(kwargs)
    source = as_source(matrix)
    executor = LocalExecutor(source)
    try:
        return run_algorithm(executor, adaptive_power_run(n_cols=source.n_cols, noise=noise, **params))
    finally:
        executor.close()


def _clip(matrix: np.ndarray, bound: float) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1)
    scale = np.minimum(1.0, bound / np.maximum(norms, 1e-300))
    return matrix * scale[:, None]


def _sin2(u: np.ndarray, v: np.ndarray) -> float:
    cos = float(abs(u @ v) / (np.linalg.norm(u) * np.linalg.norm(v)))
    return max(0.0, 1.0 - cos * cos)


def test_gaussian_noise_has_the_calibrated_scale_on_an_all_zero_matrix(seed: int) -> None:
    """On A = 0 every released vector is pure noise N(0, (m·θ_t)² I): Σ z²/(m θ_t)² ~ χ²(T·d)."""
    d, n_iter, multiplier = 3_000, 4, 2.5
    noise = RecordingNoise(seed)
    out = _run(sp.csr_array((40, d)), noise, n_iter=n_iter, noise_multiplier=multiplier)
    gaussians = [(key, std, z) for key, kind, std, z in noise.draws if kind == "gaussian" and "init" not in key]
    assert [key for key, _, _ in gaussians] == [f"component-0/iter-{t}/gaussian" for t in range(n_iter)]
    thetas = out.thresholds[0]
    statistic = 0.0
    for (_, std, z), theta in zip(gaussians, thetas):
        assert std == pytest.approx(multiplier * theta, rel=1e-12)  # noise std = m·θ of the released θ
        statistic += float(np.sum((z / (multiplier * theta)) ** 2))
    dof = n_iter * d
    assert stats.chi2.ppf(ALPHA / 2, dof) < statistic < stats.chi2.ppf(1 - ALPHA / 2, dof)
    assert set(thetas) <= set(ThresholdGrid.for_bound(1.0).thetas)


def test_every_release_draws_once_and_emits_its_events(seed: int) -> None:
    noise = RecordingNoise(seed)
    X = sp.random(300, 40, density=0.2, random_state=seed, format="csr")
    out = _run(X, noise, n_iter=3, n_components=2)
    keys = [key for key, *_ in noise.draws]
    expected_keys = {"component-0/init", "component-1/init"} | {
        f"component-{k}/iter-{t}/{what}" for k in range(2) for t in range(3) for what in ("svt", "gaussian")}
    assert set(keys) == expected_keys == set(noise.released_keys)
    assert len(out.events) == 2 * 3 * 2
    with pytest.raises(Exception, match="already drawn"):
        with noise.release("component-0/iter-0/gaussian"):
            pass


@pytest.mark.parametrize("k", [1, 2])
def test_noise_off_matches_svds_on_the_clipped_matrix(rng: np.random.Generator, k: int) -> None:
    """No noise and a cut-off below one row: nothing is filtered, so this is plain power iteration on the clipped
    matrix, and it converges to scipy's top singular vectors."""
    n, d = 600, 30
    scales = np.array([3.0, 1.8, 1.0] + [0.3] * (d - 3))
    X = rng.standard_normal((n, d)) * scales / math.sqrt(d)
    X[:5] *= 20.0  # a few rows above the clipping bound: they are scaled down, not dropped
    out = _run(sp.csr_array(X), NoiseOff(), n_iter=300, n_components=k, epsilon_svt=1e6, cutoff=0.5)
    clipped = _clip(X, 1.0)
    _, _, vt = svds(sp.csr_array(clipped), k=k)
    vt = vt[::-1]
    for i in range(k):
        assert _sin2(out.components[i], vt[i]) < 1e-8
    assert np.allclose(out.components @ out.components.T, np.eye(k), atol=1e-10)


def test_noise_off_through_pca_for_every_baseline(rng: np.random.Generator) -> None:
    X = rng.standard_normal((400, 12)) * np.array([2.0, 1.0] + [0.2] * 10) / 4
    _, _, vt = np.linalg.svd(_clip(X, 1.0))
    with warnings.catch_warnings():
        from dppca_dask.errors import NotPrivateWarning
        warnings.simplefilter("ignore", NotPrivateWarning)
        gauss = pca(X, epsilon=1.0, delta=1e-6, mechanism="analyze-gauss", client="local", noise=ZeroNoiseSource())
        exact = pca(X, epsilon=1.0, delta=1e-6, mechanism="exact", client="local")
    assert _sin2(gauss.components[0], vt[0]) < 1e-12 and _sin2(exact.components[0], vt[0]) < 1e-12
    assert gauss.private is False and exact.private is False


def test_coordinator_and_local_executor_agree_for_every_input_type(tmp_path, local_client, seed: int) -> None:
    """Same seeded noise through a real LocalCluster and in-process, and from every input type: same released
    thresholds, same components (up to the order of floating-point sums)."""
    import dask.array as da

    from dppca_dask import write_matrix
    from dppca_dask.storage import open_matrix

    rng = np.random.default_rng(seed)
    X = sp.random(3_000, 50, density=0.1, random_state=rng, format="csr")
    X = sp.vstack([X[:1000], sp.csr_array((0, 50)), X[1000:]]).tocsr()
    path = tmp_path / "m.zarr"
    write_matrix(path, X, rows_per_partition=700)
    inputs = {"path": str(path), "store": open_matrix(path), "scipy": X, "numpy": X.toarray(),
              "dask": da.from_array(X.toarray(), chunks=(500, 50))}
    results = {}
    with warnings.catch_warnings():
        from dppca_dask.errors import NotPrivateWarning
        warnings.simplefilter("ignore", NotPrivateWarning)
        for persist in (True, False):
            results[f"cluster-persist={persist}"] = pca(str(path), epsilon=1.0, delta=1e-6, n_iter=4, seed=seed,
                                                        client=local_client, persist=persist, progress=False,
                                                        mechanism="adaptive-power")
        for name, data in inputs.items():
            results[name] = pca(data, epsilon=1.0, delta=1e-6, n_iter=4, seed=seed, client="local", progress=False,
                                mechanism="adaptive-power")
    reference = results.pop("path")
    for name, result in results.items():
        np.testing.assert_array_equal(result.thresholds, reference.thresholds, err_msg=name)
        np.testing.assert_allclose(result.components, reference.components, rtol=0, atol=1e-9, err_msg=name)


def _clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    lower = 0.0 if successes == 0 else stats.beta.ppf(alpha / 2, successes, trials - successes + 1)
    upper = 1.0 if successes == trials else stats.beta.ppf(1 - alpha / 2, successes + 1, trials - successes)
    return float(lower), float(upper)


def test_empirical_privacy_of_the_released_threshold() -> None:
    """Smoke test of the SVT step on neighbouring datasets D and D + one extreme row: for every released θ,
    P_D'[θ] ≤ e^ε·P_D[θ] (and back) is not detectably violated (Clopper–Pearson at α = 1e-6 per comparison,
    over 6 θ values and both directions: family-wise false-failure rate below 1.2e-5)."""
    rng = np.random.default_rng(2026)
    d = 8
    base = rng.standard_normal((40, d)) * 0.05
    extreme = np.zeros((1, d))
    extreme[0, 0] = 1.0
    D, D2 = sp.csr_array(base), sp.csr_array(np.vstack([base, extreme]))
    eps = 0.5
    trials = 2_000

    def thetas(matrix: sp.csr_array, seed: int) -> np.ndarray:
        out = []
        for i in range(trials):
            noise = NoiseSource(np.random.default_rng([seed, i]), private=False)
            run = adaptive_power_run(n_cols=d, n_iter=1, n_components=1, row_norm_bound=1.0, epsilon_svt=eps,
                                     noise_multiplier=1.0, cutoff=2.0, grid=ThresholdGrid.for_bound(1.0, octaves=6),
                                     noise=noise)
            executor = LocalExecutor(as_source(matrix))
            out.append(run_algorithm(executor, run).thresholds[0, 0])
        return np.asarray(out)

    a, b = thetas(D, 1), thetas(D2, 2)
    for theta in np.unique(np.concatenate([a, b]))[:6]:
        pa, pb = int(np.sum(a == theta)), int(np.sum(b == theta))
        a_lo, a_hi = _clopper_pearson(pa, trials, ALPHA)
        b_lo, b_hi = _clopper_pearson(pb, trials, ALPHA)
        assert b_lo <= math.exp(eps) * a_hi and a_lo <= math.exp(eps) * b_hi, (theta, pa, pb)


# -- the second pass and its budget -------------------------------------------------------------------------


def test_pass_row_budget_closed_form_and_errors() -> None:
    from dppca_dask.methods.adaptive_power.sequential import default_top_m, pass_row_budget
    from dppca_dask.errors import InvalidParameterError

    # M = ⌈c + b_ρ·ln(K/δ) + b_ν·ln(Q·K/δ)⌉ = ⌈100 + 2·ln(5e10) + 3·ln(97·5e10)⌉
    expected = math.ceil(100 + 2 * math.log(5 / 1e-10) + 3 * math.log(97 * 5 / 1e-10))
    got = pass_row_budget(cutoff=100.0, threshold_scale=2.0, query_scale=3.0, n_queries=97, n_releases=5,
                          pass_delta=1e-10)
    assert got == expected == 237
    assert default_top_m(cutoff=100.0, epsilon_svt=1.0, n_releases=5) == pass_row_budget(
        cutoff=100.0, threshold_scale=2.0, query_scale=2.0, n_queries=97, n_releases=5, pass_delta=1e-10)
    for kwargs, message in [
        ({"cutoff": math.inf}, "cutoff must be finite and >= 0"),
        ({"threshold_scale": 0.0}, "threshold_scale must be finite and > 0"),
        ({"query_scale": math.nan}, "query_scale must be finite and > 0"),
        ({"n_queries": 0}, "n_queries must be an integer >= 1"),
        ({"n_releases": True}, "n_releases must be an integer >= 1"),
        ({"pass_delta": 0.0}, r"pass_delta must be in \(0, 1\); got 0.0"),
    ]:
        params = dict(cutoff=1.0, threshold_scale=1.0, query_scale=1.0, n_queries=3, n_releases=2, pass_delta=1e-9)
        with pytest.raises(InvalidParameterError, match=message):
            pass_row_budget(**(params | kwargs))


def test_budget_tail_bound_holds_empirically(seed: int) -> None:
    """The noise event that can force a second pass, ρ + max_j(−ν_j) > M − c, has probability ≤ δ_pass/K per step.

    With δ_pass = 0.05 over K = 1 step and Q = 97 queries of scale 2, over 200,000 simulated steps the number of
    exceedances must stay below the binomial(200000, 0.05) quantile at 1 − 1e-6 (false-failure rate ≤ 1e-6; the
    bound is a union bound, so the true rate is lower)."""
    from dppca_dask.methods.adaptive_power.sequential import pass_row_budget

    rng = np.random.default_rng(seed)
    runs, q, b = 200_000, 97, 2.0
    budget = pass_row_budget(cutoff=0.0, threshold_scale=b, query_scale=b, n_queries=q, n_releases=1,
                             pass_delta=0.05)
    rho = rng.laplace(0.0, b, runs)
    worst_nu = np.max(-rng.laplace(0.0, b, (runs, q)), axis=1)
    exceed = int(np.sum(rho + worst_nu > budget))
    assert exceed <= stats.binom.ppf(1 - ALPHA, runs, 0.05)


class _HugeThresholdNoise(ZeroNoiseSource):
    """Forces the δ_pass event: ρ = 1e9 makes the SVT answer the first query (the smallest θ), filtering far more
    rows than the budget; the start vector is seeded, every other draw is 0. Records each Gaussian's exact value."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self._start = np.random.default_rng(seed)
        self.exact: list[np.ndarray] = []

    def audit(self, *, kind: str, exact: Any, sensitivity: float, scale: Any) -> None:
        if kind == "gaussian":
            self.exact.append(np.array(exact, dtype=np.float64))

    def _laplace(self, scale: float, size: Any) -> Any:
        return 1e9 if size is None else np.zeros(size)

    def _gaussian(self, std: float, size: Any) -> Any:
        if self.current_release and self.current_release.endswith("/init"):
            return self._start.standard_normal(size)
        return super()._gaussian(std, size)


def test_the_second_pass_runs_only_on_the_noise_event_and_is_exact(seed: int) -> None:
    import dask.array as da

    rng = np.random.default_rng(seed)
    big = rng.standard_normal((150, 6))
    big /= np.linalg.norm(big, axis=1, keepdims=True)  # norm 1: filtered at the smallest θ
    tiny = rng.standard_normal((150, 6)) * 1e-5  # scores ≤ 1e-9 < θ_J ≈ 6e-8: kept
    X = np.vstack([big, tiny])[rng.permutation(300)]
    noise = _HugeThresholdNoise(seed)
    requests: list[str] = []
    source = as_source(da.from_array(X, chunks=((100, 100, 100), (6,))))
    executor = LocalExecutor(source)
    run = adaptive_power_run(n_cols=6, noise=noise, n_iter=1, n_components=1, row_norm_bound=1.0, epsilon_svt=50.0,
                             noise_multiplier=1.0, cutoff=0.1, grid=ThresholdGrid.for_bound(1.0), pass_delta=0.5)
    request = next(run)
    try:
        while True:
            requests.append(type(request).__name__)
            request = run.send(executor.execute(request))
    except StopIteration:
        pass
    assert requests == ["PowerStep", "FilteredSum"]  # the budget (≈ 1 row) cannot hold 150 filtered rows
    x0 = np.random.default_rng(seed).standard_normal(6)
    x0 /= np.linalg.norm(x0)
    scores = np.linalg.norm(X, axis=1) * np.abs(X @ x0)
    kept = X[scores <= ThresholdGrid.for_bound(1.0).thetas[-1]]
    # exact up to summation order: the full sum minus the filtered rows' sum cancels terms of size ~1, so the
    # absolute error is of order n·eps·c² (300 · 2.2e-16 ≈ 7e-14)
    np.testing.assert_allclose(noise.exact[0], kept.T @ (kept @ x0), rtol=0, atol=1e-13)


def test_resume_rejects_a_pending_index_off_the_grid() -> None:
    from dppca_dask.errors import InvalidParameterError

    state = AdaptivePowerState(component=0, iteration=0, x=np.ones(4) / 2, thresholds=((),), pending_index=97)
    with pytest.raises(InvalidParameterError, match=r"resume.pending_index must be a grid index in \[0, 97\); got 97"):
        _run(np.eye(4), NoiseOff(), resume=state)
    with pytest.raises(InvalidParameterError, match="n_iter must be an integer >= 1; got True"):
        _run(np.eye(4), NoiseOff(), n_iter=True)


def test_row_norm_bounds_at_both_ends_of_the_allowed_range_scale_exactly() -> None:
    """Scaling the data and c together by 1e99 or 1e-101 (c = 1e100 and 1e-100, the documented limits) gives the
    same seeded result as c = 1: nothing overflows or underflows (c² = 1e200 and 1e-200, σ = m·θ)."""
    X = sp.random(2_000, 30, density=0.2, random_state=0, format="csr")
    results = []
    for scale in (1.0, 1e100, 1e-100):
        with pytest.warns(Warning):
            r = pca(X * (scale / 10), epsilon=1.0, delta=1e-6, row_norm_bound=scale, seed=1, client="local",
                    progress=False)
        results.append(r)
    for r in results[1:]:
        np.testing.assert_allclose(r.components, results[0].components, rtol=1e-8, atol=1e-12)
        np.testing.assert_allclose(r.thresholds / r.provenance["parameters"]["row_norm_bound"] ** 2,
                                   results[0].thresholds, rtol=1e-12)


def test_unit_refuses_zero_and_non_finite_iterates_and_never_overflows() -> None:
    from dppca_dask.methods.adaptive_power.sequential import _unit
    from dppca_dask.errors import InvalidParameterError

    np.testing.assert_allclose(_unit(np.array([3e300, 4e300])), [0.6, 0.8], rtol=1e-15)  # ‖x‖² would be inf
    for bad in (np.zeros(3), np.array([1.0, np.inf]), np.array([np.nan, 1.0])):
        with pytest.raises(InvalidParameterError, match="the iterate is not a finite non-zero vector"):
            _unit(bad)
