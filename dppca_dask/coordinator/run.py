"""Driving an algorithm generator on an executor, every partition checked first.

Above both :mod:`dppca_dask.coordinator.driver` (the executors) and :mod:`dppca_dask.coordinator.preflight` (the
checks, which run on those executors), so neither imports the other back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dppca_dask.coordinator.requests import AlgorithmRun
from dppca_dask.coordinator.driver import Coordinator, LocalExecutor
from dppca_dask.coordinator.preflight import preflight

__all__ = ["run_algorithm"]


def run_algorithm(executor: Coordinator | LocalExecutor, run: AlgorithmRun[Any],
                  on_pass: Callable[[int], None] | None = None) -> Any:
    """Drive an algorithm generator to completion: send each request's aggregate back until it returns.

    Every partition is checked first (:func:`~dppca_dask.coordinator.preflight.preflight`), before the generator
    starts and so before its first noise draw: bad input fails with nothing released. ``on_pass`` is called after
    each pass with the number of partitions it read (progress: a public count).
    """
    preflight(executor.source, executor)
    try:
        request = next(run)
        while True:
            before = getattr(executor, "partitions_read", 0)  # (other executors, e.g. benchmarks', keep no count)
            aggregate = executor.execute(request)
            if on_pass is not None:
                on_pass(getattr(executor, "partitions_read", 0) - before)
            request = run.send(aggregate)
    except StopIteration as stop:
        return stop.value
