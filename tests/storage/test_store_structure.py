"""Structure checks before scipy trusts a block (issue 9, item 1), canonical reads, norms, and the preflight pass."""

from __future__ import annotations

from pathlib import Path

import dask
import numpy as np
import pytest
import scipy.sparse as sp
import zarr

from dppca_dask.coordinator import LocalExecutor, as_source
from dppca_dask.coordinator.preflight import check_partition, preflight
from dppca_dask.coordinator.sources import PartitionData
from dppca_dask.errors import InvalidInputError, InvalidParameterError, StoreCorruptError
from dppca_dask.storage import open_matrix, write_matrix
from dppca_dask.storage.validate import (
    as_csr,
    canonical_csr,
    check_csr_arrays,
    check_sparse_structure,
    safe_norm,
    safe_row_norms,
    validate_csr_block,
)

INDPTR = np.array([0, 2, 3, 5])
INDICES = np.array([0, 2, 1, 0, 3])
DATA = np.ones(5)


@pytest.mark.parametrize(
    ("indptr", "indices", "data", "match"),
    [
        (INDPTR.astype(float), INDICES, DATA, r"'indptr' must be a 1-D integer array; got 1-D float64"),
        (INDPTR, INDICES.reshape(5, 1), DATA, r"'indices' must be a 1-D integer array; got 2-D"),
        (INDPTR, INDICES, DATA.reshape(5, 1), r"'data' must be 1-D; got 2-D"),
        (INDPTR[:-1], INDICES, DATA, r"'indptr' does not have one entry per row plus one"),
        (INDPTR, INDICES, DATA[:4], r"'indices' and 'data' have different lengths"),
        (INDPTR + 1, INDICES, DATA, r"'indptr' does not start at 0"),
        (np.array([0, 4, 3, 5]), INDICES, DATA, r"'indptr' decreases \(at row 11\)"),
        (np.array([0, 2, 3, 4]), INDICES, DATA, r"'indptr' does not end at the number of stored entries"),
        (INDPTR, np.array([0, 2, 1, 0, 4]), DATA, r"column index 4 out of range \[0, 4\) at row 12 \(partition 7\) "
                                                  r"of 'src'; fix the index or declare more columns"),
        (INDPTR, np.array([0, -1, 1, 0, 3]), DATA, r"column index -1 out of range \[0, 4\) at row 10"),
    ],
)
def test_check_csr_arrays(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, match: str) -> None:
    with pytest.raises(InvalidInputError, match=match):
        check_csr_arrays(indptr, indices, data, n_rows=3, n_cols=4, source="src", partition=7, first_row=10)


def test_check_csr_arrays_for_stores_and_columns() -> None:
    with pytest.raises(StoreCorruptError, match=r"re-ingest the store from its source"):
        check_csr_arrays(np.array([0, 4, 3, 5]), INDICES, DATA, n_rows=3, n_cols=4, error=StoreCorruptError)
    with pytest.raises(InvalidInputError, match=r"row index 4 out of range \[0, 4\) at column 2 of 'f'"):
        check_csr_arrays(INDPTR, np.array([0, 2, 1, 0, 4]), DATA, n_rows=3, n_cols=4, source="f", axis="column")


def test_every_sparse_format_is_checked_before_conversion() -> None:
    csr = sp.csr_matrix(np.eye(4))
    csr.indptr[1] = 3  # decreasing at row 1: scipy's sort_indices would corrupt memory
    with pytest.raises(InvalidInputError, match=r"'indptr' decreases \(at row 1\)"):
        as_csr(csr)
    with pytest.raises(InvalidInputError, match=r"'indptr' decreases"):
        validate_csr_block(csr, n_cols=4)
    csc = sp.csc_matrix(np.eye(4))
    csc.indices[2] = 9
    with pytest.raises(InvalidInputError, match=r"row index 9 out of range \[0, 4\) at column 2"):
        as_csr(csc)
    bsr = sp.bsr_matrix(np.eye(4), blocksize=(2, 2))
    bsr.indptr[1] = 5
    with pytest.raises(InvalidInputError, match=r"'indptr'"):
        check_sparse_structure(bsr)
    bad_blocks = sp.bsr_matrix(np.eye(4), blocksize=(2, 2))
    bad_blocks.data = np.ones((2, 3, 2))
    with pytest.raises(InvalidInputError, match=r"malformed BSR block"):
        check_sparse_structure(bad_blocks)
    coo = sp.coo_matrix(np.eye(4))
    coo.col[1] = 7
    with pytest.raises(InvalidInputError, match=r"column index 7 out of range \[0, 4\) in entry 1"):
        as_csr(coo)
    coo = sp.coo_matrix(np.eye(4))
    coo.row = coo.row[:2]
    with pytest.raises(InvalidInputError, match=r"malformed COO block"):
        check_sparse_structure(coo)
    with pytest.raises(InvalidInputError, match=r"expected a 2-D matrix"):
        check_sparse_structure(sp.coo_array(np.ones(3)))
    check_sparse_structure(sp.dok_matrix(np.eye(3)))  # no raw pointers: nothing to check


