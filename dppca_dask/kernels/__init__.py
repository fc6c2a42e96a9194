"""Pure per-partition kernels (numpy/scipy): exact aggregates, no noise, no Dask, no validation."""

from __future__ import annotations

from dppca_dask.kernels.grid import ThresholdGrid
from dppca_dask.kernels.power import (
    PowerPartial,
    clip_factors,
    filtered_sum,
    gather_power_partials,
    gram_matrix,
    gram_times,
    head_sum,
    merge_power_partials,
    plain_gram_times,
    power_partial,
    select_filtered,
)

__all__ = [
    "PowerPartial",
    "ThresholdGrid",
    "clip_factors",
    "filtered_sum",
    "gather_power_partials",
    "gram_matrix",
    "gram_times",
    "head_sum",
    "merge_power_partials",
    "plain_gram_times",
    "power_partial",
    "select_filtered",
]
