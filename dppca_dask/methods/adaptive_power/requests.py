"""The block run's requests: what block power, the private mean, the row-norm bound, the explained variance and
the centred Gram matrix ask of the data, and the per-partition kernels (:mod:`dppca_dask.kernels.block`) the
coordinator runs for each (registered with :func:`~dppca_dask.coordinator.driver.register_request` on import).

Every request carries only public or already-released values (the iterate, the public grid, the bound, the released
or given centre), never a private aggregate.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dppca_dask.kernels import ThresholdGrid
from dppca_dask.kernels import block as B

__all__ = ["BlockFilteredSum", "BlockPowerStep", "CentredGramMatrix", "MeanStep", "NormCounts", "VarianceStep"]


@dataclass(frozen=True)
class BlockPowerStep:
    """One-pass block aggregate (:func:`dppca_dask.kernels.block.block_partial`) for the d×k iterate ``x``."""

    x: np.ndarray
    row_norm_bound: float
    grid: ThresholdGrid
    top_m: int
    mean: np.ndarray | None = None


@dataclass(frozen=True)
class BlockFilteredSum:
    """Exact ``Σ ã'(ã'ᵀX)`` over the rows of bin in ``(cuts[p], index]`` of each partition in ``cuts``."""

    x: np.ndarray
    row_norm_bound: float
    grid: ThresholdGrid
    index: int
    cuts: Mapping[int, int]
    mean: np.ndarray | None = None


@dataclass(frozen=True)
class MeanStep:
    """``Σ a'`` over rows clipped to ``row_norm_bound`` and the row count (the private mean's exact inputs)."""

    row_norm_bound: float


@dataclass(frozen=True)
class NormCounts:
    """Rows of norm ≤ each public candidate bound (ascending), and the number of rows."""

    candidates: np.ndarray


@dataclass(frozen=True)
class VarianceStep:
    """``Σ(ã'ᵀv_j)²``, ``Σ‖ã'‖²`` and the row count for the released components ``components`` (k×d)."""

    components: np.ndarray
    row_norm_bound: float
    mean: np.ndarray | None = None


@dataclass(frozen=True)
class CentredGramMatrix:
    """Dense ``Σ ã'ã'ᵀ`` (d×d) of the rows centred at ``mean`` and clipped to ``row_norm_bound``."""

    row_norm_bound: float
    mean: np.ndarray | None = None


def _register_requests() -> None:
    from dppca_dask.coordinator.driver import StepPlan, load_partition, _sum, register_request

    def block_task(item: Any, x: np.ndarray, *, row_norm_bound: float, grid: ThresholdGrid, top_m: int,
                   mean: np.ndarray | None) -> B.BlockPartial:
        part = load_partition(item)
        return B.block_partial(part.block, part.norms, x, partition=part.index, row_norm_bound=row_norm_bound,
                               grid=grid, top_m=top_m, mean=mean)

    def filtered_task(item: Any, x: np.ndarray, *, row_norm_bound: float, grid: ThresholdGrid, index: int,
                      cuts: Mapping[int, int], mean: np.ndarray | None) -> np.ndarray:
        part = load_partition(item)
        return B.block_filtered_sum(part.block, part.norms, x, row_norm_bound=row_norm_bound, grid=grid,
                                    index=index, above=cuts[part.index], mean=mean)

    def mean_task(item: Any, *, row_norm_bound: float) -> B.MeanPartial:
        part = load_partition(item)
        return B.mean_partial(part.block, part.norms, row_norm_bound=row_norm_bound)

    def variance_task(item: Any, components: np.ndarray, *, row_norm_bound: float,
                      mean: np.ndarray | None) -> B.VariancePartial:
        part = load_partition(item)
        return B.variance_partial(part.block, part.norms, components, row_norm_bound=row_norm_bound, mean=mean)

    def norms_task(item: Any, *, candidates: np.ndarray) -> B.NormCountsPartial:
        return B.norm_counts(load_partition(item).norms, candidates)

    def gram_task(item: Any, *, row_norm_bound: float, mean: np.ndarray | None) -> np.ndarray:
        part = load_partition(item)
        return B.centred_gram_matrix(part.block, part.norms, row_norm_bound=row_norm_bound, mean=mean)

    def empty_block(grid: ThresholdGrid, k: int) -> Callable[[int], B.BlockPartial]:
        import scipy.sparse as sp

        return lambda d: B.BlockPartial(np.zeros(grid.n_bins, dtype=np.int64), np.zeros((d, k)),
                                        sp.csr_array((grid.n_points, k * d)), np.zeros((grid.n_points, k)), 0.0, {})

    # every partition gets the whole top_m (never a share): all filtered rows may sit in one partition
    register_request(BlockPowerStep, lambda r: StepPlan(
        block_task, {"row_norm_bound": r.row_norm_bound, "grid": r.grid, "top_m": r.top_m, "mean": r.mean}, r.x,
        B.merge_block_partials, empty=empty_block(r.grid, r.x.shape[1]), final=B.gather_block_partials))
    register_request(BlockFilteredSum, lambda r: StepPlan(
        filtered_task, {"row_norm_bound": r.row_norm_bound, "grid": r.grid, "index": r.index,
                        "cuts": dict(r.cuts), "mean": r.mean}, r.x, _sum, partitions=sorted(r.cuts),
        empty=lambda d, k=r.x.shape[1]: np.zeros((d, k))))
    register_request(MeanStep, lambda r: StepPlan(
        mean_task, {"row_norm_bound": r.row_norm_bound}, None, B.merge_mean_partials,
        empty=lambda d: B.MeanPartial(np.zeros(d), 0)))
    register_request(VarianceStep, lambda r: StepPlan(
        variance_task, {"row_norm_bound": r.row_norm_bound, "mean": r.mean}, r.components,
        B.merge_variance_partials, empty=lambda d, k=r.components.shape[0]: B.VariancePartial(np.zeros(k), 0.0, 0)))
    register_request(NormCounts, lambda r: StepPlan(
        norms_task, {"candidates": r.candidates}, None, B.merge_norm_counts,
        empty=lambda d, j=r.candidates.shape[0]: B.NormCountsPartial(np.zeros(j, dtype=np.int64), 0)))
    register_request(CentredGramMatrix, lambda r: StepPlan(
        gram_task, {"row_norm_bound": r.row_norm_bound, "mean": r.mean}, None, _sum,
        empty=lambda d: np.zeros((d, d))))


_register_requests()
