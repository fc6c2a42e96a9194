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
accounted for in δ (:func:`dppca_dask.algorithms.adaptive_power.pass_row_budget`).

Clipping scales a row to norm ``min(‖a‖, c)`` (it never drops rows); it is applied through per-row factors
``f = min(1, c/‖a‖)`` so the stored block is never copied: ``A'x = f ⊙ (Ax)`` and ``A'ᵀw = Aᵀ(f ⊙ w)``.

Cost: the private step is the plain step's two products (``A x`` and ``Aᵀw``, scipy's compiled loops) plus O(n)
vectorised work on the rows' scores (bins by :meth:`~dppca_dask.kernels.grid.ThresholdGrid.bins_and_histogram`,
compiled when numba is installed) and O(nnz of the top rows) for their contributions; nothing per row in Python.

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
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.kernels import _sparse
from dppca_dask.kernels._jit import HAVE_NUMBA, jit
from dppca_dask.kernels.grid import ThresholdGrid

__all__ = [
    "PowerPartial",
    "clip_factors",
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
    """Per-row scale ``min(1, c/‖a‖)`` (1 for empty rows and for an infinite bound)."""
    if not np.isfinite(row_norm_bound):
        return np.ones_like(norms)
    with np.errstate(divide="ignore"):
        return np.minimum(1.0, row_norm_bound / np.where(norms > 0, norms, np.inf))


def _scores(block: Any, norms: np.ndarray, x: np.ndarray, row_norm_bound: float) -> tuple[np.ndarray, ...]:
    factors = clip_factors(norms, row_norm_bound)
    projections = factors * _sparse.times(block, x).ravel()  # a'ᵀx for each clipped row
    return (factors, projections, _clamped_scores(norms, projections, row_norm_bound))


def _clamped_scores(norms: np.ndarray, projections: np.ndarray, row_norm_bound: float) -> np.ndarray:
    scores = np.minimum(norms, row_norm_bound) * np.abs(projections)
    if np.isfinite(row_norm_bound):
        # ‖a'‖·|⟨a', x⟩| ≤ c² in exact arithmetic; rounding may exceed it by a few ulps. Clamping keeps every row
        # out of bin 0, so the top grid value θ_0 = c² never filters a row (F_0 = 0 on every dataset).
        np.minimum(scores, row_norm_bound * row_norm_bound, out=scores)
    return scores


def _sweep(block: Any, norms: np.ndarray, x: np.ndarray, row_norm_bound: float,
           grid: ThresholdGrid) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One pass: each row's weight ``f·(a'ᵀx)``, its bin, the bins' histogram and ``Σ a'(a'ᵀx) = Aᵀ(f·(a'ᵀx))``."""
    if _sparse.chunked(block) and block.dtype != np.float64 and x.ndim == 1:  # float32: see kernels._sparse
        factors = clip_factors(norms, row_norm_bound)
        projections, weights, full_sum = _sparse.sweep(block, factors, x)
        bins, histogram = grid.bins_and_histogram(_clamped_scores(norms, projections, row_norm_bound))
        return weights, bins, histogram, full_sum
    factors, projections, scores = _scores(block, norms, x, row_norm_bound)
    bins, histogram = grid.bins_and_histogram(scores)
    weights = factors * projections  # a'(a'ᵀx) = f·a·(a'ᵀx)
    return weights, bins, histogram, _transpose_times(block, weights)


def _transpose_times(block: Any, weights: np.ndarray) -> np.ndarray:
    """``blockᵀ @ weights`` as a dense float64 vector."""
    return _sparse.transpose_times(block, weights).ravel()


def _binned_sums(block: Any, rows: np.ndarray, bins: np.ndarray, weights: np.ndarray, n_bins: int) -> sp.csr_array:
    """``Σ_{rows of bin b} weights_i·a_i`` for each bin, as a sparse ``n_bins × d`` matrix.

    The cost is the non-zeros of those rows: a compiled loop for a CSR block when numba is installed, else one
    sparse product, with the rows taken out first unless the block has 64-bit indices (a product with the whole
    block copies its index arrays when they are 32-bit). Both sum each bin's rows in ascending row order and drop
    exact zeros, as ``selector @ block`` does, so all three give the same values (column order within a row may
    differ: none is sorted).
    """
    if _binned_jit is not None and HAVE_NUMBA and sp.issparse(block) and block.format == "csr":
        order = np.argsort(bins, kind="stable")  # rows ascending within each bin
        rows, bins, weights = rows[order], bins[order], weights[order]
        capacity = int((block.indptr[rows + 1] - block.indptr[rows]).sum())  # the rows' non-zeros: an upper bound
        out_indices = np.empty(capacity, dtype=np.int64)
        out_data = np.empty(capacity, dtype=np.float64)
        out_indptr = np.zeros(n_bins + 1, dtype=np.int64)
        _binned_jit(block.indptr, block.indices, block.data, rows, bins, weights,  # float32 values: exact products
                    block.shape[1], out_indptr, out_indices, out_data)
        nnz = int(out_indptr[-1])
        return sp.csr_array((out_data[:nnz], out_indices[:nnz], out_indptr), shape=(n_bins, block.shape[1]))
    if (sp.issparse(block) and block.indices.dtype == np.int64 and block.indptr.dtype == np.int64
            and block.data.dtype == np.float64):
        # 64-bit indices and float64 values are not copied by the product, and taking the rows out first costs more
        # than it saves
        selector = sp.csr_array((weights, (bins, rows)), shape=(n_bins, block.shape[0]))
        return sp.csr_array(selector @ block)
    taken = block[rows] if sp.issparse(block) else np.asarray(block)[rows]
    selector = sp.csr_array((weights, (bins, np.arange(rows.shape[0]))), shape=(n_bins, rows.shape[0]))
    return sp.csr_array(selector @ taken)


def _binned_loop(indptr, indices, data, rows, bins, weights, d, out_indptr, out_indices, out_data):  # type: ignore[no-untyped-def]  # noqa: ANN001
    """Rows sorted by bin (ascending within a bin): each bin's weighted sum as one CSR row, zeros dropped."""
    sums = np.zeros(d)
    touched = np.zeros(d, dtype=np.bool_)
    columns = np.empty(d, dtype=np.int64)
    n_bins = out_indptr.shape[0] - 1
    nnz = 0
    r = 0
    for b in range(n_bins):
        count = 0
        while r < rows.shape[0] and bins[r] == b:
            row, w = rows[r], weights[r]
            for jj in range(indptr[row], indptr[row + 1]):
                col = indices[jj]
                sums[col] += data[jj] * w
                if not touched[col]:
                    touched[col] = True
                    columns[count] = col
                    count += 1
            r += 1
        for k in range(count):  # in first-touch order (scipy's product leaves its columns unsorted too)
            col = columns[k]
            if sums[col] != 0:
                out_indices[nnz] = col
                out_data[nnz] = sums[col]
                nnz += 1
            sums[col] = 0.0
            touched[col] = False
        out_indptr[b + 1] = nnz


_binned_jit = jit(_binned_loop)


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
    weights, bins, histogram, full_sum = _sweep(block, norms, x, row_norm_bound, grid)
    cumulative = np.cumsum(histogram[: grid.n_points])
    cut = int(np.searchsorted(cumulative, top_m, side="right")) - 1  # largest j with F_j <= top_m
    chosen = np.flatnonzero(bins <= cut) if cut >= 0 else np.zeros(0, dtype=np.int64)
    bin_sums = _binned_sums(block, chosen, bins[chosen], weights[chosen], grid.n_points)
    return PowerPartial(histogram=histogram, full_sum=full_sum, bin_sums=bin_sums, cuts={partition: cut})


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


def _combined(parts: tuple[PowerPartial, ...], bin_sums: Any) -> PowerPartial:
    return PowerPartial(np.sum([p.histogram for p in parts], axis=0), np.sum([p.full_sum for p in parts], axis=0),
                        bin_sums, union_cuts(parts))


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
