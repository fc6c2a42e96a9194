"""The compiled loops of the private step (numba's, on when it is installed) give the numpy kernels' values bit for
bit, whatever path the data takes, and the arrays they reuse between calls never reach a result.

The compiled path computes ``A x``, the rows' weights and scores and ``Aᵀw`` in one pass over blocks of rows into
arrays kept per thread, then the bins, and the top rows' per-bin sums reading each row where it is; the numpy path
allocates each array afresh.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.kernels import ThresholdGrid, _jit, _sparse, power_partial
from dppca_dask.kernels import power as power_module
from dppca_dask.storage import row_norms_of

pytestmark = pytest.mark.skipif(not _jit.NUMBA_INSTALLED, reason="numba is not installed")


def _block(rng: np.random.Generator, n: int, d: int, density: float, value_dtype: type = np.float64,
           x: np.ndarray | None = None) -> sp.csr_array:
    """Random rows over six orders of magnitude, an empty row; with ``x``, rows along it far above any bound (their
    score is clamped to c²: without the clamp they would land in bin 0, which θ₀ = c² never fills)."""
    dense = rng.standard_normal((n, d)) * (rng.random((n, d)) < density) * 10.0 ** rng.integers(-3, 3, size=(n, 1))
    dense[7] = 0.0  # an empty row
    if x is not None:
        dense[10:20] = np.outer(rng.uniform(5.0, 50.0, 10), x)
    return sp.csr_array(dense.astype(value_dtype))


def _partial(block: sp.csr_array, x: np.ndarray, top_m: int, *, bound: float = 2.0) -> power_module.PowerPartial:
    return power_partial(block, row_norms_of(block), x, partition=1, row_norm_bound=bound,
                         grid=ThresholdGrid.for_bound(bound), top_m=top_m)


def _assert_same_bits(got: power_module.PowerPartial, want: power_module.PowerPartial) -> None:
    np.testing.assert_array_equal(got.histogram, want.histogram)
    assert np.array_equal(got.full_sum.view(np.uint64), want.full_sum.view(np.uint64))
    assert got.cuts == want.cuts
    assert got.bin_sums.shape == want.bin_sums.shape
    for name in ("indptr", "indices"):
        np.testing.assert_array_equal(getattr(got.bin_sums, name), getattr(want.bin_sums, name))
    assert np.array_equal(got.bin_sums.data.view(np.uint64), want.bin_sums.data.view(np.uint64))


@pytest.mark.parametrize("value_dtype", [np.float64, np.float32])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("d", [30, 3000])  # per-bin dense vectors; too wide for them: the selector product
def test_the_private_kernel_is_the_same_compiled_or_not(monkeypatch: pytest.MonkeyPatch, value_dtype: type,
                                                        index_dtype: type, d: int) -> None:
    rng = np.random.default_rng(14)
    x = rng.standard_normal(d)
    x /= np.linalg.norm(x)
    block = _block(rng, 400, d, density=0.5 if d < 100 else 0.002, value_dtype=value_dtype, x=x)
    block.indices = block.indices.astype(index_dtype)
    block.indptr = block.indptr.astype(index_dtype)
    assert _partial(block, x, 10).histogram[0] == 0  # the clamp: rows along x far above the bound
    for top_m in (0, 1, 50, 399, 10_000):
        for bound in (2.0, 1e-3, np.inf):  # (an infinite bound: no clipping; the grid of bound 1 bins the scores)
            results = []
            for flag in (False, True):
                monkeypatch.setattr(_jit, "HAVE_NUMBA", flag)
                results.append(power_partial(block, row_norms_of(block), x, partition=1, row_norm_bound=bound,
                                             grid=ThresholdGrid.for_bound(bound if np.isfinite(bound) else 1.0),
                                             top_m=top_m))
            _assert_same_bits(results[1], results[0])


@pytest.mark.parametrize("value_dtype", [np.float64, np.float32])  # the compiled pass; the per-bin loop (binned_sums)
def test_64_bit_bin_indices_are_the_same_compiled_or_not(monkeypatch: pytest.MonkeyPatch, value_dtype: type) -> None:
    """The bins' sums take 64-bit column indices where ``n_points × d`` reaches 2³¹ (d of about 22 million: dense
    vectors of 16 GiB and more, beyond any test). The index type is forced here on small blocks, so that the loops
    compiled for it (the per-bin loop) run and give the numpy path's values."""
    monkeypatch.setattr(power_module, "_index_type", lambda n_bins, width: np.dtype(np.int64))
    rng = np.random.default_rng(15)
    x = rng.standard_normal(30)
    x /= np.linalg.norm(x)
    block = _block(rng, 400, 30, density=0.5, value_dtype=value_dtype, x=x)
    for top_m in (50, 399):  # some top rows in a few bins; most rows in many
        results = []
        for flag in (False, True):
            monkeypatch.setattr(_jit, "HAVE_NUMBA", flag)
            results.append(_partial(block, x, top_m))
        assert power_module._fusable(block, x) == (value_dtype == np.float64)
        _assert_same_bits(results[1], results[0])
        assert results[1].bin_sums.nnz > 0
        assert results[1].bin_sums.indices.dtype == np.int64 and results[1].bin_sums.indptr.dtype == np.int64


