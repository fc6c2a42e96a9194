"""Per-partition kernels of power iteration: exact, no noise, no Dask.

One pass per iteration (seed 004 spec §4). For the broadcast unit vector x, a partition returns

- the histogram of its rows' bins on the public grid (how many rows each grid value would filter),
- the full partial sum ``S_p = Σ_a a'(a'ᵀx)`` over its rows ``a'`` clipped to the public bound ``c``,
- the contributions ``a'(a'ᵀx)`` of its highest-scoring rows, summed per grid bin: all rows of bin ``≤ cut_p``,
  where ``cut_p`` is the largest grid index such that at most ``top_m`` rows have a bin ``≤ cut_p`` (a sparse
  ``bins × d`` matrix, far smaller than the rows themselves, added up in the workers' tree; the coordinator keeps
  the gathered ones side by side and adds only the bins up to the released index, :func:`gather_power_partials`).

After the coordinator picks the threshold index ``j`` (privately), the filtered product is
``A(t)x = Σ_p S_p − Σ_{bins b ≤ j} bin_sums[b]``; a partition with ``cut_p < j`` did not return its rows of bins
``(cut_p, j]``, which :func:`filtered_sum` adds in a second pass over that partition only. Every partition is given
the whole ``top_m`` (never a share of it), sized so that the second pass is needed only with a small probability
accounted for in δ (:func:`dppca_dask.methods.adaptive_power.sequential.pass_row_budget`).

Clipping scales a row to norm ``min(‖a‖, c)`` (it never drops rows); it is applied through per-row factors
``f = min(1, c/‖a‖)`` so the stored block is never copied: ``A'x = f ⊙ (Ax)`` and ``A'ᵀw = Aᵀ(f ⊙ w)``. A row of
finite norm near the float64 limit can overflow ``Ax`` before ``f`` applies: :func:`clipped_times` recomputes such
rows from the unit row, so every clipped row's product is finite and the kernels see it as its clipped copy.

Cost: the private step is the plain step's two products (``A x`` and ``Aᵀw``, scipy's compiled loops) plus O(n)
vectorised work on the rows' scores (bins by :meth:`~dppca_dask.kernels.grid.ThresholdGrid.bins_and_histogram`) and
O(nnz of the top rows) for their contributions (:func:`binned_sums`); nothing per row in Python. With numba
installed (:mod:`dppca_dask.kernels._jit`; ``DPPCA_DASK_NUMBA=0`` turns it off), ``A x``, the O(n) work and ``Aᵀw``
are one compiled pass over blocks of rows (:func:`_pass_loop`, into arrays reused per thread, :class:`_Scratch`): a
block's rows are read from memory for their products and added into ``Aᵀw`` from the core's cache, so the
partition is read from memory once instead of twice, and the loop reads row pointers and indices as unsigned
integers; the top rows (a few per cent) are read once more for their per-bin sums (:func:`binned_sums`). One
partition of 1.25·10⁷ entries (54,348 rows, d = 20,000, 966 top rows at the 30th iterate; interleaved repeats) took
11.4-12.2 ms on one core against 12.1-12.6 ms for scipy's two products of the plain step and 12.5-13.4 ms with the
compiled loops of the release before (scipy's ``A x``, then one pass for ``Aᵀw`` adding the top rows into their bins'
dense vectors); with two threads working at once (two partitions) 11.7-13.3 ms against 12.4-13.5 ms and
12.9-14.1 ms. The same values either way, bit for bit (``tests/kernels/test_compiled_private_step.py``). On the
numpy path, under Dask's default heap setting (``MALLOC_TRIM_THRESHOLD_=65536``, which makes every large temporary
fresh memory; the embedded clusters set their own) the temporaries cost most: 50.5-51.0 ms against 40.3-40.5 ms
compiled on a slower machine, where the plain products took 37.0-37.3 ms.

Value types. Every value that bears sensitivity (scores, bins, the histogram, ``S_p`` and the bins' sums) is
accumulated in float64. Store partitions reach the kernels as float64: the read converts float32 values chunk by
chunk as it decodes them, once per read (:meth:`~dppca_dask.storage.MatrixStore.read_partition_with_norms`), so no
product converts anything. That was chosen by measurement (``benchmarks/bench_read_path.py``, one partition of
1.25·10⁷ float32 entries, one core; two runs, at load 7 and 15): the kernel takes 0.16-0.22 s on the float64 block,
0.37-0.66 s on the float32 block through scipy's products (which convert all values to float64 on every product)
and 0.21-0.31 s on the float32 block through the chunked loops of :mod:`dppca_dask.kernels._sparse` (values
converted chunk by chunk in cache, both products fused). Reading the partition as float64 costs 0.27-0.39 s against
0.21-0.30 s kept as float32: out of core both choices cost the same per step (0.43 s against 0.43 s, 0.60 s against
0.61 s), and persisted, float64 is 1.3-1.5x faster per step for 1.5x the memory. A float32 CSR block handed to a
kernel directly takes the chunked loops, whose values equal the float64 computation's bit for bit.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.kernels import _jit, _sparse
from dppca_dask.kernels._jit import jit
from dppca_dask.kernels.grid import ThresholdGrid

__all__ = [
    "PowerPartial",
    "added_in_order",
    "binned_sums",
    "clip_factors",
    "clipped_times",
    "filtered_sum",
    "gather_power_partials",
    "head_sum",
    "merge_power_partials",
    "power_partial",
    "select_filtered",
]


@dataclass(frozen=True, slots=True)
class PowerPartial:
    """Exact aggregate of one or more partitions for one power-iteration step (never leaves the coordinator)."""

    histogram: np.ndarray
    """Rows per bin (length ``grid.n_bins``)."""
    full_sum: np.ndarray
    """``Σ a'(a'ᵀx)`` over all rows (length d)."""
    bin_sums: sp.csr_array | tuple[sp.csr_array, ...]
    """``n_points × d``: row ``b`` is ``Σ a'(a'ᵀx)`` over the returned rows of bin ``b`` (see ``cuts``). At the
    coordinator (:func:`gather_power_partials`) a tuple of such matrices, whose sum it stands for."""
    cuts: dict[int, int]
    """For each partition: its rows of bin ``≤ cuts[p]`` are in ``bin_sums``, no other rows (``-1``: none)."""


def clip_factors(norms: np.ndarray, row_norm_bound: float) -> np.ndarray:
    """Per-row scale ``min(1, c/‖a‖)`` (1 for an infinite bound; 0 for a row whose norm is 0: an empty row, or
    one whose squares underflow, which is then left out)."""
    if not np.isfinite(row_norm_bound):
        return np.ones_like(norms)
    # c/‖a‖ overflows to inf for a row of tiny norm (below c·5.6e-309, e.g. 1e-209 at c = 1e100): its factor is 1
    # all the same, and the overflow warning, raised on the dataset with such a row only, must not be
    with np.errstate(divide="ignore", over="ignore"):
        return np.minimum(1.0, row_norm_bound / np.where(norms > 0, norms, np.inf))


def clipped_times(block: Any, norms: np.ndarray, x: np.ndarray, factors: np.ndarray,
                  row_norm_bound: float) -> np.ndarray:
    """``f ⊙ (A x)``: each clipped row's product ``a'ᵀx`` (``x`` a vector, or d×k: then n×k), finite for every row.

    A row whose values are near the float64 limit (its norm finite, so accepted by validation) can overflow ``aᵀx``
    before its factor ``f`` applies, even for a unit ``x`` (rounding, when ``‖a‖`` is within a few ulps of the
    limit), although ``a'ᵀx`` is at most ``c``: such rows are recomputed from the unit row, ``f‖a‖·(a/‖a‖)ᵀx``.
    One sum over the result decides whether any row needs it, so the usual case costs an O(n) sum.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        product = _sparse.times(block, x)
        product = product.ravel() if x.ndim == 1 else product.reshape(block.shape[0], x.shape[1])
        out = factors * product if product.ndim == 1 else factors[:, None] * product
        total = float(np.sum(out))  # finite only if every entry is: the per-row check runs only when it is not
    if not np.isfinite(total) and np.isfinite(row_norm_bound):
        finite = np.isfinite(out) if out.ndim == 1 else np.isfinite(out).all(axis=1)
        rows = np.flatnonzero(~finite)  # may be empty: a sum of finite entries can overflow
        if rows.size:
            out[rows] = _clipped_rows_times(block, norms, x, rows, factors)
    return out


