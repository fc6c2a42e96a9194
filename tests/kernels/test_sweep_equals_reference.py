"""The power kernel (compiled or numpy bins; the top rows' sums bin by bin) equals the previous implementation, bit for bit.

The reference below is the kernel as it was before the sweep (scores, then a binary search for the bins, a bincount,
and the top rows' sums as one product with the whole block): slow, but its values are the definition. Inputs are
crafted for the edges: scores exactly on grid values and one ulp either side, empty rows, rows of stored zeros,
rows far above the clipping bound, rows holding every column, blocks with 32- and 64-bit indices, dense blocks.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.kernels import ThresholdGrid, filtered_sum, power_partial
from dppca_dask.kernels import _jit
from dppca_dask.kernels.power import clip_factors
from dppca_dask.storage import row_norms_of


def _reference_power_partial(block, norms, x, *, partition, row_norm_bound, grid, top_m):  # noqa: ANN001, ANN202
    factors = clip_factors(norms, row_norm_bound)
    projections = factors * np.asarray(block @ x).ravel()
    scores = np.minimum(norms, row_norm_bound) * np.abs(projections)
    if np.isfinite(row_norm_bound):
        scores = np.minimum(scores, row_norm_bound * row_norm_bound)
    weights = factors * projections
    full_sum = np.asarray(block.T @ weights, dtype=np.float64).ravel()
    bins = (grid.n_points - np.searchsorted(grid.thetas[::-1], scores, side="left")).astype(np.int64)
    histogram = np.bincount(bins, minlength=grid.n_bins).astype(np.int64)
    cumulative = np.cumsum(histogram[: grid.n_points])
    cut = int(np.searchsorted(cumulative, top_m, side="right")) - 1
    chosen = np.flatnonzero(bins <= cut) if cut >= 0 else np.zeros(0, dtype=np.int64)
    selector = sp.csr_array((weights[chosen], (bins[chosen], chosen)), shape=(grid.n_points, block.shape[0]))
    bin_sums = sp.csr_array(selector @ (block if sp.issparse(block) else np.asarray(block)))
    return histogram, full_sum, bin_sums, cut, bins


def _crafted(rng: np.random.Generator, d: int, grid: ThresholdGrid) -> tuple[sp.csr_array, np.ndarray]:
    """Rows along e_0 whose score is exactly a grid value or one ulp from it (x = e_0 + small), and edge rows."""
    rows = []
    # Score of t·e_0 against x = e_0 is t·t: t = 2^-k gives 2^-2k, which is θ_{2k·g} on a grid with top 1.
    for k in range(0, (grid.n_points - 1) // (2 * grid.per_octave) + 1):
        t = 2.0 ** -k
        for v in (t, np.nextafter(t, 0), np.nextafter(t, 2)):
            row = np.zeros(d)
            row[0] = v
            rows.append(row)
    rows.append(np.zeros(d))  # an empty row
    rows.append(np.full(d, 1e150))  # far above the bound: clipped (its norm overflows nothing at this size)
    rows.append(rng.standard_normal(d) * 1e3)  # every column, above the bound
    rows.append(rng.standard_normal(d) * 1e-200)  # tiny: score far below the grid
    dense = np.array(rows + [rng.standard_normal(d) * (rng.random(d) < 0.3) * rng.uniform(0.01, 3.0)
                             for _ in range(300)])
    block = sp.csr_array(dense)
    # rows of stored zeros: explicit zeros in the CSR structure
    zeros = sp.csr_array((np.zeros(4), (np.array([0, 0, 1, 1]), np.array([1, 3, 2, 5]))), shape=(2, d))
    block = sp.csr_array(sp.vstack([block, zeros, sp.csr_array((3, d))], format="csr"))  # and 3 empty rows
    return block, row_norms_of(block)


def _assert_same(got, want) -> None:  # noqa: ANN001
    histogram, full_sum, bin_sums, cut, _bins = want
    np.testing.assert_array_equal(got.histogram, histogram)
    np.testing.assert_array_equal(got.full_sum, full_sum)
    assert got.cuts == {0: cut}
    np.testing.assert_array_equal(got.bin_sums.toarray(), bin_sums.toarray())


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("bound", [1.0, 0.5, 4.0])
def test_power_partial_equals_the_previous_kernel(rng: np.random.Generator, compiled: bool, index_dtype: type,
                                                   bound: float) -> None:
    d = 40
    grid = ThresholdGrid.for_bound(bound, per_octave=4, octaves=16)
    block, norms = _crafted(rng, d, grid)
    block.indices = block.indices.astype(index_dtype)
    block.indptr = block.indptr.astype(index_dtype)
    x = np.zeros(d)
    x[0] = 1.0
    x2 = x + 1e-3 * rng.standard_normal(d)
    for vector in (x, x2 / np.linalg.norm(x2)):
        for top_m in (0, 3, 40, 10_000):
            got = power_partial(block, norms, vector, partition=0, row_norm_bound=bound, grid=grid, top_m=top_m)
            want = _reference_power_partial(block, norms, vector, partition=0, row_norm_bound=bound, grid=grid,
                                            top_m=top_m)
            _assert_same(got, want)
            dense = power_partial(block.toarray(), norms, vector, partition=0, row_norm_bound=bound, grid=grid,
                                  top_m=top_m)
            _assert_same(dense, _reference_power_partial(block.toarray(), norms, vector, partition=0,
                                                         row_norm_bound=bound, grid=grid, top_m=top_m))
        # the second pass bins rows exactly as the first
        bins = want[4]
        for index in (0, 10, 40, grid.n_points - 1):
            factors = clip_factors(norms, bound)
            weights = np.where(bins <= index, factors * (factors * np.asarray(block @ vector)), 0.0)
            np.testing.assert_array_equal(
                filtered_sum(block, norms, vector, row_norm_bound=bound, grid=grid, index=index),
                np.asarray(block.T @ weights).ravel())


def test_boundary_rows_land_in_the_bins_of_the_definition() -> None:
    grid = ThresholdGrid.for_bound(1.0, per_octave=4, octaves=8)
    d = 3
    x = np.array([1.0, 0.0, 0.0])
    rows = sp.csr_array(np.array([[0.5, 0, 0], [np.nextafter(0.5, 1), 0, 0], [np.nextafter(0.5, 0), 0, 0]]))
    partial = power_partial(rows, row_norms_of(rows), x, partition=0, row_norm_bound=1.0, grid=grid, top_m=10)
    j = 8  # θ_8 = 2^-2 = 0.25 = 0.5·0.5 exactly
    assert grid.thetas[j] == 0.25
    # score 0.25 is not > θ_8 (first filtered at θ_9); one ulp above is filtered at θ_8; one below at θ_9.
    assert partial.histogram[j] == 1 and partial.histogram[j + 1] == 2
    assert d == rows.shape[1]


@pytest.mark.skipif(not _jit.NUMBA_INSTALLED, reason="numba is not installed")
def test_compiled_bins_equal_the_binary_search(rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jit, "HAVE_NUMBA", True)
    for grid in (ThresholdGrid.for_bound(1.0), ThresholdGrid.for_bound(3.0, per_octave=3, octaves=7),
                 ThresholdGrid(top=0.7, per_octave=1, n_points=1), ThresholdGrid(top=2.0, per_octave=5, n_points=40)):
        thetas = grid.thetas
        scores = np.concatenate([
            thetas, np.nextafter(thetas, 0), np.nextafter(thetas, np.inf), [0.0, 5e-324, 1e-300, np.inf, 1e300],
            rng.uniform(0, grid.top * 1.5, 2_000), grid.top * np.exp2(-rng.uniform(0, 40, 2_000)),
        ])
        bins, histogram = grid.bins_and_histogram(scores)
        want = grid.bins_searchsorted(scores)
        np.testing.assert_array_equal(bins, want)
        np.testing.assert_array_equal(histogram, np.bincount(want, minlength=grid.n_bins))
        np.testing.assert_array_equal(grid.bins(scores), want)


def test_bins_from_the_logarithm_equal_the_binary_search(rng: np.random.Generator, compiled: bool) -> None:
    """The numpy bins (closed-form guess, one exact comparison each way) are the definition's on the grid values,
    one ulp either side of each, zero, subnormals, infinities, NaN and random scores over 40 octaves; scores below
    zero, never a kernel's, too. Without numba the kernels' bins and histogram are these."""
    for grid in (ThresholdGrid.for_bound(1.0), ThresholdGrid.for_bound(3.0, per_octave=3, octaves=7),
                 ThresholdGrid(top=0.7, per_octave=1, n_points=1), ThresholdGrid(top=2.0, per_octave=5, n_points=40),
                 ThresholdGrid.for_bound(1e-150), ThresholdGrid.for_bound(1e150, per_octave=7)):
        thetas = grid.thetas
        scores = np.concatenate([
            thetas, np.nextafter(thetas, 0), np.nextafter(thetas, np.inf), [0.0, -0.0, 5e-324, 1e-300, np.inf, 1e300],
            rng.uniform(0, grid.top * 1.5, 2_000), grid.top * np.exp2(-rng.uniform(0, 40, 2_000)),
        ])
        want = grid.bins_searchsorted(scores)
        np.testing.assert_array_equal(grid.bins_by_logs(scores), want)
        bins, histogram = grid.bins_and_histogram(scores)
        np.testing.assert_array_equal(bins, want)
        np.testing.assert_array_equal(histogram, np.bincount(want, minlength=grid.n_bins))
        even = scores.size // 2 * 2
        np.testing.assert_array_equal(grid.bins(scores[:even].reshape(2, -1)), want[:even].reshape(2, -1))
        with_nan = np.append(scores, np.nan)
        np.testing.assert_array_equal(grid.bins_by_logs(with_nan), grid.bins_searchsorted(with_nan))
        negative = np.append(scores, [-1.0, -np.inf])
        np.testing.assert_array_equal(grid.bins_by_logs(negative), grid.bins_searchsorted(negative))


def test_bins_from_the_logarithm_on_a_grid_reaching_the_subnormals() -> None:
    """Grid values rounded to subnormals (and to zero) put the logarithm's guess many bins off (64 per octave:
    up to 63): the exact comparisons repeat until no bin moves, so the bins are still the binary search's. A single
    score (0-d) gets a single bin, as from the binary search."""
    grid = ThresholdGrid(top=1e-300, per_octave=64, n_points=64 * 90)
    thetas = grid.thetas[grid.thetas > 0]
    scores = np.concatenate([thetas, np.nextafter(thetas, 0), np.nextafter(thetas, 1), [0.0, 5e-324, 1e-323]])
    np.testing.assert_array_equal(grid.bins_by_logs(scores), grid.bins_searchsorted(scores))
    for score in (0.3, 5e-324, 0.0, np.inf):
        for g in (grid, ThresholdGrid.for_bound(1.0)):
            assert g.bins_by_logs(np.float64(score)) == g.bins_searchsorted(np.float64(score))
            assert g.bins(np.asarray(score)) == g.bins_searchsorted(np.float64(score))
