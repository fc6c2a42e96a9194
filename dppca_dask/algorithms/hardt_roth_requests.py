"""Requests of the Hardt–Roth mechanisms (seeds 000 and 003) and randomized response.

Each is one pass over the partitions; the coordinator executes it with the kernels of
:mod:`dppca_dask.kernels.hardt_roth` (registered in :mod:`dppca_dask.coordinator.hardt_roth`) and returns a
:class:`~dppca_dask.kernels.hardt_roth.RowSlices`: per-partition row slices of a product with one row per row of
the matrix, and a summed share of a product without one. Requests carry public or already released values,
except :class:`RowProduct` in the private range finder, whose ``x`` is the secret test matrix Ω (it goes to the
workers, which hold the data anyway, and never to results or logs).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["DenseRows", "EmbeddedProduct", "LeftProjection", "RowCounts", "RowProduct"]


@dataclass(frozen=True)
class RowCounts:
    """The number of rows of every partition (public structure): slices of shape ``(rows, 0)``."""


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
