"""The coordinator's last combination keeps the partials' bin sums side by side and sums only the head it needs.

:func:`~dppca_dask.kernels.power.gather_power_partials` (and the block version) must give, for every released
index, the same filtered sum as adding the partials first (:func:`~dppca_dask.kernels.power.merge_power_partials`)
bit for bit: the order of the additions is the same. Deterministic (seeded partitions).
"""

from __future__ import annotations

import dask
import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.coordinator.requests import PowerStep
from dppca_dask.coordinator import LocalExecutor, as_source
from dppca_dask.kernels import ThresholdGrid, gather_power_partials, head_sum, merge_power_partials, power_partial
from dppca_dask.kernels import select_filtered
from dppca_dask.kernels.block import block_partial, gather_block_partials, merge_block_partials, select_block_filtered


def _partitions(n_parts: int, seed: int) -> list[tuple[sp.csr_array, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_parts):
        block = sp.random(400, 60, density=0.15, random_state=rng, format="csr", dtype=np.float64)
        block.data = rng.standard_normal(block.nnz) * rng.choice([0.1, 1.0, 5.0], size=block.nnz)
        out.append((sp.csr_array(block), np.sqrt(np.asarray(block.multiply(block).sum(axis=1)).ravel())))
    return out


@pytest.mark.parametrize("n_parts", [1, 3, 9])
def test_the_gathered_head_equals_the_merged_head_bit_for_bit(n_parts: int) -> None:
    grid = ThresholdGrid.for_bound(2.0)
    x = np.random.default_rng(1).standard_normal(60)
    x /= np.linalg.norm(x)
    parts = [power_partial(b, n, x, partition=i, row_norm_bound=2.0, grid=grid, top_m=150)
             for i, (b, n) in enumerate(_partitions(n_parts, n_parts))]
    # the partials themselves, and a tree's groups (workers add groups, the coordinator gathers them)
    groups = [merge_power_partials(*parts[i:i + 2]) for i in range(0, n_parts, 2)]
    for pieces in (parts, groups):
        merged, gathered = merge_power_partials(*pieces), gather_power_partials(*pieces)
        assert isinstance(gathered.bin_sums, tuple)
        np.testing.assert_array_equal(gathered.histogram, merged.histogram)
        np.testing.assert_array_equal(gathered.full_sum, merged.full_sum)
        assert gathered.cuts == merged.cuts
        assert max(merged.cuts.values()) > 0
        for index in range(grid.n_points):
            got, got_incomplete = select_filtered(gathered, index)
            want, want_incomplete = select_filtered(merged, index)
            np.testing.assert_array_equal(got, want)
            assert got_incomplete == want_incomplete
    # the reference: the merged matrix's head summed by scipy
    merged = merge_power_partials(*parts)
    index = max(merged.cuts.values())
    want = np.asarray(merged.bin_sums[: index + 1].sum(axis=0)).ravel()
    np.testing.assert_array_equal(head_sum(gather_power_partials(*parts).bin_sums, index, 60), want)


def test_empty_heads_and_no_pieces_sum_to_zero() -> None:
    assert not head_sum((), 5, 7).any()
    empty = sp.csr_array((4, 7))
    np.testing.assert_array_equal(head_sum((empty, empty), 3, 7), np.zeros(7))
    one = sp.csr_array(np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 0.0]]))
    np.testing.assert_array_equal(head_sum((one,), 0, 3), [0.0, 2.0, 0.0])
    np.testing.assert_array_equal(head_sum((one, one), 9, 3), [2.0, 4.0, 0.0])  # beyond the last row: all rows


def test_the_block_gather_equals_the_block_merge_bit_for_bit() -> None:
    grid = ThresholdGrid.for_bound(2.0)
    x = np.linalg.qr(np.random.default_rng(2).standard_normal((60, 3)))[0]
    mean = np.random.default_rng(3).standard_normal(60) * 0.01
    parts = [block_partial(b, n, x, partition=i, row_norm_bound=2.0, grid=grid, top_m=150, mean=mean)
             for i, (b, n) in enumerate(_partitions(4, 4))]
    merged, gathered = merge_block_partials(*parts), gather_block_partials(*parts)
    assert isinstance(gathered.bin_sums, tuple)
    for index in range(grid.n_points):
        got, got_incomplete = select_block_filtered(gathered, index, mean)
        want, want_incomplete = select_block_filtered(merged, index, mean)
        np.testing.assert_array_equal(got, want)
        assert got_incomplete == want_incomplete


def test_the_local_executor_gathers() -> None:
    blocks = _partitions(3, 7)
    matrix = sp.vstack([b for b, _ in blocks], format="csr")
    with dask.config.set({"dppca_dask.in-memory-partitions": 3}):
        executor = LocalExecutor(as_source(matrix))
    grid = ThresholdGrid.for_bound(2.0)
    x = np.ones(60) / np.sqrt(60)
    aggregate = executor.execute(PowerStep(x=x, row_norm_bound=2.0, grid=grid, top_m=150))
    assert isinstance(aggregate.bin_sums, tuple) and len(aggregate.bin_sums) == 3


def test_partials_are_added_in_their_order_as_a_stacked_sum_adds_them() -> None:
    """The histograms and full sums of the partials are added one after another (no stacked copy): the values of
    ``np.sum(parts, axis=0)``, which the merges used before, bit for bit, for vectors and for the block kernel's d×k
    sums, over values of very different magnitudes (where the order of additions shows)."""
    from dppca_dask.kernels.power import added_in_order

    rng = np.random.default_rng(8)
    for _ in range(50):
        count = int(rng.integers(1, 12))
        shape = (int(rng.integers(1, 3000)),) if rng.random() < 0.5 else (int(rng.integers(1, 500)), 3)
        arrays = [rng.standard_normal(shape) * 10.0 ** rng.integers(-12, 12, size=shape) for _ in range(count)]
        total = added_in_order(arrays)
        assert np.array_equal(total.view(np.uint64), np.sum(arrays, axis=0).view(np.uint64))
        assert not any(np.shares_memory(total, a) for a in arrays)  # the first partial is not changed in place
    counts = [rng.integers(0, 1000, size=98) for _ in range(8)]
    np.testing.assert_array_equal(added_in_order(counts), np.sum(counts, axis=0))