def test_pca_on_a_malformed_scipy_matrix_is_a_clean_error() -> None:
    import dppca_dask

    m = sp.random(50, 10, density=0.3, format="csr", random_state=0)
    m.indptr[10] = m.indptr[20] + 5
    with pytest.raises(InvalidInputError, match=r"'indptr' decreases \(at row 10\)"):
        dppca_dask.pca(m, epsilon=1.0, delta=1e-6, client="local")


def test_canonical_csr_and_safe_norms() -> None:
    dup = sp.csr_array((np.array([3.0, 4.0, 1.0]), np.array([2, 2, 0]), np.array([0, 2, 3])), shape=(2, 3))
    canon = canonical_csr(dup)
    assert canon.has_canonical_format and canon.nnz == 2
    np.testing.assert_array_equal(canon.toarray(), [[0, 0, 7], [1, 0, 0]])
    np.testing.assert_allclose(safe_row_norms(canon), [7, 1])
    assert canonical_csr(canon) is canon
    huge = sp.csr_array(np.array([[3e200, 4e200], [0, 0], [1e-200, 0]]))
    np.testing.assert_allclose(safe_row_norms(huge), [5e200, 0, 1e-200])
    np.testing.assert_allclose(safe_row_norms(np.array([[3e200, 4e200], [0.0, 0.0]])), [5e200, 0])
    assert safe_row_norms(np.array([[1.5e308, 1.5e308, 1.5e308]]))[0] == np.inf
    np.testing.assert_array_equal(safe_row_norms(sp.csr_array((3, 2))), [0, 0, 0])
    # The last non-empty row followed by empty rows keeps all its entries (its norm is not cut short).
    tail = sp.csr_array(np.array([[3.0, 4.0], [0, 0], [6.0, 8.0], [0, 0], [0, 0]]))
    np.testing.assert_allclose(safe_row_norms(tail), [5, 0, 10, 0, 0])
    np.testing.assert_allclose(safe_row_norms(sp.csr_array(np.array([[0, 0], [3e200, 4e200], [0, 0]]))), [0, 5e200, 0])


def test_safe_norm_of_any_array() -> None:
    # squares overflow (1e400), the norm does not
    assert safe_norm(np.array([3e200, -4e200])) == pytest.approx(5e200, rel=1e-15)
    with np.errstate(over="ignore"):
        assert np.linalg.norm(np.array([3e200, -4e200])) == np.inf
    assert safe_norm(np.array([3e-200, 4e-200])) == pytest.approx(5e-200, rel=1e-15)  # squares underflow to 0
    assert safe_norm(np.zeros(4)) == 0.0 and safe_norm(np.zeros(0)) == 0.0 and safe_norm(np.zeros((0, 3))) == 0.0
    assert isinstance(safe_norm(np.zeros(0)), float)
    # a matrix and a tensor get their Frobenius norm
    assert safe_norm(np.array([[3e200, 0.0], [0.0, 4e200]])) == pytest.approx(5e200, rel=1e-15)
    cube = np.arange(27, dtype=np.float64).reshape(3, 3, 3) - 13.0
    assert safe_norm(cube) == pytest.approx(float(np.sqrt(np.sum(cube**2))), rel=1e-15)
    for x in (np.random.default_rng(0).standard_normal(50), np.array([-2.5]), np.array([1.0, 2.0, 2.0])):
        assert safe_norm(x) == pytest.approx(float(np.linalg.norm(x)), rel=1e-15)
    assert safe_norm(np.array([1.0, 2.0, 2.0])) == 3.0
    # the norm itself beyond float64: inf; non-finite entries give a non-finite norm, never a number to release
    assert safe_norm(np.full(3, 1.5e308)) == np.inf
    assert safe_norm(np.array([1.0, np.inf])) == np.inf and safe_norm(np.array([-np.inf, 0.0])) == np.inf
    assert np.isnan(safe_norm(np.array([1.0, np.nan]))) and np.isnan(safe_norm(np.array([np.inf, np.nan])))


