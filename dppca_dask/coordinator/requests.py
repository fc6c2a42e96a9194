"""What an algorithm asks of the data: requests the coordinator turns into one pass of per-partition kernels.

Algorithms are generators: they ``yield`` a request and receive its exact aggregate back (``agg = yield
PowerStep(...)``); they never see rows, only aggregates, and they never call Dask. Every request carries only
public or already-released values (the iterate, the public grid and bounds), never private aggregates.

The requests here are the coordinator's own (it registers their kernels in :mod:`dppca_dask.coordinator.driver`); a
family adds its own request types in its package (e.g. :mod:`dppca_dask.methods.adaptive_power.requests`) and
registers them with :func:`~dppca_dask.coordinator.driver.register_request`.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import numpy as np

from dppca_dask.kernels.grid import ThresholdGrid

__all__ = [
    "AlgorithmRun",
    "FilteredSum",
    "GramMatrix",
    "GramTimes",
    "PlainGramTimes",
    "PowerStep",
    "Request",
]


@dataclass(frozen=True)
class PowerStep:
    """One-pass power-iteration aggregate (:func:`dppca_dask.kernels.power_partial`) for the unit vector ``x``."""

    x: np.ndarray
    row_norm_bound: float
    grid: ThresholdGrid
    top_m: int


@dataclass(frozen=True)
class FilteredSum:
    """Exact ``Σ a'(a'ᵀx)`` over the rows of bin in ``(cuts[p], index]`` of each partition ``p`` in ``cuts``.

    The rare second pass of a power step: ``cuts`` maps each incomplete partition to the last bin it returned.
    """

    x: np.ndarray
    row_norm_bound: float
    grid: ThresholdGrid
    index: int
    cuts: Mapping[int, int]


@dataclass(frozen=True)
class GramTimes:
    """``A'ᵀA'x`` with rows clipped to ``row_norm_bound`` (``inf``: no clipping)."""

    x: np.ndarray
    row_norm_bound: float


@dataclass(frozen=True)
class PlainGramTimes:
    """``AᵀAx`` without clipping: the non-private reference step of the benchmarks."""

    x: np.ndarray


@dataclass(frozen=True)
class GramMatrix:
    """Dense ``A'ᵀA'`` (d×d) with rows clipped to ``row_norm_bound``."""

    row_norm_bound: float


#: A request: one of the above or any other type registered with the coordinator
#: (:func:`dppca_dask.coordinator.driver.register_request`), which looks its planner up by the request's type.
Request: TypeAlias = object

R = TypeVar("R")
#: An algorithm run: yields requests, receives aggregates, returns its result.
AlgorithmRun = Generator[Request, Any, R]