def _clipped_rows_times(block: Any, norms: np.ndarray, x: np.ndarray, rows: np.ndarray,
                        factors: np.ndarray) -> np.ndarray:
    """``f‖a‖·(a/‖a‖)ᵀx`` for the given rows (entries of ``a/‖a‖`` are at most 1: no overflow). ``f‖a‖`` is
    ``min(‖a‖, c)`` up to rounding, and 0 where ``f = c/‖a‖`` underflows, as the rest of the kernel scales the row."""
    scale = 1.0 / norms[rows]
    if sp.issparse(block):
        unit = sp.csr_array(sp.diags_array(scale) @ sp.csr_array(block)[rows, :].astype(np.float64))
    else:
        unit = np.asarray(block, dtype=np.float64)[rows] * scale[:, None]
    product = np.asarray(unit @ x, dtype=np.float64)
    keep = factors[rows] * norms[rows]
    return keep * product if product.ndim == 1 else keep[:, None] * product


def _scores(block: Any, norms: np.ndarray, x: np.ndarray, row_norm_bound: float) -> tuple[np.ndarray, ...]:
    factors = clip_factors(norms, row_norm_bound)
    projections = clipped_times(block, norms, x, factors, row_norm_bound)  # a'ᵀx for each clipped row
    return (factors, projections, _clamped_scores(norms, projections, row_norm_bound))


