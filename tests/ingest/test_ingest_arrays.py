"""In-memory matrices and .npz / .npy files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from ingest_helpers import RPP, assert_store_equals, make_matrix

from dppca_dask.errors import InvalidInputError
from dppca_dask.ingest import ingest


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["csr_array", "csr_matrix", "csc_matrix", "coo_matrix", "coo_array", "ndarray"])
def test_in_memory_round_trip(tmp_path: Path, matrix: sp.csr_array, kind: str, dtype: type) -> None:
    typed = matrix.astype(dtype)
    value = typed.toarray() if kind == "ndarray" else getattr(sp, kind)(typed)
    store = ingest(value, tmp_path / "m.zarr", rows_per_partition=RPP)
    assert store.layout == ("dense" if kind == "ndarray" else "csr")
    assert store.n_partitions == 6
    assert_store_equals(store, typed, dtype=dtype)


def test_single_column_and_empty_matrix(tmp_path: Path, rng: np.random.Generator) -> None:
    column = make_matrix(rng, n_rows=20, n_cols=1, density=0.5)
    assert_store_equals(ingest(column, tmp_path / "c.zarr"), column)
    empty = ingest(sp.csr_array((0, 4)), tmp_path / "e.zarr")
    assert empty.shape == (0, 4) and empty.n_partitions == 0
    assert ingest(np.zeros((3, 2)), tmp_path / "z.zarr").nnz == 0


def test_coo_duplicates_sum_or_reject(tmp_path: Path) -> None:
    coo = sp.coo_matrix(([1.0, 2.0, 5.0], ([0, 0, 1], [1, 1, 0])), shape=(2, 2))
    np.testing.assert_array_equal(ingest(coo, tmp_path / "a.zarr").to_scipy().toarray(), [[0, 3], [5, 0]])
    with pytest.raises(InvalidInputError, match=r"duplicate entry \(row 0, column 1\)"):
        ingest(coo, tmp_path / "b.zarr", on_duplicate="reject")


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_name_partition_and_row(tmp_path: Path, matrix: sp.csr_array, bad: float) -> None:
    broken = matrix.copy()
    broken.data[broken.indptr[33]] = bad
    with pytest.raises(InvalidInputError, match=rf"{bad!r} value at row 33 \(partition 3\)") as info:
        ingest(broken, tmp_path / "m.zarr", rows_per_partition=RPP)
    assert (info.value.partition, info.value.row) == (3, 33)
    dense = matrix.toarray()
    dense[44, 2] = bad
    with pytest.raises(InvalidInputError, match=rf"{bad!r} value at row 44 \(partition 4\)"):
        ingest(dense, tmp_path / "d.zarr", rows_per_partition=RPP)
    assert os.listdir(tmp_path) == []


def test_negative_and_out_of_range_indices(tmp_path: Path) -> None:
    negative = sp.csr_array((np.ones(1), np.array([-1]), np.array([0, 0, 1])), shape=(2, 3))
    with pytest.raises(InvalidInputError, match=r"column index -1 out of range \[0, 3\) at row 1"):
        ingest(negative, tmp_path / "n.zarr")
    beyond = sp.csr_array((np.ones(1), np.array([3]), np.array([0, 1])), shape=(1, 3))
    with pytest.raises(InvalidInputError, match=r"column index 3 out of range \[0, 3\) at row 0"):
        ingest(beyond, tmp_path / "b.zarr")


def test_float32_overflow_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"value 1e\+300 at row 1 \(partition 0\) \(column 0\) does not fit "
                                                r"in float32"):
        ingest(np.array([[1.0, 2.0], [1e300, 0.0]]), tmp_path / "o.zarr", dtype="float32")


def test_shape_and_type_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"expected a 2-D matrix; got shape \(3,\)"):
        ingest(np.ones(3), tmp_path / "a.zarr")
    with pytest.raises(InvalidInputError, match=r"values must be real numbers; got dtype complex128"):
        ingest(np.ones((2, 2), dtype=complex), tmp_path / "b.zarr")
    booleans = ingest(np.eye(2, dtype=bool), tmp_path / "c.zarr")
    assert booleans.dtype == "float64"
    np.testing.assert_array_equal(booleans.to_scipy().toarray(), np.eye(2))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_npz_and_npy_files(tmp_path: Path, matrix: sp.csr_array, dtype: type) -> None:
    typed = matrix.astype(dtype)
    sp.save_npz(tmp_path / "m.npz", sp.csr_matrix(typed))
    assert_store_equals(ingest(tmp_path / "m.npz", tmp_path / "a.zarr", rows_per_partition=RPP), typed, dtype=dtype)
    np.save(tmp_path / "m.npy", typed.toarray())
    store = ingest(tmp_path / "m.npy", tmp_path / "b.zarr", rows_per_partition=RPP)
    assert store.layout == "dense" and store.metadata["source"]["kind"] == "npy"
    assert_store_equals(store, typed, dtype=dtype)


def test_npz_of_coo_keeps_duplicates_for_reject(tmp_path: Path) -> None:
    sp.save_npz(tmp_path / "c.npz", sp.coo_matrix(([1.0, 2.0], ([0, 0], [1, 1])), shape=(1, 2)))
    with pytest.raises(InvalidInputError, match=r"duplicate entry \(row 0, column 1\)"):
        ingest(tmp_path / "c.npz", tmp_path / "s.zarr", on_duplicate="reject")


def test_bad_npz_and_npy_files(tmp_path: Path) -> None:
    np.savez(tmp_path / "dense.npz", a=np.ones(2))
    with pytest.raises(InvalidInputError, match=r"is not a scipy.sparse .npz file"):
        ingest(tmp_path / "dense.npz", tmp_path / "a.zarr")
    (tmp_path / "text.npy").write_text("not numpy")
    with pytest.raises(InvalidInputError, match=r"is not a numeric .npy file"):
        ingest(tmp_path / "text.npy", tmp_path / "b.zarr")
    np.save(tmp_path / "objects.npy", np.array([[1, "a"]], dtype=object))
    with pytest.raises(InvalidInputError, match=r"is not a numeric .npy file"):
        ingest(tmp_path / "objects.npy", tmp_path / "c.zarr")