@pytest.mark.parametrize("entries", [1, 7, 40, 10**9])
def test_the_pass_over_blocks_of_rows_is_the_same_whatever_their_size(monkeypatch: pytest.MonkeyPatch,
                                                                    entries: int) -> None:
    """The compiled pass adds a block of rows into ``Aᵀw`` after their products: blocks of one row, of rows with more
    entries than a block (a block of their own), of several rows and of the whole partition give the numpy path's
    values bit for bit."""
    rng = np.random.default_rng(25)
    x = rng.standard_normal(30)
    x /= np.linalg.norm(x)
    block = _block(rng, 400, 30, density=0.3, x=x)
    assert int(np.diff(block.indptr).max()) > 7
    monkeypatch.setattr(power_module, "PASS_ENTRIES", entries)
    for top_m in (0, 60, 10_000):
        results = []
        for flag in (False, True):
            monkeypatch.setattr(_jit, "HAVE_NUMBA", flag)
            results.append(_partial(block, x, top_m, bound=1.5))
        _assert_same_bits(results[1], results[0])


def test_results_never_share_the_arrays_reused_between_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """A partial computed first is unchanged by the next calls (which reuse the per-thread arrays) and equals the
    same partial computed afresh on the numpy path."""
    monkeypatch.setattr(_jit, "HAVE_NUMBA", True)
    rng = np.random.default_rng(15)
    first_block, other = _block(rng, 300, 25, 0.6), _block(rng, 500, 25, 0.6)
    x = rng.standard_normal(25)
    x /= np.linalg.norm(x)
    first = _partial(first_block, x, 120)
    copies = (first.histogram.copy(), first.full_sum.copy(), first.bin_sums.copy())
    assert first.bin_sums.nnz > 0
    y = rng.standard_normal(25)
    for _ in range(3):  # the same sizes (the same arrays reused), smaller ones, larger ones
        _partial(first_block, -x, 120)
        _partial(first_block, y / np.linalg.norm(y), 120)
        _partial(first_block[:100], x, 30)
        _partial(other, -x, 400)
    np.testing.assert_array_equal(first.histogram, copies[0])
    np.testing.assert_array_equal(first.full_sum, copies[1])
    assert (first.bin_sums != copies[2]).nnz == 0
    monkeypatch.setattr(_jit, "HAVE_NUMBA", False)
    _assert_same_bits(first, _partial(first_block, x, 120))


def test_threads_computing_partials_at_once_get_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker with several threads: each thread's reused arrays are its own."""
    monkeypatch.setattr(_jit, "HAVE_NUMBA", False)
    rng = np.random.default_rng(16)
    blocks = [_block(rng, 200 + 50 * i, 40, 0.4) for i in range(4)]
    x = rng.standard_normal(40)
    x /= np.linalg.norm(x)
    want = [_partial(b, x, 60) for b in blocks]
    monkeypatch.setattr(_jit, "HAVE_NUMBA", True)
    got: dict[int, list[power_module.PowerPartial]] = {}
    start = threading.Barrier(4)

    def run(i: int) -> None:
        start.wait()
        got[i] = [_partial(blocks[i], x, 60) for _ in range(20)]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        for partial in got[i]:
            _assert_same_bits(partial, want[i])