def _clamped_scores(norms: np.ndarray, projections: np.ndarray, row_norm_bound: float) -> np.ndarray:
    scores = np.minimum(norms, row_norm_bound) * np.abs(projections)
    if np.isfinite(row_norm_bound):
        # ‖a'‖·|⟨a', x⟩| ≤ c² in exact arithmetic; rounding may exceed it by a few ulps. Clamping keeps every row
        # out of bin 0, so the top grid value θ_0 = c² never filters a row (F_0 = 0 on every dataset).
        np.minimum(scores, row_norm_bound * row_norm_bound, out=scores)
    return scores


def _rows_and_bound(block: Any, norms: Any, row_norm_bound: float) -> tuple[np.ndarray, float]:
    """The row norms as float64, one per row, and the bound as a float (> 0, or +inf): both paths of the kernels
    compute from these in float64, whatever types they were given (a float32 bound squared in float32 would put
    the clamp of the scores off the grid's top, which is computed in float64)."""
    norms = np.asarray(norms, dtype=np.float64)
    if norms.shape != (block.shape[0],):
        raise ValueError(f"dimension mismatch: {norms.shape} norms for {block.shape[0]} rows")
    bound = float(row_norm_bound)
    if not bound > 0:  # (NaN too)
        raise ValueError(f"row_norm_bound must be > 0; got {row_norm_bound}")
    return norms, bound


