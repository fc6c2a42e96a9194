"""Per-partition kernels of the Hardt–Roth mechanisms: exact products, no noise, no Dask, no validation.

The mechanisms of seeds 000 and 003 need products whose output has one entry (or one row) per row of the matrix,
such as ``A x`` or ``A Ω``, next to ordinary sums such as ``Aᵀ y``. A partition returns its slice of the former,
keyed by its partition index, and its share of the latter; :func:`merge_row_slices` combines partials by a union
of the slices and a sum of the shares, which is associative, so the coordinator's tree reduction applies
unchanged. The coordinator reassembles the slices in partition order (:func:`assemble`).

Clipping, where a mechanism asks for it, scales a row to norm ``min(‖a‖, c)`` through the per-row factors of
:func:`dppca_dask.kernels.clip_factors`, without copying the stored block.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.kernels import _sparse
from dppca_dask.kernels.power import clip_factors, clipped_times

__all__ = [
    "RowSlices",
    "assemble",
    "dense_rows",
    "merge_row_slices",
    "row_offsets",
    "rows_times",
    "transpose_times",
]


@dataclass(frozen=True, slots=True)
class RowSlices:
    """Exact partial aggregate: per-partition row slices of a product and a summed share (stays at the coordinator)."""

    parts: Mapping[int, np.ndarray] = field(default_factory=dict)
    """Partition index → that partition's rows of the product (first axis = its rows)."""
    total: np.ndarray | None = None
    """Sum over the partitions of a product without a row axis (``Aᵀy``, ``WᵀA``), or None."""


def merge_row_slices(*parts: RowSlices) -> RowSlices:
    """Combine partials (a node of the tree reduction): union of the slices, sum of the shares."""
    slices: dict[int, np.ndarray] = {}
    total: np.ndarray | None = None
    for p in parts:
        slices.update(p.parts)
        if p.total is not None:
            total = np.array(p.total, dtype=np.float64, copy=True) if total is None else total + p.total
    return RowSlices(slices, total)


def row_offsets(slices: RowSlices) -> np.ndarray:
    """Row offsets of the partitions in index order (length ``n_partitions + 1``) from the slices' lengths."""
    counts = [int(np.shape(slices.parts[i])[0]) for i in sorted(slices.parts)]
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)


def assemble(slices: RowSlices) -> np.ndarray:
    """The full product: the slices stacked in partition order."""
    if not slices.parts:
        return np.zeros(0)
    return np.concatenate([np.asarray(slices.parts[i], dtype=np.float64) for i in sorted(slices.parts)], axis=0)


def _factors(norms: np.ndarray, row_norm_bound: float | None) -> np.ndarray | None:
    if row_norm_bound is None or not np.isfinite(row_norm_bound):
        return None
    return clip_factors(norms, row_norm_bound)


def rows_times(block: Any, norms: np.ndarray, x: np.ndarray, *, row_norm_bound: float | None = None) -> np.ndarray:
    """``A'_p x`` for a vector or matrix ``x`` (rows clipped to ``row_norm_bound``; None or ``inf``: not clipped).

    The clip factor scales each row's product ``f·(aᵀx)``. A row whose values are near the float64 limit (its norm
    finite, so accepted by validation) can overflow ``aᵀx`` before the factor applies, although its clipped product
    ``c·(a/‖a‖)ᵀx`` is small: those rows are recomputed from the unit row ``a/‖a‖``
    (:func:`~dppca_dask.kernels.power.clipped_times`, as the power kernels do), so that every clipped row's product
    is finite and moves by at most the clipping allows, whatever the stored values.
    """
    factors = _factors(norms, row_norm_bound)
    if factors is None:
        return _sparse.times(block, x)
    return clipped_times(block, norms, x, factors, float(row_norm_bound))  # type: ignore[arg-type]


def transpose_times(
    block: Any, norms: np.ndarray, y: np.ndarray, *, row_norm_bound: float | None = None
) -> np.ndarray:
    """``A'_pᵀ y`` for the partition's rows of ``y`` (a vector or a rows × b matrix)."""
    factors = _factors(norms, row_norm_bound)
    if factors is not None:
        y = factors * y if y.ndim == 1 else factors[:, None] * y
    return _sparse.transpose_times(block, y)


def dense_rows(block: Any, norms: np.ndarray, *, row_norm_bound: float | None = None) -> np.ndarray:
    """The partition's rows as a dense float64 array, clipped to ``row_norm_bound``."""
    dense = block.toarray() if sp.issparse(block) else np.array(block, dtype=np.float64, copy=True)
    dense = np.asarray(dense, dtype=np.float64)
    factors = _factors(norms, row_norm_bound)
    if factors is not None:
        dense *= factors[:, None]
    return dense
