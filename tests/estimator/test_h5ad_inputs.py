"""AnnData ``.h5ad`` files (and layers) read directly by :func:`dppca_dask.pca` and :class:`DPPCA`, in row blocks
from the file, on real files written by anndata."""

from __future__ import annotations

from pathlib import Path

import dask.config
import numpy as np
import pytest
import scipy.sparse as sp

import dppca_dask
from dppca_dask.errors import InferredSchemaWarning, InvalidInputError, InvalidParameterError, NotPrivateWarning

anndata = pytest.importorskip("anndata")


@pytest.fixture
def h5ad(tmp_path: Path, rng: np.random.Generator) -> tuple[str, sp.csr_array, np.ndarray]:
    """An .h5ad file with a sparse X and a dense layer 'scaled' (a different matrix)."""
    x = sp.random(120, 9, density=0.3, format="csr", random_state=np.random.RandomState(5), dtype=np.float64)
    x = sp.csr_array(x) * 0.3
    scaled = rng.uniform(-0.2, 0.2, (120, 9))
    path = tmp_path / "cells.h5ad"
    anndata.AnnData(X=sp.csr_matrix(x), layers={"scaled": scaled}).write_h5ad(path)
    return str(path), x, scaled


def _exact(matrix: np.ndarray) -> np.ndarray:
    return np.linalg.svd(matrix, full_matrices=False)[2][0]


def _sin2(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a / np.linalg.norm(a), b / np.linalg.norm(b)
    return float(1.0 - (a @ b) ** 2)


def test_pca_reads_an_h5ad_file_and_its_layers(h5ad: tuple[str, sp.csr_array, np.ndarray]) -> None:
    path, x, scaled = h5ad
    kwargs = {"epsilon": 1.0, "delta": 1e-6, "mechanism": "exact"}
    with pytest.warns(NotPrivateWarning), dask.config.set({"dppca_dask.cluster.use-active-client": False}):
        from_x = dppca_dask.pca(path, **kwargs)
        from_layer = dppca_dask.pca(path, layer="scaled", **kwargs)
    assert _sin2(from_x.components[0], _exact(x.toarray())) < 1e-12
    assert _sin2(from_layer.components[0], _exact(scaled)) < 1e-12
    assert from_x.provenance["input"]["kind"] == "dask.array" and from_x.provenance["executor"] == "in-process"


def test_a_private_run_on_an_h5ad_file_carries_the_inferred_width_caveat(
        h5ad: tuple[str, sp.csr_array, np.ndarray]) -> None:
    path, _, _ = h5ad
    with pytest.warns(InferredSchemaWarning, match="read from the AnnData file"):
        result = dppca_dask.pca(path, epsilon=1.0, delta=1e-6, n_iter=3)
    assert result.private and any("inferred" in c for c in result.privacy.caveats)


def test_bad_layers_are_refused_before_anything_runs(h5ad: tuple[str, sp.csr_array, np.ndarray]) -> None:
    path, x, _ = h5ad
    with pytest.raises(InvalidInputError, match="has no layer 'counts'; its layers: scaled"):
        dppca_dask.pca(path, epsilon=1.0, delta=1e-6, layer="counts")
    with pytest.raises(InvalidParameterError, match="layer='scaled' names a layer of an AnnData file"):
        dppca_dask.pca(x, epsilon=1.0, delta=1e-6, layer="scaled")
    with pytest.raises(InvalidParameterError, match="layer must be a non-empty string or None; got ''"):
        dppca_dask.pca(path, epsilon=1.0, delta=1e-6, layer="")


def test_the_estimator_fits_and_transforms_an_h5ad_file(h5ad: tuple[str, sp.csr_array, np.ndarray]) -> None:
    from dppca_dask.estimator import DPPCA

    path, _, scaled = h5ad
    model = DPPCA(1, mechanism="exact", layer="scaled")
    with pytest.warns(NotPrivateWarning):
        projected = model.fit_transform(path)
    assert model.n_features_in_ == 9
    assert _sin2(model.components_[0], _exact(scaled)) < 1e-12
    np.testing.assert_allclose(np.asarray(projected.compute()), model.transform(scaled), rtol=1e-12, atol=1e-12)
    with pytest.raises(InvalidParameterError, match="fit needs the file's path"):
        DPPCA(1, layer="scaled").fit(scaled)