def _sweep(block: Any, norms: np.ndarray, x: np.ndarray, row_norm_bound: float,
           grid: ThresholdGrid) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One pass (the numpy path): each row's weight ``f·(a'ᵀx)``, its bin, the bins' histogram and
    ``Σ a'(a'ᵀx) = Aᵀ(f·(a'ᵀx))``; ``norms`` and ``row_norm_bound`` as :func:`_rows_and_bound` gives them."""
    if _sparse.chunked(block) and block.dtype != np.float64 and x.ndim == 1:  # float32: see kernels._sparse
        factors = clip_factors(norms, row_norm_bound)
        projections, weights, full_sum = _sparse.sweep(block, factors, x)
        bins, histogram = grid.bins_and_histogram(_clamped_scores(norms, projections, row_norm_bound))
        return weights, bins, histogram, full_sum
    factors, projections, scores = _scores(block, norms, x, row_norm_bound)
    bins, histogram = grid.bins_and_histogram(scores)
    weights = factors * projections  # a'(a'ᵀx) = f·a·(a'ᵀx)
    return weights, bins, histogram, _transpose_times(block, weights)


class _Scratch(threading.local):
    """Arrays of one entry per row that the compiled private step reuses from call to call, per thread.

    Dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536`` (the package's embedded clusters do not:
    ``dppca_dask.cluster.worker-environ``), under which every array above 128 KiB is fresh memory from the system
    whose pages fault in on first write: the compiled kernel on one partition (1.25·10⁷ entries, 54,348 rows) took
    42.9-43.1 ms with a fresh array for each per-row value, against 40.3-40.5 ms with these kept (40.0-40.3 ms under
    glibc's default setting either way). They are kept for partitions of at most :data:`SCRATCH_ROWS` rows (a row
    count is public; a larger partition allocates as before, its work dwarfs it): at most about
    ``24·SCRATCH_ROWS`` bytes per thread, and one vector of d for the top rows' per-bin sums of
    :func:`binned_sums`. Nothing a kernel returns refers to them.
    """

    def take(self, name: str, n: int, dtype: type, *, zeroed: bool = False) -> np.ndarray:
        """``n`` entries of the array ``name`` (of one type); ``zeroed``: all zero when new (its user leaves it so)."""
        if n > SCRATCH_ROWS:
            return np.zeros(n, dtype=dtype) if zeroed else np.empty(n, dtype=dtype)
        kept = self.__dict__.get(name)
        if kept is None or kept.shape[0] < n or kept.dtype != dtype:
            kept = self.__dict__[name] = np.zeros(n, dtype=dtype) if zeroed else np.empty(n, dtype=dtype)
        return kept[:n]


#: Largest partition (rows) whose per-row arrays the compiled private step keeps between calls (8 MiB each).
SCRATCH_ROWS = 2**20
_SCRATCH = _Scratch()


def _transpose_times(block: Any, weights: np.ndarray) -> np.ndarray:
    """``blockᵀ @ weights`` as a dense float64 vector."""
    return _sparse.transpose_times(block, weights).ravel()


def binned_sums(block: Any, rows: np.ndarray, bins: np.ndarray, weights: np.ndarray, n_bins: int) -> sp.csr_array:
    """``Σ_{rows of bin b} weights_i·a_i`` for each bin, as a sparse ``n_bins × d`` matrix.

    ``weights`` may also be a ``len(rows) × k`` matrix: then the result is ``n_bins × (k·d)``, bin ``b``'s sums for
    column ``j`` of the weights in columns ``j·d … (j+1)·d − 1`` (the block kernel's layout).

    Each bin's rows are summed in ascending row order (the kernels pass them ascending, the order in which the
    product sums them) and exact zeros are dropped, as ``selector @ block`` does, so the values are that product's
    bit for bit (its columns come unsorted; these come sorted). The cost is the non-zeros of those rows: taken out
    of a CSR block once and accumulated bin by bin into a dense vector by scipy's compiled loop (``csc_matvec``;
    ``csc_matvecs`` for k columns), keeping its non-zeros. That took 4.4-4.9 ms for the 3,000-3,400 top rows
    (7·10⁵ entries, 5-6 bins) of a 1.25·10⁷-entry partition with d = 20,000, against 7.1-8.9 ms for the sparse
    product (one core), which counts the result's entries in a first pass and builds each row through a linked
    list. Clearing and scanning a bin's dense vector costs d, so when the used bins' vectors outweigh the rows'
    entries (wide d, many sparsely filled bins) the product is used instead. With the compiled loops
    (:mod:`dppca_dask.kernels._jit`) a vector of weights is accumulated by :func:`_binned_loop`, which reads the rows
    where they are instead of taking them out: for the 2,784 top rows (6.4·10⁵ entries, 5 bins) of a benchmark
    partition at a late iterate, 1.6 ms for the loop and 2.0-2.9 ms in all, against 3.6 ms.
    """
    d = block.shape[1]
    matrix = weights.ndim == 2
    k = weights.shape[1] if matrix else 1
    if k == 0:
        return sp.csr_array((n_bins, 0))
    if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= block.shape[0]):
        raise ValueError(f"rows out of range for a block of {block.shape[0]} rows")
    order = np.lexsort((rows, bins))  # by bin, rows ascending within a bin, whatever the path below
    rows, bins, weights = rows[order], bins[order], np.ascontiguousarray(weights[order], dtype=np.float64)
    width = k * d
    index_type = _index_type(n_bins, width)  # a column index and the result's entries
    compiled = _binned_jit if _jit.HAVE_NUMBA and not matrix and _sparse.chunked(block) else None
    if compiled is not None:
        # Compile (or load) the loop for these types now, on no rows, whichever path the data takes below: when a
        # compilation happens (a second or more) must not depend on the rows' entries
        _warm_binned(block, index_type)
    if not (sp.issparse(block) and block.format == "csr") or _sparse._sparsetools is None:
        return _selected_product(block, rows, bins, weights, n_bins)
    # A bin's dense vector costs d to clear and scan: worth it while the rows hold at least d entries per used bin
    # (measured, dense vectors against the product, the same bits: 0.54-0.57x its time where used bins × d is
    # 0.2-0.9 times the rows' entries, 1.7-30x where it is 2.8-650 times)
    entries = int((block.indptr[rows + 1] - block.indptr[rows]).sum())
    used = int(np.count_nonzero(np.bincount(bins, minlength=n_bins))) if bins.size else 0
    if used * d > entries:
        return _selected_product(block, rows, bins, weights, n_bins)
    bounds = np.searchsorted(bins, np.arange(n_bins + 1), side="left")
    counts = np.zeros(n_bins + 1, dtype=index_type)
    if compiled is not None:
        # The rows are read where they are (no copy); a bin keeps at most d sums, and used × d <= entries here
        sums, columns = np.empty(used * d), np.empty(used * d, dtype=index_type)
        kept = compiled(block.indptr, _unsigned(block.indices), block.data, rows, bounds, weights,
                        _SCRATCH.take("accumulator", d, np.float64, zeroed=True), sums, columns, counts)
        return sp.csr_array((sums[:kept], columns[:kept], np.cumsum(counts, dtype=index_type)), shape=(n_bins, d))
    taken = block[rows]
    pointers = taken.indptr.astype(taken.indices.dtype, copy=False)
    values = taken.data.astype(np.float64, copy=False)  # float32 and integers convert exactly, as the product does
    found_indices, found_values = [], []
    accumulator = np.zeros((d, k)) if matrix else np.zeros(d)
    for b in np.flatnonzero(np.diff(bounds)):
        r0, r1 = int(bounds[b]), int(bounds[b + 1])
        s, e = int(pointers[r0]), int(pointers[r1])
        accumulator.fill(0.0)
        if not matrix:
            _sparse._sparsetools.csc_matvec(d, r1 - r0, pointers[r0 : r1 + 1] - s, taken.indices[s:e], values[s:e],
                                            weights[r0:r1], accumulator)
            sums = accumulator
        else:
            _sparse._sparsetools.csc_matvecs(d, r1 - r0, k, pointers[r0 : r1 + 1] - s, taken.indices[s:e],
                                             values[s:e], weights[r0:r1].ravel(), accumulator.ravel())
            sums = accumulator.T.ravel()  # column j's sums at j·d + c
        found = np.flatnonzero(sums)
        found_indices.append(found.astype(index_type, copy=False))
        found_values.append(sums[found])
        counts[b + 1] = found.shape[0]
    if not found_indices:
        return sp.csr_array((n_bins, width))
    indptr = np.cumsum(counts, dtype=index_type)
    return sp.csr_array((np.concatenate(found_values), np.concatenate(found_indices), indptr), shape=(n_bins, width))


def _unsigned(indices: np.ndarray) -> np.ndarray:
    """Column indices viewed as unsigned integers of their width: a compiled loop indexes with them without the
    check for negative indices that signed ones carry (every index is checked to lie in ``[0, d)`` when read)."""
    return indices.view(np.uint32 if indices.dtype.itemsize == 4 else np.uint64)


def _binned_loop(indptr, indices, data, rows, bounds, weights, accumulator, found_values, found_index, counts):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202, E501
    """Compiled dense-vector path of :func:`binned_sums` for a vector of weights, reading each row in place: bin
    ``b``'s rows (``rows[bounds[b]:bounds[b+1]]``, ascending) are accumulated into ``accumulator`` as scipy's
    ``csc_matvec`` does (``acc[col] += value·weight``, row after row), and its non-zero sums are appended to
    ``found_values``/``found_index`` in column order, their number in ``counts[b + 1]``. Returns the number kept."""
    kept = 0
    d = accumulator.shape[0]
    for b in range(bounds.shape[0] - 1):
        if bounds[b] == bounds[b + 1]:
            continue
        for t in range(bounds[b], bounds[b + 1]):
            row = rows[t]
            weight = weights[t]
            for j in range(indptr[row], indptr[row + 1]):
                accumulator[indices[j]] += np.float64(data[j]) * weight
        start = kept
        for column in range(d):  # without a branch: written at the next free place (kept < used bins × d), kept
            value = accumulator[column]  # if not an exact zero
            found_values[kept] = value
            found_index[kept] = column
            kept += value != 0.0  # exact zeros are dropped (NaN kept), as np.flatnonzero does
            accumulator[column] = 0.0
        counts[b + 1] = kept - start
    return kept


_binned_jit = jit(_binned_loop)


def _selected_product(block: Any, rows: np.ndarray, bins: np.ndarray, weights: np.ndarray,
                      n_bins: int) -> sp.csr_array:
    """:func:`binned_sums` as a selector matrix's product with the rows taken out, column by column of the weights
    (the blocks of the result side by side): for dense blocks, sparse blocks of another format, and bins too sparsely
    filled for a dense vector each. Column indices are 32-bit when they fit, as :func:`binned_sums` gives them."""
    taken = block[rows] if sp.issparse(block) else np.asarray(block)[rows]
    columns = weights[:, None] if weights.ndim == 1 else weights
    positions = np.arange(rows.shape[0])
    pieces = [sp.csr_array(sp.csr_array((columns[:, j], (bins, positions)), shape=(n_bins, rows.shape[0])) @ taken)
              for j in range(columns.shape[1])]
    result = pieces[0] if len(pieces) == 1 else sp.csr_array(sp.hstack(pieces, format="csr"))
    if n_bins * result.shape[1] < 2**31 and result.indices.dtype != np.int32:
        result = sp.csr_array((result.data, result.indices.astype(np.int32), result.indptr.astype(np.int32)),
                              shape=result.shape)
    return result


def power_partial(
    block: Any,
    norms: np.ndarray,
    x: np.ndarray,
    *,
    partition: int,
    row_norm_bound: float,
    grid: ThresholdGrid,
    top_m: int,
) -> PowerPartial:
    """One partition's share of a power-iteration step (see the module docstring).

    ``block`` is a float64 ``csr_array`` or dense array of the partition's rows, ``norms`` their stored L2 norms,
    ``x`` the broadcast unit vector.
    """
    norms, row_norm_bound = _rows_and_bound(block, norms, row_norm_bound)
    fusable = _fusable(block, x)
    found = None
    if fusable:  # (its pass runs on every such call; binned_sums compiles its loop before the data picks a path)
        found = _one_pass_partial(block, norms, x, row_norm_bound, grid, top_m)
    if found is not None:
        histogram, full_sum, bin_sums, cut = found
    else:  # the numpy path (also for a fusable block whose rows' products are not finite)
        weights, bins, histogram, full_sum = _sweep(block, norms, x, row_norm_bound, grid)
        cut = _cut(histogram, grid.n_points, top_m)
        chosen = np.flatnonzero(bins <= cut) if cut >= 0 else np.zeros(0, dtype=np.int64)
        bin_sums = binned_sums(block, chosen, bins[chosen], weights[chosen], grid.n_points)
    return PowerPartial(histogram=histogram, full_sum=full_sum, bin_sums=bin_sums, cuts={partition: cut})


def _cut(histogram: np.ndarray, n_points: int, top_m: int) -> int:
    """The largest grid index ``j`` with ``F_j <= top_m`` rows in bins ``<= j`` (``-1``: none)."""
    return int(np.searchsorted(np.cumsum(histogram[:n_points]), top_m, side="right")) - 1


def _fusable(block: Any, x: np.ndarray) -> bool:
    """Whether :func:`power_partial` takes the compiled path's pass over blocks of rows (:func:`_one_pass_partial`):
    compiled loops on, a vector ``x``, a float64 CSR block with columns."""
    return (_jit.HAVE_NUMBA and _pass_jit is not None and _binned_jit is not None and x.ndim == 1
            and _sparse.chunked(block) and block.data.dtype == np.float64 and block.shape[1] > 0)


def _index_type(n_bins: int, width: int) -> np.dtype[Any]:
    """The bins' sums' column index type: 32-bit while ``n_bins × width`` entries fit."""
    return np.dtype(np.int32 if n_bins * width < 2**31 else np.int64)


def _one_pass_partial(block: Any, norms: np.ndarray, x: np.ndarray, row_norm_bound: float, grid: ThresholdGrid,
                      top_m: int) -> tuple[np.ndarray, np.ndarray, sp.csr_array, int] | None:
    """:func:`power_partial`'s histogram, full sum, bins' sums and cut on the compiled path (a :func:`_fusable`
    block), or ``None`` where a row's product is not finite (values near the float64 limit: the numpy path
    recomputes such rows).

    One compiled pass over the rows (:func:`_pass_loop`) computes each row's ``aᵀx``, weight and score and adds the
    rows into ``Aᵀw`` a block of rows (:data:`PASS_ENTRIES` entries) at a time, while the block is still in the
    core's cache: the partition is read from memory once instead of twice (``A x``, then ``Aᵀw``). The bins and the
    cut follow from the scores; the top rows (bin ``<= cut``, a few per cent of the rows at most) are then read once
    more, where they are, by :func:`binned_sums`. The same values as the numpy path bit for bit: each row's ``aᵀx``
    sums its entries in order as scipy's ``csr_matvec`` does, ``Aᵀw`` adds the rows in row order as its
    ``csc_matvec`` does."""
    assert _pass_jit is not None  # (_fusable)
    n, d = block.shape
    _sparse._check(x, d)  # (the compiled loop reads whatever it is given; scipy's products check)
    weights = _SCRATCH.take("weights", n, np.float64)
    scores = _SCRATCH.take("scores", n, np.float64)
    full_sum = np.zeros(d)
    if not _pass_jit(_unsigned(block.indptr), _unsigned(block.indices), block.data,
                     np.ascontiguousarray(x, dtype=np.float64), norms, row_norm_bound, weights, scores, full_sum,
                     PASS_ENTRIES):
        return None
    bins, histogram = grid.bins_and_histogram(scores, out=_SCRATCH.take("bins", n, np.int64))
    cut = _cut(histogram, grid.n_points, top_m)
    chosen = np.flatnonzero(bins <= cut) if cut >= 0 else np.zeros(0, dtype=np.int64)
    return histogram, full_sum, binned_sums(block, chosen, bins[chosen], weights[chosen], grid.n_points), cut


def _warm_binned(block: Any, index_type: np.dtype[Any]) -> None:
    """Compile (or load) :func:`_binned_loop` for the block's types and this index type, on no rows."""
    assert _binned_jit is not None
    none, no_index = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=index_type)
    _binned_jit(block.indptr, _unsigned(block.indices), block.data, none, none, np.zeros(0), np.zeros(0),
                np.zeros(0), no_index, no_index)