def test_a_sequence_of_calls_equals_the_numpy_path_call_by_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The per-bin loop's dense vector is kept between calls and must be left zero: every call of a sequence (the
    same block with other iterates, smaller and larger blocks, more and fewer used bins) equals the numpy path."""
    rng = np.random.default_rng(22)
    blocks = [_block(rng, 300, 25, 0.6), _block(rng, 120, 25, 0.9), _block(rng, 500, 40, 0.5)]
    calls = []
    for _ in range(3):
        for block in blocks:
            x = rng.standard_normal(block.shape[1])
            calls.append((block, x / np.linalg.norm(x), int(rng.integers(1, block.shape[0]))))
    monkeypatch.setattr(_jit, "HAVE_NUMBA", True)
    got = [_partial(block, x, top_m) for block, x, top_m in calls]
    assert sum(p.bin_sums.nnz > 0 for p in got) >= 6
    assert not power_module._SCRATCH.__dict__["accumulator"].any()
    monkeypatch.setattr(_jit, "HAVE_NUMBA", False)
    for partial, (block, x, top_m) in zip(got, calls):
        _assert_same_bits(partial, _partial(block, x, top_m))


@pytest.mark.parametrize("loop", ["_pass_jit", "_binned_jit"])
def test_an_interrupted_call_leaves_no_rows_in_the_next_ones_sums(monkeypatch: pytest.MonkeyPatch,
                                                                 loop: str) -> None:
    """A KeyboardInterrupt (Ctrl-C in a local run: raised when a compiled loop returns) after the pass over the rows
    or after the top rows were added into this thread's dense vector: the vector is left zero, so the next call's
    sums hold none of the interrupted call's rows, and the per-row arrays the interrupted call left (here replaced
    by values no call computes) are all written anew before the next call reads them."""
    monkeypatch.setattr(_jit, "HAVE_NUMBA", True)
    rng = np.random.default_rng(23)
    interrupted, block = _block(rng, 300, 25, 0.6), _block(rng, 300, 25, 0.6)
    x = rng.standard_normal(25)
    x /= np.linalg.norm(x)
    real = getattr(power_module, loop)
    rows = {"_pass_jit": 4, "_binned_jit": 3}[loop]  # (its rows: a call on none is a warm-up, not interrupted)

    def then_interrupted(*args):  # noqa: ANN002, ANN202
        result = real(*args)
        if args[rows].shape[0]:
            raise KeyboardInterrupt
        return result

    monkeypatch.setattr(power_module, loop, then_interrupted)
    kept = power_module._SCRATCH.take("accumulator", 25, np.float64, zeroed=True)
    with pytest.raises(KeyboardInterrupt):
        _partial(interrupted, x, 120)
    assert not kept.any()
    for name in ("weights", "scores"):
        power_module._SCRATCH.take(name, 300, np.float64).fill(np.nan)
    power_module._SCRATCH.take("bins", 300, np.int64).fill(-1)
    monkeypatch.setattr(power_module, loop, real)
    got = _partial(block, x, 120)
    assert got.bin_sums.nnz > 0
    monkeypatch.setattr(_jit, "HAVE_NUMBA", False)
    _assert_same_bits(got, _partial(block, x, 120))


@pytest.mark.parametrize(("last", "entries"), [(False, 16_384), (True, 16_384), (True, 1)],
                         ids=["first-row", "last-row", "last-row-blocks-of-one"])
def test_rows_past_the_float64_limit_change_neither_the_compilations_nor_the_products(
        monkeypatch: pytest.MonkeyPatch, last: bool, entries: int) -> None:
    """A block with a row whose product overflows takes the numpy path (which recomputes that row from its unit
    row), also when the compiled pass has already added earlier blocks into its sum (the row last, blocks of one
    entry): the compiled loops are compiled all the same on that call (when a compilation happens must not depend
    on the data)."""
    monkeypatch.setattr(_jit, "HAVE_NUMBA", True)
    monkeypatch.setattr(power_module, "PASS_ENTRIES", entries)
    for name, loop in {"_pass_jit": "_pass_loop", "_binned_jit": "_binned_loop"}.items():
        monkeypatch.setattr(power_module, name, _jit._Lazy(getattr(power_module, loop)))
    rng = np.random.default_rng(24)
    for _ in range(100):  # a row whose product with its own direction rounds past the limit
        row = rng.random(3)
        row = row / np.linalg.norm(row) * np.finfo(np.float64).max
        if not (np.all(np.isfinite(row)) and np.isfinite(row_norms_of(row[None, :])[0])):
            continue
        x = row / row_norms_of(row[None, :])[0]
        x /= np.linalg.norm(x)
        with np.errstate(over="ignore"):
            if not np.isfinite(row @ x):
                break
    else:
        raise AssertionError("no overflowing row found")
    others = [[0.1, 0.2, -0.3], [0.0, 0.5, 0.5]]
    block = sp.csr_array(np.vstack([*others, row] if last else [row, *others]))
    got = _partial(block, x, 5, bound=1.0)
    assert power_module._pass_jit.compiled is not None
    assert power_module._binned_jit.compiled is not None
    monkeypatch.setattr(_jit, "HAVE_NUMBA", False)
    _assert_same_bits(got, _partial(block, x, 5, bound=1.0))


def test_the_compiled_loops_are_compiled_whichever_path_the_rows_take(monkeypatch: pytest.MonkeyPatch) -> None:
    """When a compilation happens must not depend on the data: every loop of the compiled step is compiled (or
    loaded) for the block's types on the first call even when the rows take the selector product, so a later call
    whose rows take the bins' dense vectors (or the per-bin loop) adds no compilation."""
    monkeypatch.setattr(_jit, "HAVE_NUMBA", True)
    loops = {"_binned_jit": "_binned_loop", "_pass_jit": "_pass_loop"}
    for name, loop in loops.items():  # none compiled yet
        monkeypatch.setattr(power_module, name, _jit._Lazy(getattr(power_module, loop)))
    rng = np.random.default_rng(17)
    for value_dtype in (np.float64, np.float32):
        wide = _block(rng, 200, 5000, 0.001, value_dtype)  # a few entries per bin: the selector product
        narrow = _block(rng, 200, 20, 0.8, value_dtype)  # the rows' entries outweigh the bins' dense vectors
        products: list[int] = []
        selected_product = power_module._selected_product

        def counted(*args, _products=products, _product=selected_product, **kwargs):  # noqa: ANN002, ANN003, ANN202
            _products.append(1)
            return _product(*args, **kwargs)

        monkeypatch.setattr(power_module, "_selected_product", counted)
        x = rng.standard_normal(5000)
        _partial(wide, x / np.linalg.norm(x), 150)
        assert products == [1]
        compiled = {name: getattr(power_module, name).compiled for name in loops}
        names = loops if value_dtype == np.float64 else ["_binned_jit"]  # (float32: the chunked products)
        signatures = {name: set(compiled[name].signatures) for name in names}
        assert all(signatures.values())
        assert any(str(sig[2].dtype) == np.dtype(value_dtype).name for sig in signatures["_binned_jit"])
        x = rng.standard_normal(20)
        _partial(narrow, x / np.linalg.norm(x), 150)
        assert products == [1]  # the dense vectors this time
        assert {name: set(compiled[name].signatures) for name in names} == signatures


