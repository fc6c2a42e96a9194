"""Round trips through the store (CSR and dense), AnnData interop, pickling, fingerprints, open options."""

from __future__ import annotations

import pickle
from pathlib import Path

import anndata
import numpy as np
import pytest
import scipy.sparse as sp
import zarr

from dppca_dask.errors import InvalidParameterError
from dppca_dask.storage import MatrixStore, open_matrix, row_norms_of, write_matrix


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_csr_round_trip(tmp_path: Path, sparse: sp.csr_array, dtype: type) -> None:
    store = write_matrix(tmp_path / "s.zarr", sparse.astype(dtype), rows_per_partition=10)
    assert (store.shape, store.nnz, store.n_partitions, store.dtype) == ((40, 6), sparse.nnz, 4, np.dtype(dtype).name)
    assert store.partitions[1].nnz == 0
    for part in store.partitions:
        block = store.read_partition(part.index)
        assert isinstance(block, sp.csr_array) and block.dtype == dtype
        expected = sparse[part.row_start : part.row_stop].astype(dtype)
        np.testing.assert_array_equal(block.toarray(), expected.toarray())
        np.testing.assert_allclose(store.read_row_norms(part.index), row_norms_of(expected), rtol=1e-6)
    assert store.read_partition(0, dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(store.to_scipy().toarray(), sparse.astype(dtype).toarray())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dense_round_trip(tmp_path: Path, sparse: sp.csr_array, dtype: type) -> None:
    dense = sparse.toarray().astype(dtype)
    store = write_matrix(tmp_path / "d.zarr", dense, rows_per_partition=10)
    assert store.layout == "dense" and store.nnz == np.count_nonzero(dense)
    for part in store.partitions:
        block = store.read_partition(part.index)
        assert isinstance(block, np.ndarray)
        np.testing.assert_array_equal(block, dense[part.row_start : part.row_stop])
        np.testing.assert_allclose(store.read_row_norms(part.index), np.linalg.norm(block, axis=1), rtol=1e-6)


def test_single_column_and_empty(tmp_path: Path) -> None:
    column = sp.csr_array(np.array([[1.0], [0.0], [-2.0]]))
    np.testing.assert_array_equal(write_matrix(tmp_path / "c.zarr", column).to_scipy().toarray(), column.toarray())
    empty = write_matrix(tmp_path / "e.zarr", sp.csr_array((0, 3)))
    assert empty.shape == (0, 3) and empty.n_partitions == 0 and empty.to_scipy().shape == (0, 3)


@pytest.mark.parametrize("layout", ["csr", "dense"])
def test_anndata_reads_the_store(tmp_path: Path, sparse: sp.csr_array, layout: str) -> None:
    matrix = sparse if layout == "csr" else sparse.toarray()
    store = write_matrix(tmp_path / "s.zarr", matrix, rows_per_partition=7)
    x = anndata.io.read_elem(zarr.open_group(store.path, mode="r")["X"])
    np.testing.assert_array_equal(sp.csr_array(x).toarray() if sp.issparse(x) else x, sparse.toarray())


def test_open_anndata_store_with_partitions(tmp_path: Path, sparse: sp.csr_array) -> None:
    anndata.AnnData(X=sp.csr_matrix(sparse)).write_zarr(tmp_path / "a.zarr")
    store = open_matrix(tmp_path / "a.zarr", rows_per_partition=15)
    assert store.format_version is None and [p.n_rows for p in store.partitions] == [15, 15, 10]
    np.testing.assert_array_equal(store.to_scipy().toarray(), sparse.toarray())
    np.testing.assert_allclose(store.read_row_norms(0), row_norms_of(sparse[:15]))
    assert store.fingerprint.startswith("anndata:")
    with pytest.raises(InvalidParameterError, match=r"rows_per_partition must be >= 1; got 0"):
        open_matrix(tmp_path / "a.zarr", rows_per_partition=0)
    native = write_matrix(tmp_path / "n.zarr", sparse)
    with pytest.raises(InvalidParameterError, match=r"rows_per_partition applies only to AnnData stores"):
        open_matrix(native.path, rows_per_partition=5)


def test_anndata_fingerprint_follows_the_real_path(tmp_path: Path, sparse: sp.csr_array) -> None:
    """A store without a ``store_id`` is fingerprinted by its real path: the same store through a link has one
    fingerprint (a job checkpoint resumes through either path), and a link moved to another store with metadata of
    the same modification times has another (arrays opened through the link before are not reused)."""
    import os
    import shutil

    anndata.AnnData(X=sp.csr_matrix(sparse)).write_zarr(tmp_path / "a.zarr")
    link = tmp_path / "current"
    link.symlink_to(tmp_path / "a.zarr", target_is_directory=True)
    through = open_matrix(link, rows_per_partition=15)
    assert through.fingerprint == open_matrix(tmp_path / "a.zarr", rows_per_partition=15).fingerprint
    anndata.AnnData(X=sp.csr_matrix(sparse * 2.0)).write_zarr(tmp_path / "b.zarr")
    for root, _, files in os.walk(tmp_path / "a.zarr"):  # b's metadata gets a's modification times
        for name in files:
            twin = os.path.join(tmp_path / "b.zarr", os.path.relpath(os.path.join(root, name), tmp_path / "a.zarr"))
            if os.path.exists(twin):
                shutil.copystat(os.path.join(root, name), twin)
    through.to_scipy()
    before = through.fingerprint
    link.unlink()
    link.symlink_to(tmp_path / "b.zarr", target_is_directory=True)
    moved = open_matrix(link, rows_per_partition=15)
    assert moved.fingerprint != before
    np.testing.assert_array_equal(moved.to_scipy().toarray(), 2.0 * sparse.toarray())


def test_pickled_store_reads_the_same(tmp_path: Path, sparse: sp.csr_array) -> None:
    store = write_matrix(tmp_path / "s.zarr", sparse, rows_per_partition=10)
    copy = pickle.loads(pickle.dumps(store))
    assert isinstance(copy, MatrixStore) and copy == store and copy.fingerprint == store.fingerprint
    np.testing.assert_array_equal(copy.read_partition(3).toarray(), store.read_partition(3).toarray())
    assert len(pickle.dumps(store)) < 10_000  # metadata only, never the data


def test_fingerprint_is_identity_not_content(tmp_path: Path, sparse: sp.csr_array) -> None:
    a = write_matrix(tmp_path / "a.zarr", sparse)
    b = write_matrix(tmp_path / "b.zarr", sparse)
    c = write_matrix(tmp_path / "c.zarr", sparse[:3])
    assert a.fingerprint != b.fingerprint  # same content, different stores
    for store in (a, b, c):  # only the random id and the append generation: no counts, no values
        store_id, generation = store.fingerprint.split(":")
        assert store_id == store.store_id and len(store_id) == 32 and generation == "0"


def test_overwritten_store_is_read_afresh(tmp_path: Path, sparse: sp.csr_array) -> None:
    first = write_matrix(tmp_path / "s.zarr", sparse[:10])
    first.to_scipy()  # arrays of the first store are now open in this process
    second = write_matrix(tmp_path / "s.zarr", sparse, rows_per_partition=40, overwrite=True)
    np.testing.assert_array_equal(second.to_scipy().toarray(), sparse.toarray())


def test_info(tmp_path: Path, sparse: sp.csr_array) -> None:
    info = write_matrix(tmp_path / "s.zarr", sparse, rows_per_partition=10, source={"kind": "test"}).info()
    assert {"n_rows": 40, "n_cols": 6, "nnz": sparse.nnz, "n_partitions": 4, "layout": "csr", "dtype": "float64",
            "format_version": 1, "generation": 0, "row_norms": True, "rows_per_partition_max": 10,
            "source": {"kind": "test"}, "timestamps": False}.items() <= info.items()
    assert info["size_on_disk"] > 0


def test_reading_limits(tmp_path: Path, sparse: sp.csr_array) -> None:
    store = write_matrix(tmp_path / "s.zarr", sparse, rows_per_partition=10)
    with pytest.raises(InvalidParameterError, match=r"partition index must be in \[0, 4\); got 4"):
        store.read_partition(4)
    with pytest.raises(InvalidParameterError, match=r"would need about .* GiB; got max_bytes=10"):
        store.to_scipy(max_bytes=10)
