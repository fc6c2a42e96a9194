"""Centred Analyze Gauss: noise-off runs equal scikit-learn's PCA on the clipped rows (components, explained
variance, ratios), with a private (noise-off) mean; the releases and events of a run."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from dp_accounting import GaussianDpEvent
from sklearn.decomposition import PCA

from dppca_dask.methods.adaptive_power.block_plan import BLOCK_POWER
from dppca_dask.methods.analyze_gauss.centred import CENTRED_GAUSS, centred_gauss_run, plan_centred_gauss
from dppca_dask.api import validate_parameters
from dppca_dask.coordinator import LocalExecutor, as_source, run_algorithm
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms.testing import AuditingNoiseSource, ZeroNoiseSource


def _rows(rng: np.random.Generator) -> np.ndarray:
    scales = np.array([3.0, 2.0, 1.2] + [0.3] * 17) / np.sqrt(20)
    rows = rng.standard_normal((700, 20)) * scales + 0.3
    rows[:5] *= 20.0
    return rows


def test_noise_off_equals_scikit_learn_pca_on_the_clipped_rows(rng: np.random.Generator) -> None:
    rows = _rows(rng)
    out = run_algorithm(LocalExecutor(as_source(sp.csr_array(rows))), centred_gauss_run(
        n_cols=20, n_components=3, row_norm_bound=1.0, noise_multiplier=1.0, noise=ZeroNoiseSource(),
        center="private", mean_multiplier=1.0, variance_multiplier=1.0))
    norms = np.linalg.norm(rows, axis=1)
    clipped = rows * np.minimum(1.0, 1.0 / norms)[:, None]
    pca = PCA(n_components=3, svd_solver="full").fit(clipped)
    for i in range(3):
        assert 1 - float(out.components[i] @ pca.components_[i]) ** 2 < 1e-10
    np.testing.assert_allclose(out.mean, pca.mean_, atol=1e-12)
    np.testing.assert_allclose(out.variance.explained_variance, pca.explained_variance_, rtol=1e-9)
    np.testing.assert_allclose(out.variance.explained_variance_ratio, pca.explained_variance_ratio_, rtol=1e-9)
    np.testing.assert_allclose(out.variance.singular_values, pca.singular_values_, rtol=1e-9)


def test_planned_events_are_emitted_and_inside_the_total(seed: int) -> None:
    from dppca_dask.accounting import epsilon_for

    params = validate_parameters(mechanism=BLOCK_POWER, epsilon=1.0, delta=1e-6, n_components=2, n_iter=3,
                                 row_norm_bound=1.0, svt_share=0.1, beta=0.05, grid_per_octave=4, grid_octaves=24,
                                 calibration="standard", max_dense_dim=100)
    plan = plan_centred_gauss(params, 20, center="private", auto_bound=True)
    rows = np.random.default_rng(seed).standard_normal((500, 20))
    out = run_algorithm(LocalExecutor(as_source(rows)), plan.make_run(AuditingNoiseSource(seed), None, None))
    assert list(out.events) == list(plan.planned_events)
    assert [type(e).__name__ for e in out.events] == ["EpsilonDeltaDpEvent"] + ["GaussianDpEvent"] * 3
    assert out.events[2] == GaussianDpEvent(plan.calibration["noise_multiplier"])
    assert epsilon_for(list(out.events), delta=1e-6) <= 1.0
    assert len(plan.replace_one[0](out.events)) == 4


def test_refusals_before_any_draw() -> None:
    noise = AuditingNoiseSource(0)
    for kwargs, message in (({"center": "median"}, "center must be None, 'private' or a mean vector"),
                            ({"center": "private"}, "center='private' needs mean_multiplier"),
                            ({"center": np.zeros(2)}, "a given mean must be a finite vector of length 20"),
                            ({"n_components": 21}, r"n_components must be in \[1, 20\]; got 21"),
                            ({"max_dense_dim": 10}, "d=20 exceeds max_dense_dim=10")):
        args = {"n_cols": 20, "n_components": 2, "row_norm_bound": 1.0, "noise_multiplier": 1.0, "noise": noise,
                **kwargs}
        with pytest.raises(InvalidParameterError, match=message):
            run_algorithm(LocalExecutor(as_source(np.zeros((5, 20)))), centred_gauss_run(**args))
    assert noise.records == []
    params = validate_parameters(mechanism=BLOCK_POWER, epsilon=1.0, delta=1e-6, n_components=2, n_iter=3,
                                 row_norm_bound=1.0, svt_share=0.1, beta=0.05, grid_per_octave=4, grid_octaves=24,
                                 calibration="standard", max_dense_dim=100)
    with pytest.raises(InvalidParameterError, match="shares must leave budget for the Gram matrix"):
        plan_centred_gauss(params, 20, center="private", mean_share=0.9, variance_share=0.1)
    with pytest.raises(InvalidParameterError, match=f"mechanism='{CENTRED_GAUSS}' has one release"):
        plan_centred_gauss(params, 20).make_run(noise, None, object())