def test_partitions_above_the_kept_size_use_fresh_arrays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_jit, "HAVE_NUMBA", True)
    monkeypatch.setattr(power_module, "SCRATCH_ROWS", 100)
    scratch = power_module._Scratch()
    small = scratch.take("a", 100, np.float64)
    assert np.shares_memory(scratch.take("a", 60, np.float64), small)  # kept and reused
    large = scratch.take("a", 101, np.float64)
    assert large.shape == (101,) and not np.shares_memory(large, small)  # fresh, and not kept:
    assert np.shares_memory(scratch.take("a", 100, np.float64), small)
    assert scratch.take("z", 101, np.float64, zeroed=True).sum() == 0.0
    rng = np.random.default_rng(19)
    block = _block(rng, 300, 25, 0.6)
    x = rng.standard_normal(25)
    got = _partial(block, x / np.linalg.norm(x), 120)
    monkeypatch.setattr(_jit, "HAVE_NUMBA", False)
    _assert_same_bits(got, _partial(block, x / np.linalg.norm(x), 120))


def test_inputs_of_other_types_compute_in_float64_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    """A float32 bound, float32 norms or norms as a list give the same bits on both paths, each computing in float64
    from the values given: a bound squared in float32 would clamp the scores off the grid's top (rows in bin 0, where
    the second pass would not put them)."""
    rng = np.random.default_rng(20)
    x = rng.standard_normal(30)
    x /= np.linalg.norm(x)
    block = _block(rng, 300, 30, 0.4, x=x)
    norms = row_norms_of(block)
    for bound in (1.1, 0.3, 2.3, 0.55):  # (2.3 in float32, squared in float32, rounds above its float64 square)
        for given_bound, given_norms in ((np.float32(bound), norms), (bound, norms.astype(np.float32)),
                                         (np.float64(bound), list(norms))):
            grid = ThresholdGrid.for_bound(given_bound)
            results = []
            for flag in (False, True):
                monkeypatch.setattr(_jit, "HAVE_NUMBA", flag)
                got = power_partial(block, given_norms, x, partition=1, row_norm_bound=given_bound, grid=grid,
                                    top_m=100)
                assert got.histogram[0] == 0
                second = power_module.filtered_sum(block, given_norms, x, row_norm_bound=given_bound, grid=grid,
                                                   index=0)
                assert not second.any()  # bin 0 is empty in the second pass too
                results.append(got)
            _assert_same_bits(results[1], results[0])
            monkeypatch.setattr(_jit, "HAVE_NUMBA", False)
            _assert_same_bits(results[0], power_partial(block, np.asarray(given_norms, dtype=np.float64), x,
                                                        partition=1, row_norm_bound=float(given_bound), grid=grid,
                                                        top_m=100))


