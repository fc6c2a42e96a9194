"""AnnData interoperability: stores read by AnnData, AnnData stores opened and ingested (zarr v2/v3, h5ad)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from ingest_helpers import RPP, assert_store_equals

from dppca_dask.errors import InvalidInputError
from dppca_dask.ingest import MissingExtraError, ingest
from dppca_dask.storage import open_matrix

anndata = pytest.importorskip("anndata")


def make_adata(matrix: object) -> object:
    adata = anndata.AnnData(X=matrix)
    adata.obs_names = [f"cell-{i}" for i in range(adata.n_obs)]
    adata.var_names = [f"gene-{j}" for j in range(adata.n_vars)]
    return adata


@pytest.fixture(params=[2, 3], ids=["zarr-v2", "zarr-v3"])
def zarr_format(request: pytest.FixtureRequest) -> int:
    return int(request.param)


def write_zarr(adata: object, path: Path, zarr_format: int) -> Path:
    previous = anndata.settings.zarr_write_format
    anndata.settings.zarr_write_format = zarr_format
    try:
        adata.write_zarr(path)  # type: ignore[attr-defined]
    finally:
        anndata.settings.zarr_write_format = previous
    return path


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_anndata_reads_our_store(tmp_path: Path, matrix: sp.csr_array, dtype: type) -> None:
    store = ingest(matrix.astype(dtype), tmp_path / "m.zarr", rows_per_partition=RPP)
    x = anndata.io.read_elem(zarr.open_group(store.path, mode="r")["X"])
    assert x.dtype == dtype
    np.testing.assert_array_equal(sp.csr_array(x).toarray(), matrix.astype(dtype).toarray())


def test_anndata_zarr_store_opens_directly_and_ingests(tmp_path: Path, matrix: sp.csr_array,
                                                       zarr_format: int) -> None:
    path = write_zarr(make_adata(sp.csr_matrix(matrix)), tmp_path / "a.zarr", zarr_format)
    opened = open_matrix(path, rows_per_partition=RPP)
    assert opened.format_version is None and opened.n_partitions == 6
    assert_store_equals(opened, matrix)
    store = ingest(path, tmp_path / "s.zarr", rows_per_partition=RPP)
    assert store.format_version == 1 and store.partitions[1].nnz == 0
    assert_store_equals(store, matrix)
    group = zarr.open_group(store.path, mode="r")
    assert group["obs/obs_ids"][0] == "cell-0" and group["var/var_ids"][8] == "gene-8"
    assert store.metadata["id_maps"] == {"obs_ids": "obs index", "var_ids": "var index"}


def test_dense_anndata(tmp_path: Path, matrix: sp.csr_array, zarr_format: int) -> None:
    dense = matrix.toarray().astype(np.float32)
    path = write_zarr(make_adata(dense), tmp_path / "d.zarr", zarr_format)
    assert_store_equals(open_matrix(path), dense)
    store = ingest(path, tmp_path / "s.zarr", rows_per_partition=RPP)
    assert store.layout == "dense" and store.dtype == "float32"
    assert_store_equals(store, dense)


def test_csc_anndata_is_converted_by_column_blocks(tmp_path: Path, matrix: sp.csr_array, zarr_format: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from dppca_dask.ingest import adata

    monkeypatch.setattr(adata, "BLOCK_NNZ", 7)  # many column blocks
    path = write_zarr(make_adata(sp.csc_matrix(matrix)), tmp_path / "c.zarr", zarr_format)
    with pytest.raises(InvalidInputError, match="csc_matrix"):
        open_matrix(path)  # a column-compressed X cannot be partitioned by rows in place
    store = ingest(path, tmp_path / "s.zarr", rows_per_partition=RPP)
    assert store.n_partitions == 6
    assert_store_equals(store, matrix)
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".")]


@pytest.mark.parametrize("kind", ["csr", "csc", "dense"])
def test_h5ad(tmp_path: Path, matrix: sp.csr_array, kind: str) -> None:
    x = {"csr": sp.csr_matrix(matrix), "csc": sp.csc_matrix(matrix), "dense": matrix.toarray()}[kind]
    make_adata(x).write_h5ad(tmp_path / "a.h5ad")  # type: ignore[attr-defined]
    store = ingest(tmp_path / "a.h5ad", tmp_path / "s.zarr", rows_per_partition=RPP)
    assert_store_equals(store, matrix)
    assert zarr.open_group(store.path, mode="r")["obs/obs_ids"][59] == "cell-59"


def test_nan_in_anndata_names_partition_and_row(tmp_path: Path, matrix: sp.csr_array) -> None:
    bad = sp.csr_matrix(matrix)
    bad.data[bad.indptr[42]] = np.nan
    make_adata(bad).write_h5ad(tmp_path / "a.h5ad")  # type: ignore[attr-defined]
    with pytest.raises(InvalidInputError, match=r"nan value at row 42 \(partition 4\) of '.*a.h5ad'"):
        ingest(tmp_path / "a.h5ad", tmp_path / "s.zarr", rows_per_partition=RPP)
    assert os.listdir(tmp_path) == ["a.h5ad"]


def test_file_without_x(tmp_path: Path) -> None:
    adata = anndata.AnnData(obs={"a": [1, 2]})
    adata.write_h5ad(tmp_path / "empty.h5ad")
    with pytest.raises(InvalidInputError, match=r"has no 'X' matrix"):
        ingest(tmp_path / "empty.h5ad", tmp_path / "s.zarr")


def test_unsupported_encoding(tmp_path: Path) -> None:
    group = zarr.open_group(tmp_path / "odd.zarr", mode="w")
    group.create_group("X", attributes={"encoding-type": "awkward-array"})
    with pytest.raises(InvalidInputError, match=r"encoding-type 'awkward-array'; supported"):
        ingest(tmp_path / "odd.zarr", tmp_path / "s.zarr")


def test_not_an_hdf5_file(tmp_path: Path) -> None:
    (tmp_path / "fake.h5ad").write_text("hello")
    with pytest.raises(InvalidInputError, match=r"is not an HDF5 file"):
        ingest(tmp_path / "fake.h5ad", tmp_path / "s.zarr")


def test_not_a_zarr_group(tmp_path: Path) -> None:
    (tmp_path / "plain.zarr").mkdir()
    with pytest.raises(InvalidInputError, match=r"is not a zarr group"):
        ingest(tmp_path / "plain.zarr", tmp_path / "s.zarr")


def test_missing_anndata_names_the_extra(tmp_path: Path, matrix: sp.csr_array,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    make_adata(sp.csr_matrix(matrix)).write_h5ad(tmp_path / "a.h5ad")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "anndata", None)  # `import anndata` now raises ImportError
    with pytest.raises(MissingExtraError, match=r"pip install 'dppca-dask\[anndata\]'") as info:
        ingest(tmp_path / "a.h5ad", tmp_path / "s.zarr")
    assert info.value.exit_code == 2
    # a job's dry run checks a named layer with the ingest's own check, and fails the same way
    from dppca_dask.ingest.adata import check_layer

    with pytest.raises(MissingExtraError, match=r"pip install 'dppca-dask\[anndata\]'"):
        check_layer(tmp_path / "a.h5ad", "counts")
