"""The top rows' per-bin sums equal the selector product they replace, bit for bit.

:func:`~dppca_dask.kernels.power.binned_sums` accumulates each bin's rows into a dense vector through scipy's
``csc_matvec`` (``csc_matvecs`` for k columns), or a compiled loop with numba (the tests run on both); the reference
is the product ``selector @ block`` the kernels used before, one selector per column of the weights, side by side.
Both add each bin's rows in ascending row order and drop exact zeros, so every stored value must be equal, not
close. The inputs have values of very different scales (a different summation order changes the last bits of most
sums), rows that cancel exactly, empty rows, stored zeros, 32- and 64-bit indices, float32 values and dense and CSC
blocks.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.kernels import power as power_module
from dppca_dask.kernels.power import binned_sums


def _reference(block, rows, bins, weights, n_bins):  # noqa: ANN001, ANN202
    columns = weights[:, None] if weights.ndim == 1 else weights
    pieces = [sp.csr_array(sp.csr_array((columns[:, j], (bins, rows)), shape=(n_bins, block.shape[0])) @ block)
              for j in range(columns.shape[1])]
    return sp.csr_array(sp.hstack(pieces, format="csr")) if pieces else sp.csr_array((n_bins, 0))


def _block(rng: np.random.Generator, n: int, d: int, density: float = 0.3) -> sp.csr_array:
    dense = rng.standard_normal((n, d)) * (rng.random((n, d)) < density) * 10.0 ** rng.integers(-8, 8, size=(n, 1))
    dense[5] = 0.0  # an empty row
    block = sp.csr_array(dense)
    stored_zeros = sp.csr_array((np.zeros(3), (np.zeros(3, dtype=int), np.array([0, 2, 4]))), shape=(1, d))
    return sp.csr_array(sp.vstack([block, stored_zeros], format="csr"))


def _selection(rng: np.random.Generator, n: int, n_bins: int, k: int | None) -> tuple[np.ndarray, ...]:
    rows = np.sort(rng.choice(n, size=n // 2, replace=False))
    rows = np.union1d(rows, [5, n - 1])  # the empty row and the row of stored zeros
    bins = rng.integers(0, n_bins - 1, size=rows.shape[0])  # the last bin stays empty
    shape = (rows.shape[0],) if k is None else (rows.shape[0], k)
    weights = rng.standard_normal(shape) * 10.0 ** rng.integers(-5, 5, size=shape)
    return rows, bins, weights


def _assert_identical(got: sp.csr_array, want: sp.csr_array) -> None:
    got, want = sp.csr_array(got), sp.csr_array(want)
    got.sort_indices()
    want.sort_indices()
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.indptr, want.indptr)
    np.testing.assert_array_equal(got.indices, want.indices)
    assert np.array_equal(got.data.view(np.uint64), want.data.view(np.uint64))  # the same bits, not close values


@pytest.mark.parametrize("d", [23, 4000])  # a dense vector per bin; too wide for that: the product
@pytest.mark.parametrize("k", [None, 1, 3])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("value_dtype", [np.float64, np.float32])
def test_binned_sums_equal_the_selector_product(k: int | None, index_dtype: type, value_dtype: type, d: int,
                                                monkeypatch: pytest.MonkeyPatch, compiled: bool) -> None:
    rng = np.random.default_rng(11)
    n, n_bins = 60, 9
    products: list[int] = []
    selected_product = power_module._selected_product

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        products.append(1)
        return selected_product(*args, **kwargs)

    monkeypatch.setattr(power_module, "_selected_product", counted)
    block = _block(rng, n, d, density=0.3 if d < 100 else 0.002)
    block.data = block.data.astype(value_dtype)
    block.indices = block.indices.astype(index_dtype)
    block.indptr = block.indptr.astype(index_dtype)
    rows, bins, weights = _selection(rng, block.shape[0], n_bins, k)
    got = binned_sums(block, rows, bins, weights, n_bins)
    want = _reference(block, rows, bins, weights, n_bins)
    _assert_identical(got, want)
    # narrow: the rows' entries outweigh the bins' dense vectors; wide and sparse: they do not, the product is used
    assert products == ([] if d < 100 else [1])
    assert got.indices.dtype == np.int32  # what travels: 4 bytes per column index while k·d fits


def test_an_exact_zero_sum_is_not_stored(compiled: bool) -> None:
    row = np.array([[0.0, 1.25, -3.0, 7e-300]])
    block = sp.csr_array(np.vstack([row, row, 2 * row]))
    got = binned_sums(block, np.array([0, 1, 2]), np.array([1, 1, 0]), np.array([0.75, -0.75, 1.0]), 3)
    assert got[[1]].nnz == 0 and got[[2]].nnz == 0 and got[[0]].nnz == 3
    _assert_identical(got, _reference(block, np.array([0, 1, 2]), np.array([1, 1, 0]), np.array([0.75, -0.75, 1.0]), 3))


def test_binned_sums_of_other_blocks_and_empty_selections(compiled: bool) -> None:
    rng = np.random.default_rng(12)
    n, d, n_bins = 40, 17, 6
    block = _block(rng, n, d)
    rows, bins, weights = _selection(rng, block.shape[0], n_bins, 2)
    for other in (block.toarray(), sp.csc_array(block)):
        _assert_identical(binned_sums(other, rows, bins, weights, n_bins), _reference(block, rows, bins, weights,
                                                                                      n_bins))
    # rows given in any order are summed in ascending order within their bin (the kernels pass them ascending)
    shuffled = rng.permutation(rows.shape[0])
    for other in (block, block.toarray(), sp.csc_array(block)):  # the same bits whatever the block's format
        _assert_identical(binned_sums(other, rows[shuffled], bins[shuffled], weights[shuffled], n_bins),
                          _reference(block, rows, bins, weights, n_bins))
    none = np.zeros(0, dtype=np.int64)
    empty = binned_sums(block, none, none, np.zeros(0), n_bins)
    assert empty.shape == (n_bins, d) and empty.nnz == 0
    assert binned_sums(block, none, none, np.zeros((0, 3)), n_bins).shape == (n_bins, 3 * d)
    assert binned_sums(block, rows, bins, np.zeros((rows.shape[0], 0)), n_bins).shape == (n_bins, 0)
    # every selected weight zero: nothing stored
    assert binned_sums(block, rows, bins, np.zeros(rows.shape[0]), n_bins).nnz == 0


def test_every_sum_kept_when_the_rows_fill_every_bins_columns(compiled: bool) -> None:
    """Rows holding every column, one bin each: every bin's d sums are stored (the most a bin can hold), NaN sums
    kept and an exact zero dropped, the same bits as the product."""
    rng = np.random.default_rng(13)
    n, d, n_bins = 12, 7, 5
    dense = rng.standard_normal((n, d)) + 3.0
    dense[3, 2] = np.nan  # a NaN value: its bin's sum of that column is NaN, stored (not an exact zero)
    block = sp.csr_array(dense)
    rows = np.arange(n)
    bins = np.repeat(np.arange(n_bins - 1), 3)
    weights = rng.standard_normal(n)
    weights[9:] = 0.0  # bin 3's rows all weigh zero: nothing stored for it
    got = binned_sums(block, rows, bins, weights, n_bins)
    assert np.diff(got.indptr).tolist() == [d, d, d, 0, 0]
    assert np.isnan(got.toarray()[1, 2])
    _assert_identical(got, _reference(block, rows, bins, weights, n_bins))
