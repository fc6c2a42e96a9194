"""Requests of the Hardt–Roth mechanisms (seeds 000 and 003) and randomized response.

Each is one pass over the partitions; the coordinator executes it with the kernels of
:mod:`dppca_dask.kernels.hardt_roth` (each request type registers its kernel task and merge with the generic
coordinator below, so the coordinator has no module of its own for this family) and returns a
:class:`~dppca_dask.kernels.hardt_roth.RowSlices`: per-partition row slices of a product with one row per row of
the matrix, and a summed share of a product without one. Requests carry public or already released values,
except :class:`RowProduct` in the private range finder, whose ``x`` is the secret test matrix Ω (it goes to the
workers, which hold the data anyway, and never to results or logs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from dataclasses import dataclass

import numpy as np

from dppca_dask.coordinator.driver import StepPlan, load_partition, register_request
from dppca_dask.coordinator.sources import partition_rows
from dppca_dask.kernels import hardt_roth as K

__all__ = ["DenseRows", "EmbeddedProduct", "LeftProjection", "RowCounts", "RowProduct"]


@dataclass(frozen=True)
class RowCounts:
    """The number of rows of every partition (public structure): slices of shape ``(rows, 0)``.

    Answered from what each task's item knows (a store's partition table, a block's shape) without reading the
    values (:func:`~dppca_dask.coordinator.sources.partition_rows`)."""


@dataclass(frozen=True)
class RowProduct:
    """``A'x`` as row slices, for a d-vector or a d×b matrix ``x``; rows clipped to ``row_norm_bound`` if given."""

    x: np.ndarray
    row_norm_bound: float | None = None


@dataclass(frozen=True)
class EmbeddedProduct:
    """``B·(x_rows, x_cols)`` for the embedding ``B = [[0, A], [Aᵀ, 0]]``: slices of ``A x_cols``, sum ``Aᵀ x_rows``.

    ``x_rows`` maps each partition index to its rows of the n_rows-part of the iterate.
    """

    x_cols: np.ndarray
    x_rows: Mapping[int, np.ndarray]


@dataclass(frozen=True)
class LeftProjection:
    """``Σ_p A'_pᵀ W_p`` (d×k, i.e. ``(WᵀA')ᵀ``) for the rows ``W_p`` of an n_rows×k matrix W, per partition."""

    left: Mapping[int, np.ndarray]
    row_norm_bound: float | None = None


@dataclass(frozen=True)
class DenseRows:
    """Every partition's rows, dense and clipped (randomized response densifies the matrix at the coordinator)."""

    row_norm_bound: float | None = None


# ---------------------------------------------------------------------------------------- how each runs
def _row_counts_task(item: Any) -> K.RowSlices:
    index, n_rows = partition_rows(item)  # a store's partition table, not a read of its values
    return K.RowSlices({index: np.zeros((n_rows, 0))})


def _row_product_task(item: Any, x: np.ndarray, *, row_norm_bound: float | None) -> K.RowSlices:
    part = load_partition(item)
    return K.RowSlices({part.index: K.rows_times(part.block, part.norms, x, row_norm_bound=row_norm_bound)})


def _embedded_task(item: Any, vectors: tuple[np.ndarray, Mapping[int, np.ndarray]]) -> K.RowSlices:
    part = load_partition(item)
    x_cols, x_rows = vectors
    return K.RowSlices(
        {part.index: K.rows_times(part.block, part.norms, x_cols)},
        K.transpose_times(part.block, part.norms, np.asarray(x_rows[part.index], dtype=np.float64)),
    )


def _left_projection_task(
    item: Any, left: Mapping[int, np.ndarray], *, row_norm_bound: float | None
) -> K.RowSlices:
    part = load_partition(item)
    rows = np.asarray(left[part.index], dtype=np.float64)
    return K.RowSlices({}, K.transpose_times(part.block, part.norms, rows, row_norm_bound=row_norm_bound))


def _dense_rows_task(item: Any, *, row_norm_bound: float | None) -> K.RowSlices:
    part = load_partition(item)
    return K.RowSlices({part.index: K.dense_rows(part.block, part.norms, row_norm_bound=row_norm_bound)})


def _empty(d: int) -> K.RowSlices:
    return K.RowSlices()


register_request(RowCounts, lambda r: StepPlan(_row_counts_task, {}, None, K.merge_row_slices, empty=_empty))
register_request(
    RowProduct,
    lambda r: StepPlan(_row_product_task, {"row_norm_bound": r.row_norm_bound}, r.x, K.merge_row_slices,
                       empty=_empty),
)
register_request(
    EmbeddedProduct,
    lambda r: StepPlan(_embedded_task, {}, (r.x_cols, dict(r.x_rows)), K.merge_row_slices, empty=_empty),
)
register_request(
    LeftProjection,
    lambda r: StepPlan(_left_projection_task, {"row_norm_bound": r.row_norm_bound}, dict(r.left),
                       K.merge_row_slices, empty=_empty),
)
register_request(
    DenseRows,
    lambda r: StepPlan(_dense_rows_task, {"row_norm_bound": r.row_norm_bound}, None, K.merge_row_slices,
                       empty=_empty),
)