def test_reads_are_canonical_and_norms_come_from_the_values(tmp_path: Path) -> None:
    store = write_matrix(tmp_path / "s.zarr", sp.csr_array(np.array([[1.0, 2.0], [3.0, 0.0]])))
    group = zarr.open_group(store.path, mode="r+")
    group["X/indices"][1] = 0  # row 0 now holds two entries in column 0
    group["obs/row_norms"][1] = np.inf
    block = open_matrix(store.path).read_partition(0)
    assert block.has_canonical_format
    np.testing.assert_array_equal(block.toarray(), [[3.0, 0.0], [3.0, 0.0]])
    np.testing.assert_array_equal(open_matrix(store.path).read_checked_norms(0, block), [3.0, 3.0])
    with pytest.raises(StoreCorruptError, match=r"stored row norm of row 1 \(partition 0\) .* is not finite"):
        open_matrix(store.path).read_row_norms(0)


def test_preflight_everywhere(tmp_path: Path, local_client) -> None:
    from dppca_dask.coordinator import Coordinator

    good = write_matrix(tmp_path / "g.zarr", sp.random(30, 4, density=0.5, format="csr", random_state=1),
                        rows_per_partition=10)
    assert preflight(good.path) == 3
    assert preflight(good, "local") == 3
    assert preflight(as_source(good), local_client) == 3
    with Coordinator(local_client, as_source(good), persist=True) as coordinator:
        assert preflight(coordinator.source, coordinator) == 3
    with Coordinator(local_client, as_source(good), persist=False) as coordinator:
        assert preflight(coordinator.source, coordinator) == 3
    with dask.config.set({"dppca_dask.in-memory-partitions": 2}):  # in-memory inputs: a configured count
        assert preflight(np.ones((3, 2)), LocalExecutor(as_source(np.ones((3, 2))))) == 2
    import dask.array as da

    assert preflight(da.ones((8, 2), chunks=(4, 2)), local_client) == 2
    zarr.open_group(good.path, mode="r+")["X/data"][good.nnz - 1] = np.nan
    for target in (None, local_client):
        with pytest.raises(StoreCorruptError, match=r"partition 2 of store .* non-finite value at row 2\d"):
            preflight(good.path, target)
    with pytest.raises(InvalidParameterError, match=r"executor_or_coordinator must be .* got int"):
        preflight(good.path, 3)


def test_check_partition_refuses_what_kernels_cannot_take() -> None:
    unsorted = sp.csr_array((np.ones(2), np.array([1, 0]), np.array([0, 2])), shape=(1, 2))
    unsorted.has_canonical_format = False
    with pytest.raises(InvalidInputError, match=r"partition 4 is not canonical CSR"):
        check_partition(PartitionData(4, unsorted, np.ones(1)))
    with pytest.raises(InvalidInputError, match=r"partition 0 holds a NaN or infinite value"):
        check_partition(PartitionData(0, np.array([[np.nan, 1.0]]), np.ones(1)))
    with pytest.raises(InvalidInputError, match=r"partition 1 has row norms that are not finite"):
        check_partition(PartitionData(1, np.ones((2, 2)), np.array([1.0, np.inf])))
    with pytest.raises(InvalidInputError, match=r"do not match its rows"):
        check_partition(PartitionData(1, np.ones((2, 2)), np.ones(3)))
    check_partition(PartitionData(2, sp.csr_array(np.eye(2)), np.ones(2)))
    # sorted, no duplicates, but a column index beyond the block's width, or a negative one, or row pointers out of
    # order: the compiled loops would read and write out of bounds (scipy's canonical-format flag does not see it)
    for indices, indptr in (([0, 5], [0, 2]), ([-1, 1], [0, 2]), ([0, 1], [0, 3])):
        bad = sp.csr_array((np.ones(2), np.array([0, 1]), np.array([0, 2])), shape=(1, 3))
        bad.indices, bad.indptr = np.array(indices, dtype=np.int32), np.array(indptr, dtype=np.int32)
        with pytest.raises(InvalidInputError, match=r"partition 5 is not canonical CSR \(unsorted, duplicate or out"):
            check_partition(PartitionData(5, bad, np.ones(1)))