def _pass_loop(indptr, indices, data, x, norms, bound, weights, scores, out, block_entries):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202, E501
    """The compiled private step's pass over the rows, in blocks of rows of at most ``block_entries`` entries (a row
    with more is a block of its own): each row's ``aᵀx`` (its entries summed in order, as scipy's ``csr_matvec``
    does), then its factor ``f`` (:func:`clip_factors`), ``p = f·(aᵀx)``, weight ``w = f·p`` and clamped score
    (:func:`_clamped_scores`), the numpy path's operations on the same values; then the block's rows are added into
    ``out += Aᵀw`` row after row (``out[col] += value·w``, as scipy's ``csc_matvec`` does) while they are still in
    cache. False as soon as a row's ``p`` is not finite (the caller then takes the numpy path; ``out`` is
    discarded). Indices and row pointers are unsigned views (:func:`_unsigned`): a compiled loop then indexes
    without the check for negative indices that signed ones carry."""
    finite_bound = bound < np.inf
    square = bound * bound
    n = norms.shape[0]
    start = 0
    while start < n:
        stop = start + 1  # the rows of the block: at least one, then while their entries are at most block_entries
        while stop < n and indptr[stop + 1] - indptr[start] <= block_entries:
            stop += 1
        for i in range(start, stop):
            product = 0.0
            for j in range(indptr[i], indptr[i + 1]):
                product += data[j] * x[indices[j]]
            norm = norms[i]
            if not finite_bound:
                factor = 1.0
            elif norm > 0.0:
                factor = min(1.0, bound / norm)
            else:
                factor = 0.0
            p = factor * product
            if not abs(p) < np.inf:
                return False
            weights[i] = factor * p
            score = min(norm, bound) * abs(p)
            if finite_bound:
                score = min(score, square)
            scores[i] = score
        for i in range(start, stop):
            weight = weights[i]
            for j in range(indptr[i], indptr[i + 1]):
                out[indices[j]] += data[j] * weight
        start = stop
    return True