@pytest.mark.parametrize("flag", [False, True])
def test_inputs_the_kernels_cannot_take_are_refused_on_both_paths(monkeypatch: pytest.MonkeyPatch,
                                                                  flag: bool) -> None:
    monkeypatch.setattr(_jit, "HAVE_NUMBA", flag)
    rng = np.random.default_rng(21)
    block = _block(rng, 50, 10, 0.5)
    norms = row_norms_of(block)
    x = np.ones(10) / np.sqrt(10)
    grid = ThresholdGrid.for_bound(1.0)
    for bad_norms in (norms[:1], np.concatenate([norms, norms])):  # broadcast, or longer than the rows
        with pytest.raises(ValueError, match="dimension mismatch"):
            power_partial(block, bad_norms, x, partition=0, row_norm_bound=1.0, grid=grid, top_m=10)
        with pytest.raises(ValueError, match="dimension mismatch"):
            power_module.filtered_sum(block, bad_norms, x, row_norm_bound=1.0, grid=grid, index=5)
    for wrong in (x[:-1], np.ones(11) / np.sqrt(11)):  # (the compiled loop would read past x, or ignore its end)
        with pytest.raises(ValueError, match="dimension mismatch"):
            power_partial(block, norms, wrong, partition=0, row_norm_bound=1.0, grid=grid, top_m=10)
    for bound in (np.nan, 0.0, -1.0):
        with pytest.raises(ValueError, match="row_norm_bound must be > 0"):
            power_partial(block, norms, x, partition=0, row_norm_bound=bound, grid=grid, top_m=10)
    with pytest.raises(ValueError, match="rows out of range"):
        power_module.binned_sums(block, np.array([-1, 3]), np.array([0, 0]), np.ones(2), 4)
    with pytest.raises(ValueError, match="rows out of range"):
        power_module.binned_sums(block, np.array([3, 50]), np.array([0, 0]), np.ones(2), 4)
    scores = np.linspace(0.0, 1.0, 20)
    for out in (np.zeros(10, dtype=np.int64), np.zeros(20), np.zeros(20, dtype=np.int64)[::-1].copy()[:20]):
        if out.shape == (20,) and out.dtype == np.int64:
            out.flags.writeable = False
        with pytest.raises(ValueError, match="out must be a writeable int64 array"):
            grid.bins_and_histogram(scores, out=out)
    out = np.full(20, -7, dtype=np.int64)
    bins, _histogram = grid.bins_and_histogram(scores, out=out)
    assert bins is out
    np.testing.assert_array_equal(out, grid.bins_searchsorted(scores))


