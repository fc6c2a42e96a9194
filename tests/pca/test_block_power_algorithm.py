"""Block adaptive power iteration: noise-off equality with a block (subspace) power method, centred noise-off runs
against scikit-learn's PCA, the releases and events of a run, and the noise scales of the mean and variance
releases (χ² with α = 1e-6 per assertion)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats
from sklearn.decomposition import PCA

from dppca_dask.methods.adaptive_power.block import block_power_run, ordered_basis
from dppca_dask.coordinator import LocalExecutor, as_source, run_algorithm
from dppca_dask.errors import InvalidParameterError
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.centred import MEAN_SENSITIVITY, VARIANCE_SENSITIVITY
from dppca_dask.mechanisms.testing import ZeroNoiseSource

ALPHA = 1e-6


class StartOnly(ZeroNoiseSource):
    """No privacy noise, a seeded random start: block power iteration without privacy."""

    def __init__(self, seed: int) -> None:
        super().__init__()
        self.start_rng = np.random.default_rng(seed)

    def _gaussian(self, std: float, size: Any) -> Any:
        if self.current_release == "block/init":
            return self.start_rng.standard_normal(size)
        return super()._gaussian(std, size)


class Recording(NoiseSource):
    def __init__(self, seed: int) -> None:
        super().__init__(np.random.default_rng(seed), private=False, description="recording")
        self.draws: list[tuple[str | None, float, np.ndarray]] = []

    def _gaussian(self, std: float, size: Any) -> Any:
        values = super()._gaussian(std, size)
        self.draws.append((self.current_release, std, np.asarray(values)))
        return values


def _run(matrix: Any, noise: NoiseSource, **kwargs: Any) -> Any:
    params = dict(n_iter=5, n_components=2, row_norm_bound=1.0, epsilon_svt=0.5, noise_multiplier=3.0, cutoff=10.0,
                  grid=ThresholdGrid.for_bound(1.0))
    params.update(kwargs)
    source = as_source(matrix)
    executor = LocalExecutor(source)
    try:
        return run_algorithm(executor, block_power_run(n_cols=source.n_cols, noise=noise, **params))
    finally:
        executor.close()


def _clipped(rows: np.ndarray, bound: float) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1)
    return rows * np.minimum(1.0, bound / np.maximum(norms, 1e-300))[:, None]


def _projector_distance(u: np.ndarray, v: np.ndarray) -> float:
    """Spectral norm of the difference of the projectors on the row spaces (sin of the largest principal angle)."""
    return float(np.linalg.norm(u.T @ u - v.T @ v, 2))


def _data(rng: np.random.Generator, n: int = 800, d: int = 20, shift: float = 0.0) -> np.ndarray:
    scales = np.array([3.0, 2.0, 1.2] + [0.3] * (d - 3)) / np.sqrt(d)
    rows = rng.standard_normal((n, d)) * scales + shift
    rows[:5] *= 20.0  # rows above the bound: scaled down, not dropped
    return rows


@pytest.mark.parametrize("k", [1, 3])
def test_noise_off_equals_a_block_power_method(rng: np.random.Generator, k: int) -> None:
    rows = _data(rng)
    out = _run(sp.csr_array(rows), StartOnly(7), n_iter=6, n_components=k, epsilon_svt=1e6, cutoff=0.5)
    clipped = _clipped(rows, 1.0)
    x = np.linalg.qr(np.random.default_rng(7).standard_normal((rows.shape[1], k)))[0]
    for _ in range(6):
        y = clipped.T @ (clipped @ x)
        x = np.linalg.qr(y)[0]
    assert _projector_distance(out.components, ordered_basis(y)) < 1e-9
    np.testing.assert_allclose(np.abs(out.components @ ordered_basis(y).T), np.eye(k), atol=1e-8)
    assert out.thresholds.shape == (1, 6)  # the smallest θ that filters no row (cut-off below one row)


def test_oversampled_noise_off_returns_the_top_k_of_a_wider_block(rng: np.random.Generator) -> None:
    rows = _data(rng)
    out = _run(sp.csr_array(rows), StartOnly(7), n_iter=4, n_components=1, epsilon_svt=1e6, cutoff=0.5,
               oversample=2)
    clipped = _clipped(rows, 1.0)
    x = np.linalg.qr(np.random.default_rng(7).standard_normal((rows.shape[1], 3)))[0]
    for _ in range(4):
        y = clipped.T @ (clipped @ x)
        x = np.linalg.qr(y)[0]
    assert out.components.shape == (1, rows.shape[1])
    assert 1 - float(out.components[0] @ ordered_basis(y)[0]) ** 2 < 1e-9


def test_centred_noise_off_equals_scikit_learn_pca_on_the_clipped_rows(rng: np.random.Generator) -> None:
    rows = _data(rng, shift=0.4)
    clipped = _clipped(rows, 1.0)
    given = clipped.mean(axis=0)  # the mean the private release estimates
    out = _run(sp.csr_array(rows), StartOnly(3), n_iter=200, n_components=3, epsilon_svt=1e6, cutoff=0.5,
               center=given, variance_multiplier=1.0, grid=ThresholdGrid.for_bound(2.0))
    pca = PCA(n_components=3, svd_solver="full").fit(clipped)
    reference_rows = clipped - pca.mean_
    for i in range(3):
        cos = abs(float(out.components[i] @ pca.components_[i]))
        assert 1 - cos * cos < 1e-8  # sin²
    assert _projector_distance(out.components, pca.components_) < 1e-4
    # the explained variance of a noise-off run is scikit-learn's (n − 1 denominators)
    np.testing.assert_allclose(out.variance.explained_variance, pca.explained_variance_, rtol=1e-8)
    np.testing.assert_allclose(out.variance.singular_values, pca.singular_values_, rtol=1e-8)
    np.testing.assert_allclose(out.variance.explained_variance_ratio, pca.explained_variance_ratio_, rtol=1e-8)
    np.testing.assert_array_equal(out.mean, given)


def test_private_centre_noise_off_is_the_mean_of_the_clipped_rows(rng: np.random.Generator) -> None:
    rows = _data(rng, shift=0.3)
    out = _run(rows, StartOnly(1), n_iter=2, center="private", mean_multiplier=2.0, grid=ThresholdGrid.for_bound(2.0))
    np.testing.assert_allclose(out.mean, _clipped(rows, 1.0).mean(axis=0), atol=1e-12)
    assert out.mean_count == rows.shape[0]


def test_releases_and_events_of_a_run(seed: int) -> None:
    from dp_accounting import GaussianDpEvent

    noise = Recording(seed)
    rows = sp.random(300, 30, density=0.2, random_state=seed, format="csr")
    out = _run(rows, noise, n_iter=3, n_components=4, center="private", mean_multiplier=5.0, variance_multiplier=4.0,
               grid=ThresholdGrid.for_bound(2.0))
    keys = [key for key, *_ in noise.draws]
    assert keys == ["mean", "block/init"] + [f"block/iter-{t}/gaussian" for t in range(3)] + ["explained-variance"]
    assert set(noise.released_keys) == set(keys) | {f"block/iter-{t}/svt" for t in range(3)}
    kinds = [type(e).__name__ for e in out.events]
    assert kinds == ["GaussianDpEvent"] + ["EpsilonDeltaDpEvent", "GaussianDpEvent"] * 3 + ["GaussianDpEvent"]
    assert out.events[0] == GaussianDpEvent(5.0) and out.events[-1] == GaussianDpEvent(4.0)
    assert out.components.shape == (4, 30)
    np.testing.assert_allclose(out.components @ out.components.T, np.eye(4), atol=1e-10)
    for (key, std, z), theta in zip(noise.draws[2:5], out.thresholds[0]):
        assert std == pytest.approx(3.0 * theta, rel=1e-12) and z.shape == (30, 4)


def test_mean_and_variance_noise_scales_chi_square(seed: int) -> None:
    """On an all-zero matrix every released value is pure noise: Σ(z/σ)² ~ χ²(dof) for σ = m·sensitivity."""
    d, k, reps = 200, 5, 20
    mean_stat = var_stat = 0.0
    for r in range(reps):
        noise = Recording(seed + r)
        _run(sp.csr_array((50, d)), noise, n_iter=1, n_components=k, center="private", mean_multiplier=1.5,
             variance_multiplier=2.5, grid=ThresholdGrid.for_bound(2.0))
        draws = {key: (std, z) for key, std, z in noise.draws}
        std, z = draws["mean"]
        assert std == pytest.approx(1.5 * MEAN_SENSITIVITY, rel=1e-15) and z.shape == (d + 1,)
        mean_stat += float(np.sum((z / std) ** 2))
        std, z = draws["explained-variance"]
        assert std == pytest.approx(2.5 * VARIANCE_SENSITIVITY, rel=1e-15) and z.shape == (k + 2,)
        var_stat += float(np.sum((z / std) ** 2))
    for stat, dof in ((mean_stat, reps * (d + 1)), (var_stat, reps * (k + 2))):
        assert stats.chi2.ppf(ALPHA / 2, dof) < stat < stats.chi2.ppf(1 - ALPHA / 2, dof)


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"center": "median"}, "center must be None, 'private' or a mean vector; got 'median'"),
    ({"center": "private"}, "center='private' needs mean_multiplier"),
    ({"center": "private", "mean_multiplier": 1.0},
     r"the grid's top 1 is below \(c \+ r\)² = 4 for the centred rows' bound \(c = 1, r = 1\); build the grid "),
    ({"center": np.full(30, 0.1)}, r"the grid's top 1 is below \(c \+ r\)² = 2.39545 .* r = 0.547723\)"),
    ({"center": np.zeros(3)}, r"a given mean must be a finite vector of length 30; got shape \(3,\)"),
    ({"center": np.full(30, np.nan)}, "a given mean must be a finite vector"),
    ({"n_iter": 0}, "n_iter must be an integer >= 1; got 0"),
    ({"oversample": -1}, "oversample must be an integer >= 0; got -1"),
    ({"n_components": 31}, r"n_components must be in \[1, 30\]; got 31"),
])
def test_invalid_arguments_fail_before_any_draw(kwargs: dict[str, Any], message: str) -> None:
    noise = Recording(0)
    with pytest.raises(InvalidParameterError, match=message):
        _run(sp.csr_array((10, 30)), noise, **kwargs)
    assert noise.draws == [] and noise.released_keys == frozenset()
