"""Dask sees the real size of what the package hands it: within 2x of the bytes the object holds (a kernel's aggregate:
of its public shapes, whose size tells nothing about the data)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from dask.sizeof import sizeof

from dppca_dask.coordinator.sources import PartitionData, as_source, load_store_partition, make_partition
from dppca_dask.kernels import ThresholdGrid, gather_power_partials, power_partial
from dppca_dask.kernels import block as B
from dppca_dask.storage import row_norms_of


def _true_bytes(obj: object) -> int:
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if sp.issparse(obj):
        return sum(a.nbytes for a in (obj.data, obj.indices, obj.indptr))
    raise TypeError(type(obj))


def _within_twice(reported: int, true: int) -> None:
    assert true / 2 <= reported <= 2 * true, (reported, true)


@pytest.fixture
def csr(rng: np.random.Generator) -> sp.csr_array:
    return sp.csr_array(sp.random(20_000, 500, density=0.02, random_state=rng, format="csr"))


def test_sparse_arrays_and_matrices(csr: sp.csr_array) -> None:
    for obj in (csr, sp.csr_matrix(csr), csr.T.tocsc()):
        _within_twice(sizeof(obj), _true_bytes(obj))


def test_partitions(csr: sp.csr_array, rng: np.random.Generator, tmp_path) -> None:  # noqa: ANN001
    sparse = make_partition(0, csr)
    _within_twice(sizeof(sparse), sparse.nbytes)
    dense = make_partition(1, rng.standard_normal((2_000, 50)))
    _within_twice(sizeof(dense), dense.nbytes)
    # what a store hands a worker
    from dppca_dask.storage import write_matrix

    store = write_matrix(tmp_path / "m.zarr", csr, rows_per_partition=5_000)
    part = load_store_partition(store, 1)
    assert isinstance(part, PartitionData)
    _within_twice(sizeof(part), part.nbytes)
    # and the blocks of an in-memory input's source
    for loader, args in as_source(csr).loaders:
        block = args[1]
        _within_twice(sizeof(block), _true_bytes(block))


def test_kernel_aggregates(csr: sp.csr_array, rng: np.random.Generator) -> None:
    x = rng.standard_normal(csr.shape[1])
    x /= np.linalg.norm(x)
    grid = ThresholdGrid.for_bound(1.0)
    norms = row_norms_of(csr)
    # Aggregates report their public shapes only (the top rows' entries are private: the dashboard shows sizes),
    # see tests/privacy/test_review_sizeof.py: the dense arrays, and the sparse sums' row pointers.
    partial = power_partial(csr, norms, x, partition=0, row_norm_bound=1.0, grid=grid, top_m=2_000)
    public = partial.histogram.nbytes + partial.full_sum.nbytes + partial.bin_sums.indptr.nbytes
    _within_twice(sizeof(partial), public)
    xb, _ = np.linalg.qr(rng.standard_normal((csr.shape[1], 4)))
    block = B.block_partial(csr, norms, xb, partition=0, row_norm_bound=1.0, grid=grid, top_m=2_000)
    public = block.histogram.nbytes + block.full_sum.nbytes + block.bin_sums.indptr.nbytes + block.bin_weights.nbytes
    _within_twice(sizeof(block), public)
    # the coordinator's gathered aggregates (pieces side by side): each piece's row pointers, one per partial
    pointers = 8 * (grid.n_points + 1)
    assert sizeof(gather_power_partials(partial, partial, partial)) == sizeof(partial) + 2 * pointers
    assert sizeof(B.gather_block_partials(block, block)) == sizeof(block) + pointers
