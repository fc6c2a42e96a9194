"""Per-partition kernels of power iteration: exact, no noise, no Dask.

One pass per iteration (seed 004 spec §4). For the broadcast unit vector x, a partition returns

- the histogram of its rows' bins on the public grid (how many rows each grid value would filter),
- the full partial sum ``S_p = Σ_a a'(a'ᵀx)`` over its rows ``a'`` clipped to the public bound ``c``,
- the contributions ``a'(a'ᵀx)`` of its highest-scoring rows: all rows of bin ``≤ cut_p``, where ``cut_p`` is the
  largest grid index such that at most ``top_m`` rows have a bin ``≤ cut_p``.

After the coordinator picks the threshold index ``j`` (privately), the filtered product is
``A(t)x = Σ_p S_p − Σ_{rows with bin ≤ j} a'(a'ᵀx)``; a partition with ``cut_p < j`` did not return all of its
filtered rows and is recomputed exactly by :func:`filtered_sum` (a second pass over that partition only).

Clipping scales a row to norm ``min(‖a‖, c)`` (it never drops rows); it is applied through per-row factors
``f = min(1, c/‖a‖)`` so the stored block is never copied: ``A'x = f ⊙ (Ax)`` and ``A'ᵀw = Aᵀ(f ⊙ w)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.kernels.grid import ThresholdGrid

__all__ = [
    "PowerPartial",
    "clip_factors",
    "filtered_sum",
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
    top_rows: sp.csr_array
    """Contributions ``a'(a'ᵀx)`` of the returned high-scoring rows, one row each."""
    top_bins: np.ndarray
    """Bin of each returned row."""
    top_partitions: np.ndarray
    """Partition index of each returned row."""
    cuts: dict[int, int]
    """For each partition: every row of bin ``≤ cuts[p]`` is among the returned rows (``-1``: none guaranteed)."""


def clip_factors(norms: np.ndarray, row_norm_bound: float) -> np.ndarray:
    """Per-row scale ``min(1, c/‖a‖)`` (1 for empty rows and for an infinite bound)."""
    if not np.isfinite(row_norm_bound):
        return np.ones_like(norms)
    with np.errstate(divide="ignore"):
        return np.minimum(1.0, row_norm_bound / np.where(norms > 0, norms, np.inf))


def _scores(block: Any, norms: np.ndarray, x: np.ndarray, row_norm_bound: float) -> tuple[np.ndarray, ...]:
    factors = clip_factors(norms, row_norm_bound)
    projections = factors * np.asarray(block @ x).ravel()  # a'ᵀx for each clipped row
    scores = np.minimum(norms, row_norm_bound) * np.abs(projections)
    return factors, projections, scores


def _transpose_times(block: Any, weights: np.ndarray) -> np.ndarray:
    """``blockᵀ @ weights`` as a dense float64 vector."""
    return np.asarray(block.T @ weights, dtype=np.float64).ravel()


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
    factors, projections, scores = _scores(block, norms, x, row_norm_bound)
    weights = factors * projections  # a'(a'ᵀx) = f·a·(a'ᵀx)
    full_sum = _transpose_times(block, weights)
    bins = grid.bins(scores)
    histogram = np.bincount(bins, minlength=grid.n_bins).astype(np.int64)
    cumulative = np.cumsum(histogram[: grid.n_points])
    cut = int(np.searchsorted(cumulative, top_m, side="right")) - 1  # largest j with F_j <= top_m
    chosen = np.flatnonzero(bins <= cut) if cut >= 0 else np.zeros(0, dtype=np.int64)
    top_rows = _scaled_rows(block, chosen, weights[chosen], x.shape[0])
    return PowerPartial(
        histogram=histogram,
        full_sum=full_sum,
        top_rows=top_rows,
        top_bins=bins[chosen],
        top_partitions=np.full(chosen.shape[0], partition, dtype=np.int64),
        cuts={partition: cut},
    )


def _scaled_rows(block: Any, rows: np.ndarray, weights: np.ndarray, n_cols: int) -> sp.csr_array:
    if rows.size == 0:
        return sp.csr_array((0, n_cols), dtype=np.float64)
    picked = block[rows]
    if sp.issparse(picked):
        out = sp.csr_array(picked, dtype=np.float64, copy=True)
        out.data *= np.repeat(weights, np.diff(out.indptr))
        return out
    return sp.csr_array(np.asarray(picked, dtype=np.float64) * weights[:, None])


def merge_power_partials(*parts: PowerPartial, top_m: int) -> PowerPartial:
    """Combine partials (a node of the tree reduction), keeping at most ``top_m`` returned rows.

    When the union holds more than ``top_m`` rows, rows of the highest bins (lowest scores) are dropped bin by bin
    and the cuts of the partitions that lost rows are lowered, so the ``cuts`` promise stays true.
    """
    histogram = np.sum([p.histogram for p in parts], axis=0)
    full_sum = np.sum([p.full_sum for p in parts], axis=0)
    top_rows = sp.csr_array(sp.vstack([p.top_rows for p in parts], format="csr"))
    top_bins = np.concatenate([p.top_bins for p in parts])
    top_partitions = np.concatenate([p.top_partitions for p in parts])
    cuts: dict[int, int] = {}
    for p in parts:
        cuts.update(p.cuts)
    if top_bins.size > top_m:
        counts = np.cumsum(np.bincount(top_bins, minlength=int(top_bins.max()) + 1))
        keep_cut = int(np.searchsorted(counts, top_m, side="right")) - 1
        keep = top_bins <= keep_cut
        dropped = set(np.unique(top_partitions[~keep]).tolist())
        top_rows, top_bins, top_partitions = top_rows[np.flatnonzero(keep)], top_bins[keep], top_partitions[keep]
        cuts = {p: (min(c, keep_cut) if p in dropped else c) for p, c in cuts.items()}
    return PowerPartial(histogram, full_sum, sp.csr_array(top_rows), top_bins, top_partitions, cuts)


def select_filtered(total: PowerPartial, index: int) -> tuple[np.ndarray, list[int]]:
    """Sum of the returned contributions of rows with bin ``≤ index``, and the partitions that need a second pass.

    A partition needs a second pass when its cut is below ``index``: some of its rows filtered at ``θ_index`` may
    be missing from the returned rows. Returned rows of those partitions are excluded from the sum.
    """
    incomplete = sorted(p for p, c in total.cuts.items() if c < index)
    mask = total.top_bins <= index
    if incomplete:
        mask &= ~np.isin(total.top_partitions, incomplete)
    selected = total.top_rows[np.flatnonzero(mask)]
    d = total.full_sum.shape[0]
    filtered = np.asarray(selected.sum(axis=0), dtype=np.float64).ravel() if selected.shape[0] else np.zeros(d)
    return filtered, incomplete


def filtered_sum(
    block: Any,
    norms: np.ndarray,
    x: np.ndarray,
    *,
    row_norm_bound: float,
    grid: ThresholdGrid,
    index: int,
) -> np.ndarray:
    """Exact ``Σ a'(a'ᵀx)`` over the partition's rows of bin ``≤ index`` (the second pass)."""
    factors, projections, scores = _scores(block, norms, x, row_norm_bound)
    weights = np.where(grid.bins(scores) <= index, factors * projections, 0.0)
    return _transpose_times(block, weights)


