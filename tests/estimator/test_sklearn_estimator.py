"""The scikit-learn estimator: scikit-learn's own estimator checks, clone/pickle, stores, Dask, feature names."""

from __future__ import annotations

import inspect
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp

pytest.importorskip("sklearn")
import dask  # noqa: E402
import dask.array as da  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.exceptions import NotFittedError  # noqa: E402
from sklearn.utils.estimator_checks import check_estimator  # noqa: E402

from dppca_dask import ingest, pca  # noqa: E402
from dppca_dask.errors import InvalidInputError, NotPrivateWarning  # noqa: E402
from dppca_dask.estimator import DPPCA, FIT_ARGUMENTS, expected_failed_checks  # noqa: E402


@pytest.fixture
def in_process():
    """Fits without a client run in this process (no cluster): fast enough for scikit-learn's ~45 checks."""
    with dask.config.set({"dppca_dask.client": "local", "scheduler": "sync"}):  # also lazy results: no cluster
        yield


@pytest.fixture
def rows(seed) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(60, 6)) * np.array([3.0, 1.0, 0.5, 0.3, 0.2, 0.1])


def _run_checks(estimator: DPPCA) -> list[dict]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotPrivateWarning)
        return check_estimator(estimator, expected_failed_checks=expected_failed_checks(estimator), on_fail=None)


def test_check_estimator_private(in_process) -> None:
    results = _run_checks(DPPCA(mechanism="analyze-gauss"))
    failed = [(r["check_name"], r["exception"]) for r in results if r["status"] == "failed"]
    assert failed == []
    xfailed = {r["check_name"] for r in results if r["status"] == "xfail"}
    assert xfailed == {"check_fit_idempotent"}  # the one declared exception: fresh noise on every fit
    assert sum(r["status"] == "passed" for r in results) >= 35


def test_check_estimator_seeded_has_no_exceptions(in_process) -> None:
    estimator = DPPCA(mechanism="analyze-gauss", seed=0)
    assert expected_failed_checks(estimator) == {}
    results = _run_checks(estimator)
    assert [r["check_name"] for r in results if r["status"] in ("failed", "xfail")] == []


def test_every_pca_parameter_is_a_hyperparameter_with_its_default() -> None:
    run = inspect.signature(pca).parameters
    model = inspect.signature(DPPCA).parameters
    expected = {name for name in run if name != "data"} - set(FIT_ARGUMENTS)
    assert set(model) == expected
    # pca() requires a budget (the estimator defaults to (1, 1e-6)), and the estimator centres privately by default
    # as scikit-learn's PCA centres (pca() keeps center=False so that library runs keep their meaning).
    for name in expected - {"epsilon", "delta", "center"}:
        assert model[name].default == run[name].default, name
    assert model["center"].default is None
    assert DPPCA()._center() == "private" and DPPCA(mechanism="exact")._center() is False
    assert set(FIT_ARGUMENTS) <= set(inspect.signature(DPPCA.fit).parameters)


def test_clone_and_pickle_after_a_fit_on_a_client(local_client, rows) -> None:
    model = DPPCA(2, epsilon=2.0, mechanism="analyze-gauss", progress=False)
    model.fit(rows, client=local_client)
    assert model.privacy_report_.private and model.n_components_ == 2
    assert not any(value is local_client for value in vars(model).values())
    copy = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(copy.transform(rows), model.transform(rows))
    fresh = clone(model)
    assert fresh.get_params() == model.get_params() and not hasattr(fresh, "components_")
    assert "epsilon=2.0" in repr(model) and "client" not in repr(model)


