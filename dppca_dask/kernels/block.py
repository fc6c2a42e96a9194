"""Per-partition kernels of block adaptive power iteration and of centred statistics: exact, no noise, no Dask.

Block power iteration carries an orthonormal d×k iterate ``X``. Each row ``a`` is clipped to the public bound
``c`` (``a' = f·a`` with ``f = min(1, c/‖a‖)``, as without centring), then centred at an optional public centre
``μ`` (a released private mean or a user-given one): ``ã = a' − μ``, of norm at most ``c + ‖μ‖``. These are the
rows scikit-learn's PCA centres when given the clipped rows. A row's score is ``‖ã‖·‖X ᵀã‖₂`` and its
contribution to the product is ``ã(ãᵀX)`` (a d×k matrix of Frobenius norm equal to the score). One sweep over the
CSR returns

- the histogram of the rows' bins on the public grid,
- ``S = Σ ã(ãᵀX)`` over all rows (d×k), the centred product ``(A' − 1μᵀ)ᵀ(A' − 1μᵀ)X``, computed as
  ``Aᵀ(f ⊙ P) − μ(1ᵀP)`` for the projections ``P = ÃX = f ⊙ (AX) − 1(μᵀX)`` so the partition stays sparse,
- the contributions of its highest-scoring rows summed per grid bin (as in :mod:`dppca_dask.kernels.power`):
  the sparse ``bins × (k·d)`` sums of ``Aᵀ(f ⊙ P)`` per bin and the dense ``bins × k`` sums of ``P`` per bin, from
  which the centred sums ``Σ_bin ã(ãᵀX)`` follow,
- ``Σ ‖ã‖²`` (the total variance's numerator).

The centred norms come from the stored norms: ``‖a' − μ‖² = f²‖a‖² − 2f·aᵀμ + ‖μ‖²`` (one product ``Aμ``). The
products ``f ⊙ (AX)`` and ``f ⊙ (Aμ)`` are :func:`~dppca_dask.kernels.power.clipped_times`: finite for a row near the
float64 limit (whose ``aᵀμ`` overflowed to ±inf, making its centred norm 0 or inf).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.kernels import _sparse
from dppca_dask.kernels.grid import ThresholdGrid
from dppca_dask.kernels.power import (
    added_in_order,
    added_bin_sums,
    binned_sums,
    clip_factors,
    clipped_times,
    head_sum,
    stacked_bin_sums,
    union_cuts,
)

__all__ = [
    "BlockPartial",
    "MeanPartial",
    "NormCountsPartial",
    "VariancePartial",
    "block_filtered_sum",
    "block_partial",
    "centred_gram_matrix",
    "gather_block_partials",
    "centred_norms",
    "mean_partial",
    "merge_block_partials",
    "merge_mean_partials",
    "merge_norm_counts",
    "merge_variance_partials",
    "norm_counts",
    "select_block_filtered",
    "variance_partial",
]


@dataclass(frozen=True, slots=True)
class BlockPartial:
    """Exact aggregate of one or more partitions for one block step (never leaves the coordinator)."""

    histogram: np.ndarray
    """Rows per bin (length ``grid.n_bins``)."""
    full_sum: np.ndarray
    """``Σ ã(ãᵀX)`` over all rows (d×k)."""
    bin_sums: sp.csr_array | tuple[sp.csr_array, ...]
    """``n_points × (k·d)``: row ``b``, block ``j`` is ``Σ a·f·P_j`` over the returned rows of bin ``b``. At the
    coordinator (:func:`gather_block_partials`) a tuple of such matrices, whose sum it stands for."""
    bin_weights: np.ndarray
    """``n_points × k``: ``Σ P`` over the returned rows of bin ``b`` (the centring term)."""
    square_sum: float
    """``Σ ‖ã‖²`` over all rows."""
    cuts: dict[int, int]
    """For each partition: its rows of bin ``≤ cuts[p]`` are in ``bin_sums``, no other rows (``-1``: none)."""


def centred_norms(block: Any, norms: np.ndarray, mean: np.ndarray | None, row_norm_bound: float) -> np.ndarray:
    """``‖a' − μ‖`` for each clipped row ``a'`` (``min(‖a‖, c)`` without ``μ``), from the stored norms and ``Aμ``."""
    factors = clip_factors(norms, row_norm_bound)
    clipped = factors * norms
    if mean is None:
        return clipped
    cross = clipped_times(block, norms, mean, factors, row_norm_bound)  # a'ᵀμ, finite for rows near float64's limit
    return np.sqrt(np.maximum(clipped * clipped - 2.0 * cross + float(mean @ mean), 0.0))


def _projections(block: Any, norms: np.ndarray, x: np.ndarray, mean: np.ndarray | None,
                 row_norm_bound: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Clip factors ``f``, centred norms ``‖ã‖`` and projections ``P = ÃX`` (n×k)."""
    factors = clip_factors(norms, row_norm_bound)
    projections = clipped_times(block, norms, x, factors, row_norm_bound)
    if mean is not None:
        projections = projections - (mean @ x)[None, :]
    return factors, centred_norms(block, norms, mean, row_norm_bound), projections