@pytest.mark.slow
@pytest.mark.parametrize("workers_compiled", [True, False], ids=["compiled-workers", "numpy-workers"])
def test_workers_running_the_compiled_loops_return_the_same_aggregate(monkeypatch: pytest.MonkeyPatch,
                                                                      workers_compiled: bool) -> None:
    """Worker processes with the compiled loops (numba's default, ``DPPCA_DASK_NUMBA`` unset) or without them
    (``DPPCA_DASK_NUMBA=0``) (a real LocalCluster, two threads each: the reused arrays are per thread) return the
    aggregate of the other path run in this process, bit for bit, over three steps."""
    from distributed import Client, LocalCluster

    from dppca_dask.coordinator.requests import PowerStep
    from dppca_dask.coordinator import Coordinator, LocalExecutor, as_source

    if workers_compiled:
        monkeypatch.delenv("DPPCA_DASK_NUMBA", raising=False)
    else:
        monkeypatch.setenv("DPPCA_DASK_NUMBA", "0")
    monkeypatch.setattr(_jit, "HAVE_NUMBA", not workers_compiled)
    rng = np.random.default_rng(22)
    x = rng.standard_normal(40)
    x /= np.linalg.norm(x)
    matrix = sp.csr_array(sp.vstack([_block(rng, 700, 40, 0.3, x=x) for _ in range(3)], format="csr"))
    source = as_source(matrix)
    assert source.n_partitions >= 2
    grid = ThresholdGrid.for_bound(1.5)
    steps = [PowerStep(v / np.linalg.norm(v), 1.5, grid, top_m) for v, top_m in
             ((x, 200), (rng.standard_normal(40), 50), (rng.standard_normal(40), 2_000))]
    want = [LocalExecutor(source).execute(step) for step in steps]

    def compiled_here() -> bool:
        from dppca_dask.kernels import _jit as worker_jit

        return bool(worker_jit.HAVE_NUMBA)

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None,
                      host="127.0.0.1") as cluster, Client(cluster) as client:
        assert list(client.run(compiled_here).values()) == [workers_compiled]
        with Coordinator(client, source) as coordinator:
            got = [coordinator.execute(step) for step in steps]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.histogram, w.histogram)
        assert np.array_equal(g.full_sum.view(np.uint64), w.full_sum.view(np.uint64))
        assert g.cuts == w.cuts
        for gp, wp in zip(g.bin_sums, w.bin_sums):
            for name in ("indptr", "indices"):
                np.testing.assert_array_equal(getattr(gp, name), getattr(wp, name))
            assert np.array_equal(gp.data.view(np.uint64), wp.data.view(np.uint64))


@pytest.mark.parametrize(("value", "used"), [(None, True), ("1", True), ("0", False), (" 0 ", False),
                                             ("false", False), ("Off", False), ("no", False), ("yes", True)])
def test_the_compiled_loops_are_on_where_numba_is_installed_unless_turned_off(value: str | None, used: bool) -> None:
    """Installing numba asks for the compiled loops; ``DPPCA_DASK_NUMBA=0`` turns them off (a fresh process each:
    the choice is made when the package's kernels are imported)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "DPPCA_DASK_NUMBA"}
    if value is not None:
        env["DPPCA_DASK_NUMBA"] = value
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    out = subprocess.run([sys.executable, "-c", "from dppca_dask.kernels import _jit; print(_jit.HAVE_NUMBA)"],
                         check=True, capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.strip() == str(used)
