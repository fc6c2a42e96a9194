"""A run's progress, as :func:`~dppca_dask.pca` reports it: the caller's ``on_release`` callback (a checkpoint)
first, then a log line and the progress bar for each released iteration, from public numbers only."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

__all__ = ["on_release", "progress_bar"]

#: The entry points' logger (its name, ``dppca_dask.api``, is what users configure).
log = logging.getLogger("dppca_dask.api")


def on_release(total_steps: int, callback: Any, bar: Any, iteration_times: list[float]) -> Callable[..., None]:
    """The run's ``on_release``: the caller's ``callback`` first (a checkpoint), then a log line and the progress
    bar for each released iteration (public numbers only), its wall-clock time appended to ``iteration_times``."""
    last = [time.perf_counter()]

    def released(state: Any, events: tuple[Any, ...]) -> None:
        if callback is not None:
            callback(state, events)  # checkpoint first: what is logged below must be on disk
        if getattr(state, "stage", "iteration") != "iteration":  # a block run's quantile, mean or variance
            return
        if getattr(state, "pending_index", None) is not None:  # an AboveThreshold step; its Gaussian step follows
            log.debug("released the threshold step of iteration %d/%d", len(iteration_times) + 1, total_steps)
            return
        now = time.perf_counter()
        iteration_times.append(now - last[0])
        last[0] = now
        theta = state.thresholds[-1][-1] if state.thresholds and state.thresholds[-1] else None
        # public numbers only (iteration counters, the released θ); no durations: they depend on the data
        log.info("released iteration %d/%d (theta=%s)", len(iteration_times), total_steps,
                 f"{theta:.4g}" if theta is not None else "-")
        bar.iteration(theta)

    return released


def progress_bar(total: int, mechanism: str, enabled: bool | None, partitions: int) -> Any:
    """One bar over the run's passes (:class:`~dppca_dask._progress.RunProgress`)."""
    from dppca_dask._progress import RunProgress

    return RunProgress(iterations=total, partitions=partitions, desc=mechanism, enabled=enabled)