_pass_jit = jit(_pass_loop)
#: Entries per block of rows of :func:`_pass_loop` (a row with more is a block of its own): read from memory for
#: their products, added into ``Aᵀw`` from the core's cache.
PASS_ENTRIES = 16_384


def added_bin_sums(parts: Any) -> sp.csr_array:
    """The partials' bins' sums added, in the partials' order (a node of the tree reduction)."""
    bin_sums = parts[0].bin_sums
    for p in parts[1:]:
        bin_sums = bin_sums + p.bin_sums
    return sp.csr_array(bin_sums)


def stacked_bin_sums(parts: Any) -> tuple[sp.csr_array, ...]:
    """The partials' bins' sums side by side, in the partials' order (the coordinator's last combination)."""
    pieces: list[sp.csr_array] = []
    for p in parts:
        pieces.extend(p.bin_sums if isinstance(p.bin_sums, tuple) else (p.bin_sums,))
    return tuple(pieces)


def union_cuts(parts: Any) -> dict[int, int]:
    """The partials' ``cuts`` in one mapping (each partition is in one partial)."""
    cuts: dict[int, int] = {}
    for p in parts:
        cuts.update(p.cuts)
    return cuts


def added_in_order(arrays: Any) -> np.ndarray:
    """The arrays added one after another, in their order: the values of ``np.sum(arrays, axis=0)`` bit for bit,
    without stacking them into a new array first (0.55 ms of the coordinator's work per step at d = 20,000 and
    eight partials, against 0.05 ms)."""
    total = np.array(arrays[0], copy=True)
    for array in arrays[1:]:
        total += array
    return total


