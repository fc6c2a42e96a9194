"""DPPCA in a scikit-learn model search: ``score`` makes ``GridSearchCV`` work without a scoring, and each fit
inside the search warns once that it is a release spending its budget."""

from __future__ import annotations

import warnings

import dask
import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV

from dppca_dask import DPPCA
from dppca_dask.errors import SearchSpendsBudgetWarning


@pytest.fixture
def in_process():
    with dask.config.set({"dppca_dask.client": "local"}):
        yield


def test_grid_search_scores_and_warns_once_per_fit(in_process) -> None:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((90, 5)) * np.array([3.0, 1.0, 0.2, 0.1, 0.1]) / 4
    search = GridSearchCV(DPPCA(epsilon=1.0, delta=1e-6, mechanism="analyze-gauss"), {"n_components": [1, 2]}, cv=3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        search.fit(X)
    spent = [w for w in caught if issubclass(w.category, SearchSpendsBudgetWarning)]
    assert len(spent) == 6  # 2 candidates × 3 folds; the refit is the release the caller asked for
    assert "epsilon=1, delta=1e-06" in str(spent[0].message)
    assert np.isfinite(search.best_score_) and search.best_score_ <= 0


def test_score_is_minus_the_reconstruction_error(in_process) -> None:
    X = np.random.default_rng(1).standard_normal((40, 4)) / 4
    with pytest.warns(Warning):
        model = DPPCA(4, epsilon=1.0, delta=1e-6, mechanism="exact", center=False).fit(X)
    assert model.score(X) == pytest.approx(0.0, abs=1e-10)  # every direction kept
    with pytest.warns(Warning):
        one = DPPCA(1, epsilon=1.0, delta=1e-6, mechanism="exact", center=False).fit(X)
    residual = X - (X @ one.components_.T) @ one.components_
    assert one.score(X) == pytest.approx(-np.mean(np.sum(residual**2, axis=1)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", SearchSpendsBudgetWarning)  # a fit outside a search does not warn
        DPPCA(1, epsilon=1.0, delta=1e-6, mechanism="analyze-gauss").fit(X)


def test_exact_centred_reproduces_sklearns_pca(in_process) -> None:
    """``DPPCA(mechanism="exact", center=True)``: the non-private baseline that matches ``sklearn.decomposition.PCA``
    (components up to sign, mean, explained variance and its ratio, singular values, the projection)."""
    from sklearn.decomposition import PCA

    rng = np.random.default_rng(4)
    X = rng.standard_normal((120, 6)) * np.array([4.0, 2.5, 1.5, 1.0, 0.5, 0.2]) + 3.0
    reference = PCA(3, svd_solver="full").fit(X)
    with pytest.warns(Warning):
        model = DPPCA(3, epsilon=1.0, delta=1e-6, mechanism="exact", center=True).fit(X)
    signs = np.sign(np.sum(model.components_ * reference.components_, axis=1))
    np.testing.assert_allclose(model.components_ * signs[:, None], reference.components_, atol=1e-9)
    np.testing.assert_allclose(model.mean_, reference.mean_, atol=1e-12)
    np.testing.assert_allclose(model.explained_variance_, reference.explained_variance_, rtol=1e-9)
    np.testing.assert_allclose(model.explained_variance_ratio_, reference.explained_variance_ratio_, rtol=1e-9)
    np.testing.assert_allclose(model.singular_values_, reference.singular_values_, rtol=1e-9)
    np.testing.assert_allclose(model.transform(X) * signs, reference.transform(X), atol=1e-8)
