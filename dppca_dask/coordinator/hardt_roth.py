"""How the coordinator executes the requests of the Hardt–Roth mechanisms (registered at import).

Every task loads its partition (:func:`dppca_dask.coordinator.driver._load`), runs one kernel of
:mod:`dppca_dask.kernels.hardt_roth` and returns a :class:`~dppca_dask.kernels.hardt_roth.RowSlices`; partials are
merged by :func:`~dppca_dask.kernels.hardt_roth.merge_row_slices` (union of slices, sum of shares), which is
associative, so the tree reduction of the driver applies as it is. A request that needs the partition's own rows
of an n_rows-vector (the embedding's iterate, the range finder's basis) broadcasts a mapping from partition index
to rows, and each task reads only its entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from dppca_dask.algorithms.hardt_roth_requests import (
    DenseRows,
    EmbeddedProduct,
    LeftProjection,
    RowCounts,
    RowProduct,
)
from dppca_dask.coordinator.driver import StepPlan, _load, register_request
from dppca_dask.kernels import hardt_roth as K

__all__: list[str] = []


def _row_counts_task(item: Any) -> K.RowSlices:
    part = _load(item)
    return K.RowSlices({part.index: np.zeros((int(part.block.shape[0]), 0))})


def _row_product_task(item: Any, x: np.ndarray, *, row_norm_bound: float | None) -> K.RowSlices:
    part = _load(item)
    return K.RowSlices({part.index: K.rows_times(part.block, part.norms, x, row_norm_bound=row_norm_bound)})


def _embedded_task(item: Any, vectors: tuple[np.ndarray, Mapping[int, np.ndarray]]) -> K.RowSlices:
    part = _load(item)
    x_cols, x_rows = vectors
    return K.RowSlices(
        {part.index: K.rows_times(part.block, part.norms, x_cols)},
        K.transpose_times(part.block, part.norms, np.asarray(x_rows[part.index], dtype=np.float64)),
    )


def _left_projection_task(
    item: Any, left: Mapping[int, np.ndarray], *, row_norm_bound: float | None
) -> K.RowSlices:
    part = _load(item)
    rows = np.asarray(left[part.index], dtype=np.float64)
    return K.RowSlices({}, K.transpose_times(part.block, part.norms, rows, row_norm_bound=row_norm_bound))


def _dense_rows_task(item: Any, *, row_norm_bound: float | None) -> K.RowSlices:
    part = _load(item)
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
