"""The coordinator: drives algorithms over partitions on Dask (the only package that calls Dask)."""

from __future__ import annotations

from dppca_dask.coordinator.client import connect
from dppca_dask.coordinator.driver import Coordinator, LocalExecutor, StepPlan, register_request
from dppca_dask.coordinator.preflight import preflight
from dppca_dask.coordinator.run import run_algorithm
from dppca_dask.coordinator.sources import PartitionData, PartitionSource, as_source


__all__ = [
    "Coordinator",
    "LocalExecutor",
    "PartitionData",
    "PartitionSource",
    "StepPlan",
    "as_source",
    "preflight",
    "connect",
    "register_request",
    "run_algorithm",
]