def _combined(parts: tuple[PowerPartial, ...], bin_sums: Any) -> PowerPartial:
    return PowerPartial(added_in_order([p.histogram for p in parts]), added_in_order([p.full_sum for p in parts]), bin_sums,
                        union_cuts(parts))


def merge_power_partials(*parts: PowerPartial) -> PowerPartial:
    """Combine partials (a node of the tree reduction): every field is a sum or a union."""
    return _combined(parts, added_bin_sums(parts))


def gather_power_partials(*parts: PowerPartial) -> PowerPartial:
    """Combine the gathered partials at the coordinator: as :func:`merge_power_partials`, but the bins' sums are
    kept side by side (a tuple) instead of added.

    The coordinator needs one prefix of them, the bins up to the released threshold index (:func:`select_filtered`),
    and summing that prefix of each partial costs the prefix's entries. Adding whole sparse matrices first costs
    all their entries and a fresh matrix per addition: 12.6 ms per step for eight partials of 1.25·10⁷ stored
    entries against 0.9 ms (one core; 4.2 ms when the head is every bin). The worker-side tree keeps adding
    (:func:`merge_power_partials`), which keeps what travels bounded by ``n_points × d`` whatever the partition
    count.
    """
    return _combined(parts, stacked_bin_sums(parts))