def _block_scores(
    block: Any, norms: np.ndarray, x: np.ndarray, mean: np.ndarray | None, row_norm_bound: float, top: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Clip factors, centred norms, projections and scores ``‖ã‖·‖X ᵀã‖`` (clamped to the grid's top)."""
    factors, cnorms, projections = _projections(block, norms, x, mean, row_norm_bound)
    scores = cnorms * np.linalg.norm(projections, axis=1)
    if np.isfinite(top):  # ≤ (c + ‖μ‖)² ≤ top in exact arithmetic; clamp the rounding so θ_0 filters no row
        scores = np.minimum(scores, top)
    return factors, cnorms, projections, scores


def _centred_sum(block: Any, factors: np.ndarray, projections: np.ndarray, mean: np.ndarray | None) -> np.ndarray:
    """``Σ_i ã_i P_iᵀ`` = ``Aᵀ(f ⊙ P) − μ(1ᵀP)`` (d×k)."""
    weights = factors[:, None] * projections
    out = _sparse.transpose_times(block, weights).reshape(block.shape[1], projections.shape[1])
    if mean is not None:
        out = out - np.outer(mean, projections.sum(axis=0))
    return out


def block_partial(
    block: Any,
    norms: np.ndarray,
    x: np.ndarray,
    *,
    partition: int,
    row_norm_bound: float,
    grid: ThresholdGrid,
    top_m: int,
    mean: np.ndarray | None = None,
) -> BlockPartial:
    """One partition's share of a block step (see the module docstring). ``x`` is d×k, ``mean`` d or None."""
    n, d = block.shape
    k = x.shape[1]
    factors, cnorms, projections, scores = _block_scores(block, norms, x, mean, row_norm_bound, grid.top)
    weights = factors[:, None] * projections
    full_sum = _centred_sum(block, factors, projections, mean)
    bins = grid.bins(scores)
    histogram = np.bincount(bins, minlength=grid.n_bins).astype(np.int64)
    cumulative = np.cumsum(histogram[: grid.n_points])
    cut = int(np.searchsorted(cumulative, top_m, side="right")) - 1  # largest j with F_j <= top_m
    chosen = np.flatnonzero(bins <= cut) if cut >= 0 else np.zeros(0, dtype=np.int64)
    chosen_bins = bins[chosen]
    bin_weights = np.zeros((grid.n_points, k))
    for j in range(k):
        np.add.at(bin_weights[:, j], chosen_bins, projections[chosen, j])
    # the k columns' sums side by side (bin b, column j at j·d + c), from one pass over the chosen rows
    bin_sums = binned_sums(block, chosen, chosen_bins, weights[chosen], grid.n_points)
    return BlockPartial(histogram=histogram, full_sum=full_sum, bin_sums=bin_sums, bin_weights=bin_weights,
                        square_sum=float(np.sum(cnorms * cnorms)), cuts={partition: cut})


def _combined(parts: tuple[BlockPartial, ...], bin_sums: Any) -> BlockPartial:
    return BlockPartial(
        histogram=added_in_order([p.histogram for p in parts]),
        full_sum=added_in_order([p.full_sum for p in parts]),
        bin_sums=bin_sums,
        bin_weights=added_in_order([p.bin_weights for p in parts]),
        square_sum=float(sum(p.square_sum for p in parts)),
        cuts=union_cuts(parts),
    )


def merge_block_partials(*parts: BlockPartial) -> BlockPartial:
    """Combine partials (a node of the tree reduction): every field is a sum or a union."""
    return _combined(parts, added_bin_sums(parts))


def gather_block_partials(*parts: BlockPartial) -> BlockPartial:
    """Combine the gathered partials at the coordinator, keeping the bins' sums side by side (a tuple), as
    :func:`~dppca_dask.kernels.power.gather_power_partials` does: only their prefix up to the released index is
    summed (:func:`select_block_filtered`)."""
    return _combined(parts, stacked_bin_sums(parts))


def select_block_filtered(
    total: BlockPartial, index: int, mean: np.ndarray | None
) -> tuple[np.ndarray, dict[int, int]]:
    """Returned contributions (d×k) of the rows of bin ``≤ index``, and the partitions that need a second pass."""
    incomplete = {p: c for p, c in sorted(total.cuts.items()) if c < index}
    d, k = total.full_sum.shape
    filtered = head_sum(total.bin_sums, index, k * d).reshape(k, d).T
    if mean is not None:
        filtered = filtered - np.outer(mean, total.bin_weights[: index + 1].sum(axis=0))
    return filtered, incomplete


def block_filtered_sum(
    block: Any,
    norms: np.ndarray,
    x: np.ndarray,
    *,
    row_norm_bound: float,
    grid: ThresholdGrid,
    index: int,
    above: int = -1,
    mean: np.ndarray | None = None,
) -> np.ndarray:
    """Exact ``Σ ã(ãᵀX)`` (d×k) over the partition's rows of bin in ``(above, index]`` (the second pass)."""
    factors, _cnorms, projections, scores = _block_scores(block, norms, x, mean, row_norm_bound, grid.top)
    bins = grid.bins(scores)
    projections = np.where(((bins <= index) & (bins > above))[:, None], projections, 0.0)
    return _centred_sum(block, factors, projections, mean)


@dataclass(frozen=True, slots=True)
class MeanPartial:
    """``Σ a'`` (rows clipped to c, not centred) and the number of rows: the private mean's exact inputs."""

    total: np.ndarray
    count: int


def mean_partial(block: Any, norms: np.ndarray, *, row_norm_bound: float) -> MeanPartial:
    """``Σ min(1, c/‖a‖)·a`` over the partition's rows, and their number."""
    factors = clip_factors(norms, row_norm_bound)
    return MeanPartial(_sparse.transpose_times(block, factors).ravel(), int(block.shape[0]))


def merge_mean_partials(*parts: MeanPartial) -> MeanPartial:
    return MeanPartial(np.sum([p.total for p in parts], axis=0), int(sum(p.count for p in parts)))


@dataclass(frozen=True, slots=True)
class VariancePartial:
    """``Σ (ã'ᵀv_j)²`` per component (length k), ``Σ ‖ã'‖²`` and the number of rows."""

    projected: np.ndarray
    total: float
    count: int


def variance_partial(
    block: Any, norms: np.ndarray, components: np.ndarray, *, row_norm_bound: float, mean: np.ndarray | None = None
) -> VariancePartial:
    """The exact inputs of the explained variance: ``components`` is k×d (orthonormal rows)."""
    _factors, cnorms, projections = _projections(block, norms, components.T, mean, row_norm_bound)
    return VariancePartial(np.sum(projections * projections, axis=0), float(np.sum(cnorms * cnorms)),
                           int(block.shape[0]))


def merge_variance_partials(*parts: VariancePartial) -> VariancePartial:
    return VariancePartial(np.sum([p.projected for p in parts], axis=0), float(sum(p.total for p in parts)),
                           int(sum(p.count for p in parts)))


def centred_gram_matrix(block: Any, norms: np.ndarray, *, row_norm_bound: float,
                        mean: np.ndarray | None = None) -> np.ndarray:
    """Dense ``Σ ããᵀ`` (d×d) of the partition's clipped rows centred at ``mean``.

    ``Σ (a' − μ)(a' − μ)ᵀ = A'ᵀA' − μ s'ᵀ − s' μᵀ + n·μμᵀ`` with ``s' = Σ a'``: the block is never densified.
    """
    factors = clip_factors(norms, row_norm_bound)
    if sp.issparse(block):
        scaled = sp.csr_array(block, dtype=np.float64, copy=True)
        scaled.data *= np.repeat(factors, np.diff(scaled.indptr))
        gram = np.asarray((scaled.T @ scaled).toarray(), dtype=np.float64)
    else:
        scaled_dense = np.asarray(block, dtype=np.float64) * factors[:, None]
        gram = scaled_dense.T @ scaled_dense
    if mean is None:
        return gram
    s_clipped = _sparse.transpose_times(block, factors).ravel()
    return gram - np.outer(mean, s_clipped) - np.outer(s_clipped, mean) + block.shape[0] * np.outer(mean, mean)


@dataclass(frozen=True, slots=True)
class NormCountsPartial:
    """Rows of norm ≤ each public candidate bound, and the number of rows (the private quantile's exact inputs)."""

    counts: np.ndarray
    count: int


def norm_counts(norms: np.ndarray, candidates: np.ndarray) -> NormCountsPartial:
    """``#{rows with norm ≤ c_j}`` for each ascending candidate ``c_j`` (from the stored norms only)."""
    bins = np.searchsorted(candidates, norms, side="left")  # first j with c_j >= norm
    counts = np.cumsum(np.bincount(bins, minlength=candidates.shape[0] + 1)[: candidates.shape[0]])
    return NormCountsPartial(counts.astype(np.int64), int(norms.shape[0]))


def merge_norm_counts(*parts: NormCountsPartial) -> NormCountsPartial:
    return NormCountsPartial(np.sum([p.counts for p in parts], axis=0), int(sum(p.count for p in parts)))
