"""A store's column indices and row pointers have one index type, so that ``sc.pp.pca`` runs on the store opened with
``anndata.read_zarr`` (issue 36: int64 ``indptr`` with int32 ``indices`` failed with "Buffer dtype mismatch" in
scikit-learn's sparse kernels); past 2**31 - 1 entries the row pointers are widened, and stores of earlier releases
are still read."""

from __future__ import annotations

from pathlib import Path

import anndata
import numpy as np
import pytest
import scipy.sparse as sp
import zarr

from dppca_dask.errors import InvalidParameterError
from dppca_dask.storage import _format, append_partition, open_matrix, write_matrix


def _matrix(rng: np.random.Generator, rows: int = 60) -> sp.csr_array:
    return sp.csr_array(sp.random(rows, 8, density=0.4, random_state=rng, format="csr"))


def test_scanpy_pca_runs_on_an_ingested_store_read_by_anndata(tmp_path: Path, rng: np.random.Generator) -> None:
    sc = pytest.importorskip("scanpy")
    from dppca_dask.ingest import ingest

    store = ingest(_matrix(rng), tmp_path / "s.zarr", rows_per_partition=20, n_features=8)
    append_partition(store.path, _matrix(rng, 7), timestamp=1.8e9)
    adata = anndata.read_zarr(store.path)
    assert adata.X.indices.dtype == adata.X.indptr.dtype == np.int32
    sc.pp.pca(adata, n_comps=3)  # scikit-learn's sparse mean and variance kernels: one index type
    assert adata.obsm["X_pca"].shape == (67, 3)


def test_row_pointers_are_widened_past_the_32_bit_count(tmp_path: Path, rng: np.random.Generator,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = _matrix(rng)
    monkeypatch.setattr(_format, "INT32_MAX", int(matrix[:30].nnz))  # as if 2**31 - 1 entries were this many
    store = write_matrix(tmp_path / "wide.zarr", matrix, rows_per_partition=10)
    group = zarr.open_group(store.path, mode="r")
    assert group["X/indptr"].dtype == np.int64 and group["X/indices"].dtype == np.int32
    assert (open_matrix(store.path).to_scipy() != matrix).nnz == 0
    small = write_matrix(tmp_path / "small.zarr", matrix[:30], rows_per_partition=10)
    assert zarr.open_group(small.path, mode="r")["X/indptr"].dtype == np.int32
    with pytest.raises(InvalidParameterError, match=r"past \d+ stored entries, the most its 32-bit row pointers"):
        append_partition(small.path, matrix[30:32])
    assert open_matrix(small.path).n_rows == 30
    assert append_partition(store.path, matrix[30:32]).n_rows == 62  # 64-bit pointers: no limit


def test_a_store_of_an_earlier_release_with_64_bit_row_pointers_is_read_and_appended_to(
        tmp_path: Path, rng: np.random.Generator) -> None:
    matrix = _matrix(rng)
    store = write_matrix(tmp_path / "old.zarr", matrix, rows_per_partition=20)
    group = zarr.open_group(store.path, mode="r+", use_consolidated=False)
    indptr = group["X/indptr"]
    values, chunks = np.asarray(indptr[:], dtype=np.int64), indptr.chunks
    group["X"].create_array("indptr", shape=values.shape, dtype=np.int64, chunks=chunks, fill_value=-1,
                            overwrite=True)[:] = values
    zarr.consolidate_metadata(store.path)
    grown = append_partition(store.path, matrix[:5])
    expected = sp.vstack([matrix, matrix[:5]], format="csr")
    assert (grown.to_scipy() != expected).nnz == 0
    assert zarr.open_group(store.path, mode="r")["X/indptr"].dtype == np.int64