def head_sum(bin_sums: sp.csr_array | tuple[sp.csr_array, ...], index: int, width: int) -> np.ndarray:
    """``Σ_{b ≤ index} bin_sums[b]`` as a dense float64 vector of length ``width``.

    A tuple of pieces is summed bin by bin: each bin's row is the sum of the pieces' rows in their order, and the
    rows are added in bin order. That is the arithmetic of adding the pieces first (:func:`merge_power_partials`)
    and then summing the head's rows, so the result is the same bit for bit; only the bins up to ``index`` are read.
    """
    pieces = bin_sums if isinstance(bin_sums, tuple) else (bin_sums,)
    out = np.zeros(width)
    if not pieces:
        return out
    for b in range(min(index + 1, pieces[0].shape[0])):
        spans = [(int(p.indptr[b]), int(p.indptr[b + 1])) for p in pieces]
        if all(lo == hi for lo, hi in spans):
            continue
        indices = np.concatenate([p.indices[lo:hi] for p, (lo, hi) in zip(pieces, spans)])
        values = np.concatenate([p.data[lo:hi] for p, (lo, hi) in zip(pieces, spans)])
        out += np.bincount(indices, weights=values, minlength=width)  # each column's entries in the pieces' order
    return out


def select_filtered(total: PowerPartial, index: int) -> tuple[np.ndarray, dict[int, int]]:
    """Returned contributions of the rows of bin ``≤ index``, and the partitions that need a second pass.

    A partition whose cut is below ``index`` returned only its bins ``≤ cut``; the second pass adds its rows of
    bins in ``(cut, index]``. Returns the sum and ``{partition: cut}`` for those partitions.
    """
    incomplete = {p: c for p, c in sorted(total.cuts.items()) if c < index}
    return head_sum(total.bin_sums, index, total.full_sum.shape[0]), incomplete


def filtered_sum(
    block: Any,
    norms: np.ndarray,
    x: np.ndarray,
    *,
    row_norm_bound: float,
    grid: ThresholdGrid,
    index: int,
    above: int = -1,
) -> np.ndarray:
    """Exact ``Σ a'(a'ᵀx)`` over the partition's rows of bin in ``(above, index]`` (the second pass)."""
    norms, row_norm_bound = _rows_and_bound(block, norms, row_norm_bound)
    factors, projections, scores = _scores(block, norms, x, row_norm_bound)  # the first pass's scores and bins
    bins = grid.bins(scores)
    weights = np.where((bins <= index) & (bins > above), factors * projections, 0.0)
    return _transpose_times(block, weights)


def gram_times(block: Any, norms: np.ndarray, x: np.ndarray, *, row_norm_bound: float) -> np.ndarray:
    """``A'ᵀA'x`` for the partition's rows clipped to ``row_norm_bound`` (no filtering); ``x`` is d or d×b."""
    factors = clip_factors(norms, row_norm_bound)
    weights = factors * factors
    product = _sparse.times(block, x)
    product = weights * product if product.ndim == 1 else weights[:, None] * product
    return _sparse.transpose_times(block, product)


def plain_gram_times(block: Any, x: np.ndarray) -> np.ndarray:
    """``AᵀAx`` for the partition (no clipping): the non-private reference step."""
    return _sparse.transpose_times(block, _sparse.times(block, x))


def gram_matrix(block: Any, norms: np.ndarray, *, row_norm_bound: float) -> np.ndarray:
    """Dense ``A'ᵀA'`` (d×d) of the partition's clipped rows."""
    factors = clip_factors(norms, row_norm_bound)
    if sp.issparse(block):
        scaled = sp.csr_array(block, dtype=np.float64, copy=True)
        scaled.data *= np.repeat(factors, np.diff(scaled.indptr))
        return np.asarray((scaled.T @ scaled).toarray(), dtype=np.float64)
    scaled_dense = np.asarray(block, dtype=np.float64) * factors[:, None]
    return scaled_dense.T @ scaled_dense