def test_fit_transform_on_a_store_is_lazy_and_matches_memory(tmp_path, rows, in_process) -> None:
    store = ingest(sp.csr_array(rows), tmp_path / "rows.zarr", rows_per_partition=16)
    model = DPPCA(2, mechanism="exact")
    with pytest.warns(NotPrivateWarning):
        projected = model.fit_transform(str(tmp_path / "rows.zarr"))
    assert isinstance(projected, da.Array) and projected.shape == (60, 2) and projected.numblocks[0] == 4
    np.testing.assert_allclose(projected.compute(scheduler="sync"), rows @ model.components_.T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(model.transform(store).compute(scheduler="sync"), rows @ model.components_.T, rtol=1e-12, atol=1e-12)
    assert model.n_features_in_ == 6


def test_store_with_other_width_is_refused(tmp_path, rows, in_process) -> None:
    ingest(sp.csr_array(rows[:, :4]), tmp_path / "narrow.zarr")
    model = DPPCA(mechanism="exact")
    with pytest.warns(NotPrivateWarning):
        model.fit(rows)
    with pytest.raises(InvalidInputError, match="has 4 features, but DPPCA is expecting 6 features"):
        model.transform(tmp_path / "narrow.zarr")


def test_transform_of_a_dask_array_is_lazy(rows, in_process) -> None:
    model = DPPCA(2, mechanism="exact")
    with pytest.warns(NotPrivateWarning):
        model.fit(rows)
    calls = []

    def counted(block):
        calls.append(block.shape)
        return block

    lazy = da.from_array(rows, chunks=(20, 3)).map_blocks(counted, dtype=rows.dtype, meta=np.empty((0, 0)))
    projected = model.transform(lazy)
    assert isinstance(projected, da.Array) and calls == [] and projected.shape == (60, 2)
    np.testing.assert_allclose(projected.compute(scheduler="sync"), rows @ model.components_.T, atol=1e-12)
    bad = rows.copy()
    bad[7, 2] = np.nan
    with pytest.raises(InvalidInputError, match="NaN or infinity"):
        model.transform(da.from_array(bad, chunks=(20, 6))).compute(scheduler="sync")
    with pytest.raises(InvalidInputError, match="Expected a 2D dask array"):
        model.transform(da.zeros(6))
    with pytest.raises(InvalidInputError, match="has 5 features, but DPPCA is expecting 6"):
        model.transform(da.zeros((4, 5)))
    with pytest.raises(InvalidInputError, match="not numeric"):
        model.transform(da.from_array(np.full((4, 6), "a")))


def test_fit_on_a_dask_array(rows, in_process) -> None:
    model = DPPCA(2, mechanism="exact")
    with pytest.warns(NotPrivateWarning):
        model.fit(da.from_array(rows, chunks=(20, 6)))
    reference = DPPCA(2, mechanism="exact")
    with pytest.warns(NotPrivateWarning):
        reference.fit(rows)
    np.testing.assert_allclose(np.abs(model.components_ @ reference.components_.T), np.eye(2), atol=1e-9)
    with pytest.raises(InvalidInputError, match="Expected a 2D dask array"):
        model.fit(da.zeros(6))


def test_bad_input_is_refused_with_scikit_learn_wording_before_any_release(rows, in_process) -> None:
    model = DPPCA(mechanism="analyze-gauss")
    with pytest.raises(InvalidInputError, match=r"Found array with 0 sample\(s\)"):
        model.fit(np.empty((0, 6)))
    with pytest.raises(InvalidInputError, match="Expected 2D array, got 1D array"):
        model.fit(rows[:, 0])
    with pytest.raises(InvalidInputError, match="Complex data not supported"):
        model.fit(rows.astype(complex))
    with pytest.raises(InvalidInputError, match="Input X contains NaN"):
        model.fit(np.where(rows > 2, np.nan, rows))
    assert not hasattr(model, "components_")
    model.fit(rows.tolist())  # lists are fine
    with pytest.raises(InvalidInputError, match="Input X contains NaN"):
        model.transform(np.full((2, 6), np.nan))
    with pytest.raises((InvalidInputError, TypeError), match="(could not convert|dtype object|argument must be)"):
        model.transform(np.array([["a"] * 6], dtype=object))
    with pytest.raises(InvalidInputError, match="has 3 columns, but DPPCA has 1 components"):
        model.inverse_transform(np.zeros((2, 3)))
    with pytest.raises(InvalidInputError, match="Expected 2D array"):
        model.inverse_transform(np.zeros(3))


def test_inverse_transform_and_feature_names_out(rows, in_process) -> None:
    model = DPPCA(6, mechanism="exact")
    with pytest.raises(NotFittedError):
        model.inverse_transform(np.zeros((1, 6)))
    with pytest.warns(NotPrivateWarning):
        projected = model.fit_transform(rows)
    np.testing.assert_allclose(model.inverse_transform(projected), rows, atol=1e-9)  # all components: lossless
    assert list(model.get_feature_names_out()) == [f"dppca{i}" for i in range(6)]


def test_dataframe_input_names_and_pandas_output(rows, in_process) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(rows, columns=[f"gene{i}" for i in range(6)])
    model = DPPCA(2, mechanism="analyze-gauss").set_output(transform="pandas")
    out = model.fit_transform(frame)
    assert list(model.feature_names_in_) == list(frame.columns)
    assert isinstance(out, pd.DataFrame) and list(out.columns) == ["dppca0", "dppca1"]
    assert list(out.index) == list(frame.index)
    with pytest.raises(ValueError, match="feature names"):
        model.transform(frame.rename(columns={"gene0": "other"}))


def test_released_statistics_are_mapped_when_present(rows, in_process, monkeypatch) -> None:
    import dppca_dask.api._pca as api

    released = {"mean": np.full(6, 0.5), "explained_variance": np.array([4.0, 1.0]),
                "explained_variance_ratio": np.array([0.6, 0.15]), "singular_values": np.array([9.0, 4.0])}
    real = api.pca

    class WithStatistics:
        def __init__(self, result):
            self._result = result

        def __getattr__(self, name):
            return released[name] if name in released else getattr(self._result, name)

    monkeypatch.setattr(api, "pca", lambda *a, **k: WithStatistics(real(*a, **k)))
    model = DPPCA(2, mechanism="analyze-gauss").fit(rows)
    for name, value in released.items():
        np.testing.assert_array_equal(getattr(model, f"{name}_"), value)
    centred = (rows - 0.5) @ model.components_.T
    np.testing.assert_allclose(model.transform(rows), centred, atol=1e-12)
    np.testing.assert_allclose(model.inverse_transform(centred), centred @ model.components_ + 0.5, atol=1e-12)
    monkeypatch.setattr(api, "pca", real)
    model.set_params(center=False).fit(rows)  # a release without them removes the previous ones
    assert [name for name in released if hasattr(model, f"{name}_")] == []


def test_grid_search_with_a_scorer_of_ones_own(rows, in_process) -> None:
    from sklearn.model_selection import GridSearchCV

    def reconstruction(estimator, X, y=None):
        return -float(np.linalg.norm(X - estimator.inverse_transform(estimator.transform(X))))

    search = GridSearchCV(DPPCA(mechanism="analyze-gauss", epsilon=50.0), {"n_components": [1, 5]},
                          scoring=reconstruction, cv=2)
    search.fit(rows)  # 2 settings × 2 folds + the refit: 5 releases, each spending (ε, δ) on the private rows
    assert search.best_params_ == {"n_components": 5} and search.best_estimator_.n_components_ == 5
    assert len(search.cv_results_["params"]) == 2


def test_fit_uses_the_configured_then_the_active_client(local_client, rows, monkeypatch) -> None:
    import dppca_dask.api._pca as api

    seen = []
    real = api.pca

    def spy(*args, **kwargs):
        seen.append(kwargs["client"])
        return real(*args, **{**kwargs, "client": "local"})

    monkeypatch.setattr(api, "pca", spy)
    model = DPPCA(mechanism="analyze-gauss")
    model.fit(rows)
    with dask.config.set({"dppca_dask.client": "local"}):
        model.fit(rows)
    model.fit(rows, client="tcp://127.0.0.1:1")
    assert seen[0] is local_client and seen[1:] == ["local", "tcp://127.0.0.1:1"]
