"""Neighbours through the store read path (issue 8, item 1): what the kernels multiply is what they clip.

An AnnData store opened directly may hold k duplicate (row, column) entries: the products add them up, so the row
really is ``k·v``; clipping with the norm of the unsummed entries (``√k·|v|``) let a kept row move the pre-noise value
by ``√k`` times the sensitivity. A dppca_dask store whose ``X`` was edited after ingest keeps stale ``row_norms``:
clipping with them let an edited row through unclipped. Both run here through a real LocalCluster, with an auditing
noise source per neighbour (same seed, so both draw the same noise) and the neighbouring-datasets harness.

Analyze Gauss releases the Gram matrix of the clipped rows with sensitivity C² (C = row_norm_bound): deterministic
given the data, so these checks have no false-failure rate. Every mechanism's kernels take the rows and norms from
the same loader, so what holds here for the Gram matrix holds for the power steps' clipping too.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr

import dppca_dask
from dppca_dask.errors import InvalidInputError, StoreCorruptError
from dppca_dask.storage import open_matrix, write_matrix
from privacy_harness import assert_within_sensitivity


def write_anndata_csr(path: Path, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, n_cols: int) -> str:
    """An AnnData zarr store with ``X`` written exactly as given (duplicates and unsorted indices kept)."""
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    root.attrs.update({"encoding-type": "anndata", "encoding-version": "0.1.0"})
    x = root.create_group("X", attributes={"encoding-type": "csr_matrix", "encoding-version": "0.1.0",
                                           "shape": [len(indptr) - 1, n_cols]})
    for name, values in (("data", data), ("indices", indices), ("indptr", indptr)):
        arr = x.create_array(name, shape=values.shape, dtype=values.dtype, chunks=(max(values.size, 1),))
        if values.size:
            arr[:] = values
    return str(path)


def base_rows(rng: np.random.Generator, n_rows: int = 60, n_cols: int = 8) -> sp.csr_array:
    """Rows of norm < 1 (never clipped), ~half the entries nonzero."""
    dense = rng.uniform(-0.3, 0.3, (n_rows, n_cols)) * (rng.random((n_rows, n_cols)) < 0.5)
    return sp.csr_array(dense)


def with_duplicated_row(base: sp.csr_array, k: int, column: int, value: float) -> tuple[np.ndarray, ...]:
    """CSR arrays of ``base`` plus one last row holding ``k`` entries (``column``, ``value``)."""
    data = np.concatenate([base.data, np.full(k, value)])
    indices = np.concatenate([base.indices, np.full(k, column)]).astype(np.int32)
    indptr = np.concatenate([base.indptr, [base.nnz + k]]).astype(np.int64)
    return data, indices, indptr


@pytest.mark.parametrize("k", [4, 16, 100])
def test_duplicate_entries_in_an_anndata_store_move_the_gram_matrix_by_at_most_the_bound(
    tmp_path: Path, rng: np.random.Generator, auditing_pair, local_client, k: int
) -> None:
    base = base_rows(rng)
    n_cols = base.shape[1]
    with_row = write_anndata_csr(tmp_path / "d.zarr", *with_duplicated_row(base, k, 3, 1.0), n_cols)
    without = write_anndata_csr(tmp_path / "d2.zarr", base.data, base.indices.astype(np.int32),
                                base.indptr.astype(np.int64), n_cols)
    # The read path sums the duplicates: the row is (0, 0, 0, k, 0, ...), canonical.
    store = open_matrix(with_row)
    last = store.read_partition(store.n_partitions - 1)
    assert last.has_canonical_format and last[[last.shape[0] - 1]].toarray()[0, 3] == k
    a, b = auditing_pair()
    for path, noise in ((with_row, a), (without, b)):
        dppca_dask.pca(path, epsilon=1.0, delta=1e-6, mechanism="analyze-gauss", row_norm_bound=1.0,
                       client=local_client, noise=noise)
    ratios = assert_within_sensitivity(a.records, b.records)
    # The clipped row is e_3 exactly, so the Gram matrix moves by exactly C² = 1 (before the fix: k).
    assert ratios == pytest.approx([1.0], rel=1e-9)


def test_stale_row_norms_of_an_edited_store_do_not_defeat_clipping(
    tmp_path: Path, rng: np.random.Generator, auditing_pair, local_client
) -> None:
    base = base_rows(rng)
    extra = sp.csr_array(np.array([[0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]))
    edited = write_matrix(tmp_path / "e.zarr", sp.vstack([base, extra], format="csr"), rows_per_partition=16)
    neighbour = write_matrix(tmp_path / "n.zarr", base, rows_per_partition=16)
    # Edit the last stored value (the extra row's 0.5) to 50 without touching row_norms, which still say 0.5.
    x_data = zarr.open_group(edited.path, mode="r+")["X/data"]
    x_data[edited.nnz - 1] = 50.0
    stored = open_matrix(edited.path).read_row_norms(edited.n_partitions - 1)
    assert stored[-1] == pytest.approx(0.5)
    a, b = auditing_pair()
    for path, noise in ((edited.path, a), (neighbour.path, b)):
        dppca_dask.pca(path, epsilon=1.0, delta=1e-6, mechanism="analyze-gauss", row_norm_bound=1.0,
                       client=local_client, noise=noise)
    ratios = assert_within_sensitivity(a.records, b.records)
    assert ratios == pytest.approx([1.0], rel=1e-9)  # clipped to norm 1 (trusting the stale norm: 2500)


def test_non_finite_value_in_an_anndata_store_stops_the_run_before_any_noise(
    tmp_path: Path, rng: np.random.Generator, auditing_pair, local_client
) -> None:
    base = base_rows(rng)
    data = base.data.copy()
    data[-1] = np.inf
    path = write_anndata_csr(tmp_path / "inf.zarr", data, base.indices.astype(np.int32),
                             base.indptr.astype(np.int64), base.shape[1])
    noise, _ = auditing_pair()
    with pytest.raises(InvalidInputError, match=r"infinite value at row 59 \(partition 0\), column \d") as info:
        dppca_dask.pca(path, epsilon=1.0, delta=1e-6, client=local_client, noise=noise)
    assert (info.value.partition, info.value.row) == (0, 59)
    assert noise.records == [] and noise.released_keys == frozenset()


def test_a_nan_written_into_a_data_chunk_stops_the_run_before_any_noise(
    tmp_path: Path, rng: np.random.Generator, auditing_pair, local_client
) -> None:
    store = write_matrix(tmp_path / "s.zarr", base_rows(rng), rows_per_partition=16)
    zarr.open_group(store.path, mode="r+")["X/data"][store.nnz - 1] = np.nan
    noise, _ = auditing_pair()
    with pytest.raises(StoreCorruptError, match=r"partition 3 of store .* non-finite value at row 59") as info:
        dppca_dask.pca(store.path, epsilon=1.0, delta=1e-6, client=local_client, noise=noise)
    assert info.value.partition == 3
    assert noise.records == [] and noise.released_keys == frozenset()
    assert os.path.isdir(store.path)
