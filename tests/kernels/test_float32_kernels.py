"""float32 partitions: the chunked products accumulate in float64 and equal scipy's on the block converted to float64,
bit for bit; the private step's pre-noise values on a float32 store equal an exact float64 reference.

The privacy analysis assumes the scores, the histogram and the released product are computed accurately: a float32
accumulation would move them by data-dependent rounding. These tests pin every kernel output on float32 blocks to
the float64 computation on the same (exactly converted) values.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.coordinator.sources import load_store_partition
from dppca_dask.kernels import ThresholdGrid, filtered_sum, gram_times, plain_gram_times, power_partial
from dppca_dask.kernels import _sparse
from dppca_dask.kernels.power import clip_factors
from dppca_dask.storage import row_norms_of, write_matrix


def _block(rng: np.random.Generator, *, dtype: type, index_dtype: type, n: int = 400, d: int = 60) -> sp.csr_array:
    """Random float32-representable values, with empty rows, a full row and rows of very different sizes."""
    dense = rng.standard_normal((n, d)) * (rng.random((n, d)) < rng.uniform(0.01, 0.6, size=(n, 1)))
    dense *= rng.choice([1e-3, 1.0, 1e3], size=(n, 1))
    dense[5] = 0.0
    dense[17] = rng.standard_normal(d)  # every column
    dense[-3:] = 0.0  # empty rows at the end
    csr = sp.csr_array(dense.astype(np.float32).astype(dtype))
    return sp.csr_array((csr.data, csr.indices.astype(index_dtype), csr.indptr.astype(index_dtype)), shape=csr.shape)


def _as64(block: sp.csr_array) -> sp.csr_array:
    return sp.csr_array((block.data.astype(np.float64), block.indices, block.indptr), shape=block.shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("chunk", [1, 7, 64, _sparse.CHUNK])
def test_chunked_products_equal_scipy_on_float64(rng: np.random.Generator, dtype: type, index_dtype: type,
                                                 chunk: int) -> None:
    block = _block(rng, dtype=dtype, index_dtype=index_dtype)
    ref = _as64(block)
    x = rng.standard_normal(block.shape[1])
    xs = rng.standard_normal((block.shape[1], 3))
    w = rng.standard_normal(block.shape[0])
    ws = rng.standard_normal((block.shape[0], 3))
    assert _sparse.chunked(block)
    for got, want in (
        (_sparse.times(block, x, chunk=chunk), ref @ x),
        (_sparse.times(block, xs, chunk=chunk), ref @ xs),
        (_sparse.transpose_times(block, w, chunk=chunk), ref.T @ w),
        (_sparse.transpose_times(block, ws, chunk=chunk), ref.T @ ws),
    ):
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, want)
    factors = clip_factors(row_norms_of(ref), 0.7)
    projections, weights, full = _sparse.sweep(block, factors, x, chunk=chunk)
    np.testing.assert_array_equal(projections, factors * (ref @ x))
    np.testing.assert_array_equal(weights, factors * (factors * (ref @ x)))
    np.testing.assert_array_equal(full, ref.T @ weights)


def test_empty_blocks_and_other_inputs_go_to_scipy(rng: np.random.Generator) -> None:
    for shape in ((0, 5), (4, 5)):
        empty = sp.csr_array(shape, dtype=np.float32)
        np.testing.assert_array_equal(_sparse.times(empty, np.ones(5)), np.zeros(shape[0]))
        np.testing.assert_array_equal(_sparse.transpose_times(empty, np.ones(shape[0])), np.zeros(5))
        p, w, full = _sparse.sweep(empty, np.ones(shape[0]), np.ones(5))
        assert p.shape == w.shape == (shape[0],) and not full.any()
    block = _block(rng, dtype=np.float32, index_dtype=np.int32, n=30, d=4)
    for bad in (lambda: _sparse.times(block, np.ones(5)), lambda: _sparse.transpose_times(block, np.ones((4, 2))),
                lambda: _sparse.sweep(block, np.ones(30), np.ones(3))):
        with pytest.raises(ValueError, match="dimension mismatch"):
            bad()
    dense = rng.standard_normal((6, 4)).astype(np.float32)
    assert not _sparse.chunked(dense) and not _sparse.chunked(sp.csc_array(dense))
    np.testing.assert_array_equal(_sparse.times(dense, np.ones(4)), dense.astype(np.float64) @ np.ones(4))


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_private_step_on_float32_equals_float64(rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch,
                                                compiled: bool, index_dtype: type) -> None:
    monkeypatch.setattr(_sparse, "CHUNK", 97)  # many chunks at this size
    block = _block(rng, dtype=np.float32, index_dtype=index_dtype)
    ref = _as64(block)
    norms = row_norms_of(ref)
    grid = ThresholdGrid.for_bound(1.0)
    x = rng.standard_normal(block.shape[1])
    x /= np.linalg.norm(x)
    for top_m in (0, 40, 10_000):
        got = power_partial(block, norms, x, partition=3, row_norm_bound=1.0, grid=grid, top_m=top_m)
        want = power_partial(ref, norms, x, partition=3, row_norm_bound=1.0, grid=grid, top_m=top_m)
        np.testing.assert_array_equal(got.histogram, want.histogram)
        np.testing.assert_array_equal(got.full_sum, want.full_sum)
        np.testing.assert_array_equal(got.bin_sums.toarray(), want.bin_sums.toarray())
        assert got.cuts == want.cuts
    for index in (10, 60):
        np.testing.assert_array_equal(
            filtered_sum(block, norms, x, row_norm_bound=1.0, grid=grid, index=index, above=2),
            filtered_sum(ref, norms, x, row_norm_bound=1.0, grid=grid, index=index, above=2))
    np.testing.assert_array_equal(gram_times(block, norms, x, row_norm_bound=0.5),
                                  gram_times(ref, norms, x, row_norm_bound=0.5))
    np.testing.assert_array_equal(plain_gram_times(block, x), plain_gram_times(ref, x))


def test_private_step_on_a_float32_store_equals_an_exact_float64_reference(tmp_path: Path,
                                                                            rng: np.random.Generator) -> None:
    """Through the worker's read path. The reference is dense numpy float64 arithmetic on the stored float32 values
    (another summation order): agreement to 1e-12 (relative to the terms' magnitudes) is what float64 accumulation
    gives, while float32 accumulation would miss it by about 1e-7. Histograms agree unless a score falls within 1e-12 (relative) of a
    grid value, which for these continuous random values has probability below 1e-8."""
    matrix = _block(rng, dtype=np.float32, index_dtype=np.int32, n=900, d=80)
    store = write_matrix(tmp_path / "f32.zarr", matrix, rows_per_partition=300, dtype=np.float32)
    assert store.dtype == "float32"
    grid = ThresholdGrid.for_bound(1.0)
    x = rng.standard_normal(80)
    x /= np.linalg.norm(x)
    for part in store.partitions:
        loaded = load_store_partition(store, part.index)
        assert loaded.block.dtype == np.float64  # converted once, while read: no product converts anything
        rows = matrix[part.row_start : part.row_stop].toarray().astype(np.float64)
        norms = np.sqrt((rows * rows).sum(axis=1))
        np.testing.assert_allclose(loaded.norms, norms, rtol=1e-12, atol=0)
        got = power_partial(loaded.block, loaded.norms, x, partition=part.index, row_norm_bound=1.0, grid=grid,
                            top_m=50)
        factors = np.minimum(1.0, 1.0 / np.where(norms > 0, norms, np.inf))
        projections = factors * (rows @ x)
        scores = np.minimum(np.minimum(norms, 1.0) * np.abs(projections), 1.0)
        bins = grid.n_points - np.searchsorted(grid.ascending, scores, side="left")
        np.testing.assert_array_equal(got.histogram, np.bincount(bins, minlength=grid.n_bins))
        weights = factors * projections
        # float64 sums of these ≤ 900 terms differ by at most about 900·2⁻⁵³ ≈ 1e-13 of the sum of their magnitudes
        error = np.abs(got.full_sum - rows.T @ weights)
        assert np.all(error <= 1e-12 * (np.abs(rows).T @ np.abs(weights)))


def _kernel_outputs(block: object, norms: np.ndarray, rng_seed: int) -> list[np.ndarray]:
    """Every exact output of the other kernel families on ``block`` (the same inputs for both value types)."""
    from dppca_dask.kernels import block as B
    from dppca_dask.kernels import gram_matrix
    from dppca_dask.kernels import hardt_roth as H
    from dppca_dask.kernels import tensor as T
    from dppca_dask.kernels.gram import window_gram

    rng = np.random.default_rng(rng_seed)
    n, d = block.shape  # type: ignore[attr-defined]
    x, _ = np.linalg.qr(rng.standard_normal((d, 3)))
    mean = rng.standard_normal(d) * 0.1
    grid = ThresholdGrid.for_bound(1.5)
    out: list[np.ndarray] = []
    for centre in (None, mean):
        part = B.block_partial(block, norms, x, partition=0, row_norm_bound=1.0, grid=grid, top_m=30, mean=centre)
        out += [part.histogram, part.full_sum, part.bin_sums.toarray(), part.bin_weights, np.array(part.square_sum)]
        out.append(B.block_filtered_sum(block, norms, x, row_norm_bound=1.0, grid=grid, index=40, above=3,
                                        mean=centre))
        variance = B.variance_partial(block, norms, x.T, row_norm_bound=1.0, mean=centre)
        out += [variance.projected, np.array(variance.total)]
        out.append(B.centred_gram_matrix(block, norms, row_norm_bound=1.0, mean=centre))
    out.append(B.mean_partial(block, norms, row_norm_bound=1.0).total)
    out.append(gram_matrix(block, norms, row_norm_bound=1.0))
    out.append(window_gram(block, norms, rows=(3, n - 2), row_norm_bound=1.0))
    out += [H.rows_times(block, norms, x, row_norm_bound=1.0), H.rows_times(block, norms, x[:, 0]),
            H.transpose_times(block, norms, rng.standard_normal((n, 2)), row_norm_bound=1.0),
            H.dense_rows(block, norms, row_norm_bound=1.0)]
    out += list(T.moment_partial(block, norms, x, row_norm_bound=1.0))
    data = block.data  # type: ignore[attr-defined]
    whole = (np.abs(np.round(data.astype(np.float64) * 3)) + 1).astype(data.dtype)  # word counts, same value type
    counts = sp.csr_array((whole, block.indices, block.indptr), shape=block.shape)  # type: ignore[attr-defined]
    out += list(T.topic_partial(counts, x)) + list(T.whitened_topic_partial(counts, x, x[:, :2], np.ones(3)))
    out += [T.pair_partial(counts, x, clip=0.5), T.pair_partial(counts, x), T.first_partial(counts)]
    return out


def test_every_kernel_on_float32_equals_float64(rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sparse, "CHUNK", 97)
    block = _block(rng, dtype=np.float32, index_dtype=np.int32, n=300, d=40)
    ref = _as64(block)
    norms = row_norms_of(ref)
    got, want = _kernel_outputs(block, norms, 5), _kernel_outputs(ref, norms, 5)
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert np.asarray(g).dtype == np.asarray(w).dtype, i
        np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