def gram_times(block: Any, norms: np.ndarray, x: np.ndarray, *, row_norm_bound: float) -> np.ndarray:
    """``A'ᵀA'x`` for the partition's rows clipped to ``row_norm_bound`` (no filtering); ``x`` is d or d×b."""
    factors = clip_factors(norms, row_norm_bound)
    weights = factors * factors
    product = np.asarray(block @ x)
    product = weights * product if product.ndim == 1 else weights[:, None] * product
    return np.asarray(block.T @ product, dtype=np.float64)


def plain_gram_times(block: Any, x: np.ndarray) -> np.ndarray:
    """``AᵀAx`` for the partition (no clipping): the non-private reference step."""
    return np.asarray(block.T @ np.asarray(block @ x), dtype=np.float64)


def gram_matrix(block: Any, norms: np.ndarray, *, row_norm_bound: float) -> np.ndarray:
    """Dense ``A'ᵀA'`` (d×d) of the partition's clipped rows."""
    factors = clip_factors(norms, row_norm_bound)
    if sp.issparse(block):
        scaled = sp.csr_array(block, dtype=np.float64, copy=True)
        scaled.data *= np.repeat(factors, np.diff(scaled.indptr))
        return np.asarray((scaled.T @ scaled).toarray(), dtype=np.float64)
    scaled_dense = np.asarray(block, dtype=np.float64) * factors[:, None]
    return scaled_dense.T @ scaled_dense
