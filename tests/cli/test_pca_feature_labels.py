"""``dppca-dask pca`` labels components with the store's column ids when they are public (a declared schema)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask import ingest
from dppca_dask.cli import main
from dppca_dask.cli.pca import feature_labels

anndata = pytest.importorskip("anndata")


@pytest.fixture
def h5ad(tmp_path: Path, rng: np.random.Generator) -> Path:
    matrix = sp.random(40, 6, density=0.5, format="csr", random_state=rng)
    matrix[:, 4] = 3.0  # the top component points at gene-4
    adata = anndata.AnnData(X=sp.csr_matrix(matrix))
    adata.var_names = [f"gene-{j}" for j in range(6)]
    adata.write_h5ad(tmp_path / "a.h5ad")
    return tmp_path / "a.h5ad"


def _pca(store: Path, *extra: str) -> list[str]:
    return ["pca", str(store), "--epsilon", "1", "--delta", "1e-6", "--mechanism", "exact", "--scheduler", "local",
            *extra]


def test_declared_columns_label_components_in_text_and_json(tmp_path: Path, h5ad: Path, capsys) -> None:
    store = ingest(h5ad, tmp_path / "s.zarr", n_features=6)
    assert feature_labels(store.path) == ([f"gene-{j}" for j in range(6)], None)
    assert main(_pca(tmp_path / "s.zarr")) == 0
    out = capsys.readouterr().out
    assert "component 0: largest coordinates [gene-4] " in out and "withheld" not in out
    assert main(_pca(tmp_path / "s.zarr", "--json")) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["feature_names"] == [f"gene-{j}" for j in range(6)]
    assert int(np.argmax(np.abs(payload["components"][0]))) == 4


def test_inferred_columns_are_not_used_as_labels(tmp_path: Path, h5ad: Path, capsys) -> None:
    ingest(h5ad, tmp_path / "s.zarr")
    assert main(_pca(tmp_path / "s.zarr")) == 0
    out = capsys.readouterr().out
    assert "component 0: largest coordinates [4] " in out and "gene-" not in out
    assert "column labels (var_ids) withheld: the store's columns were inferred from the data" in out
    assert main(_pca(tmp_path / "s.zarr", "--json")) == 0
    assert "feature_names" not in json.loads(capsys.readouterr().out)


def test_stores_without_ids_have_no_labels(tmp_path: Path, rng: np.random.Generator) -> None:
    store = ingest(sp.random(10, 3, density=0.5, format="csr", random_state=rng), tmp_path / "s.zarr")
    assert feature_labels(store) == (None, None)
    assert feature_labels(tmp_path / "missing.zarr") == (None, None)
