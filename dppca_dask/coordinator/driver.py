"""The coordinator: the only code that talks to Dask.

For each request of an algorithm it maps one kernel over the partitions (a futures loop: ``client.submit`` per
partition, the broadcast vector sent afresh as a task of its own), reduces the partials with a tree of fan-in
``fan_in`` on the workers down to at most ``fan_in`` partials, and gathers and merges those into the exact
aggregate (a request's ``final`` merge may keep parts side by side that the algorithm needs only a piece of). Partitions are placed on the workers round-robin by their public index (``Coordinator._place``). The task graph of a step has a constant size, whatever the
iteration. Partitions are either persisted on the workers (when asked: ``persist=True`` or the ``dppca_dask.persist``
setting; in-memory inputs always) or re-read from the store by every step (out-of-core). The choice is never made
from the data's size: whether partitions are persisted shows in task names, memory and timings, and the number of
stored entries or rows is private.

Retried tasks and recomputed partitions return the same exact aggregate (kernels are deterministic), and noise is
drawn by the algorithm only after the aggregate is back at the coordinator, so neither can cause a second draw.
"""

from __future__ import annotations

import logging
import uuid
from concurrent.futures import CancelledError
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import dask
import numpy as np

from dppca_dask.coordinator.requests import (
    FilteredSum,
    GramMatrix,
    GramTimes,
    PlainGramTimes,
    PowerStep,
    Request,
)
from dppca_dask.coordinator.guard import guarded, unwrap
from dppca_dask.coordinator.sources import PartitionData, PartitionSource, scatter_inputs
from dppca_dask.errors import InvalidParameterError
from dppca_dask.kernels import power as K

__all__ = ["Coordinator", "LocalExecutor", "StepPlan", "execute_request_locally", "load_partition", "register_request"]

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------------- kernel adapters (workers)
def load_partition(item: Any) -> PartitionData:
    """The partition a kernel task is given: a persisted :class:`PartitionData`, or read now from ``(loader, args)``
    (what every registered task calls first)."""
    if isinstance(item, PartitionData):
        return item
    loader, args = item
    return loader(*args)


def _power_task(item: Any, x: np.ndarray, *, row_norm_bound: float, grid: Any, top_m: int) -> K.PowerPartial:
    part = load_partition(item)
    return K.power_partial(
        part.block, part.norms, x, partition=part.index, row_norm_bound=row_norm_bound, grid=grid, top_m=top_m
    )


def _filtered_task(
    item: Any, x: np.ndarray, *, row_norm_bound: float, grid: Any, index: int, cuts: Mapping[int, int]
) -> np.ndarray:
    part = load_partition(item)
    return K.filtered_sum(
        part.block, part.norms, x, row_norm_bound=row_norm_bound, grid=grid, index=index, above=cuts[part.index]
    )


def _gram_times_task(item: Any, x: np.ndarray, *, row_norm_bound: float) -> np.ndarray:
    part = load_partition(item)
    return K.gram_times(part.block, part.norms, x, row_norm_bound=row_norm_bound)


def _plain_gram_times_task(item: Any, x: np.ndarray) -> np.ndarray:
    part = load_partition(item)
    return K.plain_gram_times(part.block, x)


def _gram_matrix_task(item: Any, *, row_norm_bound: float) -> np.ndarray:
    part = load_partition(item)
    return K.gram_matrix(part.block, part.norms, row_norm_bound=row_norm_bound)


def _identity(value: Any) -> Any:
    return value


def _sum(*parts: np.ndarray) -> np.ndarray:
    out = np.array(parts[0], dtype=np.float64, copy=True)
    for p in parts[1:]:
        out += p
    return out


@dataclass(frozen=True)
class StepPlan:
    """How the coordinator executes one request: a kernel task per partition, then a tree of merges."""

    task: Callable[..., Any]
    """``task(item, *broadcast, **kwargs)``: ``item`` is a :class:`PartitionData` or a ``(loader, args)`` pair."""
    kwargs: Mapping[str, Any]
    """Small public keyword arguments of the task."""
    broadcast: Any
    """A vector or matrix scattered to the workers (``None`` for none)."""
    merge: Callable[..., Any]
    """Associative combination of partials (also applied to a single partial)."""
    partitions: Sequence[int] | None = None
    """Partitions to map over (``None``: all)."""
    empty: Callable[..., Any] | None = None
    """The aggregate of zero partitions, given d."""
    final: Callable[..., Any] | None = None
    """The last combination, of the partials gathered at the coordinator (``None``: ``merge``). It may keep parts
    side by side where the algorithm needs only a piece of their sum (:func:`~dppca_dask.kernels.power.gather_power_partials`)."""


_PLANNERS: dict[type, tuple[Callable[..., StepPlan], bool]] = {}


def register_request(request_type: type, planner: Callable[..., StepPlan]) -> None:
    """Teach the coordinator (and the local executor) how to execute a new request type.

    ``planner(request)`` or ``planner(request, n_partitions)`` returns the :class:`StepPlan`.
    """
    import inspect

    takes_count = len(inspect.signature(planner).parameters) >= 2
    _PLANNERS[request_type] = (planner, takes_count)


def _step_plan(request: Any, n_partitions: int) -> StepPlan:
    entry = _PLANNERS.get(type(request))
    if entry is None:
        raise InvalidParameterError(f"unknown request type {type(request).__name__}; register it first")
    planner, takes_count = entry
    return planner(request, n_partitions) if takes_count else planner(request)


def _plan(request: Any, n_partitions: int
          ) -> tuple[Callable[..., Any], dict[str, Any], Any, Callable, Callable, list[int]]:
    """Kernel, its keyword arguments, the broadcast value, the tree's and the coordinator's merge functions and the
    partitions of a request."""
    plan = _step_plan(request, n_partitions)
    indices = list(range(n_partitions)) if plan.partitions is None else list(plan.partitions)
    return plan.task, dict(plan.kwargs), plan.broadcast, plan.merge, plan.final or plan.merge, indices


register_request(
    PowerStep,
    lambda r: StepPlan(  # every partition gets the whole top_m: all filtered rows may sit in one partition
        _power_task,
        {"row_norm_bound": r.row_norm_bound, "grid": r.grid, "top_m": r.top_m},
        r.x,
        K.merge_power_partials,
        final=K.gather_power_partials,
    ),
)
register_request(
    FilteredSum,
    lambda r: StepPlan(
        _filtered_task,
        {"row_norm_bound": r.row_norm_bound, "grid": r.grid, "index": r.index, "cuts": dict(r.cuts)},
        r.x,
        _sum,
        partitions=sorted(r.cuts),
    ),
)
register_request(GramTimes, lambda r: StepPlan(_gram_times_task, {"row_norm_bound": r.row_norm_bound}, r.x, _sum))
register_request(PlainGramTimes, lambda r: StepPlan(_plain_gram_times_task, {}, r.x, _sum))
register_request(
    GramMatrix,
    lambda r: StepPlan(_gram_matrix_task, {"row_norm_bound": r.row_norm_bound}, None, _sum,
                       empty=lambda d: np.zeros((d, d))),
)


def _empty_aggregate(request: Any, n_cols: int) -> Any:
    if isinstance(request, PowerStep):
        import scipy.sparse as sp

        return K.PowerPartial(
            np.zeros(request.grid.n_bins, dtype=np.int64), np.zeros(n_cols),
            sp.csr_array((request.grid.n_points, n_cols)), {},
        )
    plan = _step_plan(request, 1)
    if plan.empty is not None:
        return plan.empty(n_cols)
    return np.zeros(n_cols)


# ------------------------------------------------------------------------------------------------ executors
class LocalExecutor:
    """Runs requests in this process over in-memory partitions: the reference the Dask path is tested against."""

    def __init__(self, source: PartitionSource) -> None:
        self.source = source
        self._parts = [loader(*args) for loader, args in source.loaders]
        self.partitions_read = 0  # partitions read by the passes so far (public: request types and indices)

    @property
    def n_cols(self) -> int:
        return self.source.n_cols

    def execute(self, request: Request) -> Any:
        kernel, kw, vector, _merge, final, indices = _plan(request, self.source.n_partitions)
        self.partitions_read += len(indices)
        partials = [kernel(self._parts[i], vector, **kw) if vector is not None else kernel(self._parts[i], **kw)
                    for i in indices]
        if not partials:
            return _empty_aggregate(request, self.source.n_cols)
        return final(*partials)

    def close(self) -> None:
        self._parts = []
        _drop_read_ahead(None)  # (its partitions were read in this process, the last ones with the next fetched ahead)


def _drop_read_ahead(client: Any) -> None:
    """Drop the partitions fetched ahead in every process of ``client`` (its workers; this process for the
    in-process executor): without it up to two partitions per store and worker stayed in memory after the run, until
    the worker exited. The same call on neighbouring datasets (no task, nothing in the task stream). A worker that
    cannot be reached (gone, or the client closed) is skipped: the run's result is already complete."""
    from dppca_dask.storage.store import drop_read_ahead

    run = getattr(client, "run", None)
    if run is None:  # the in-process executor: the partitions were fetched in this process
        drop_read_ahead()
        return
    try:
        run(drop_read_ahead, on_error="ignore")
    except Exception as error:  # (a closed client, a scheduler gone): nothing of the run depends on it
        log.debug("could not drop the partitions fetched ahead on the workers (%s)", type(error).__name__)


def execute_request_locally(source: PartitionSource, request: Request) -> Any:
    return LocalExecutor(source).execute(request)


class Coordinator:
    """Execute algorithm requests on a Dask cluster over the partitions of ``source``.

    Parameters
    ----------
    client
        A ``distributed.Client``.
    source
        The partitions (see :func:`dppca_dask.coordinator.sources.as_source`).
    persist
        Keep partitions in worker memory between steps. ``None``: the ``dppca_dask.persist`` setting (false by
        default). In-memory inputs are always persisted. Never decided from the data's size, which is private.
    fan_in
        Children per node of the tree reduction.
    """

    def __init__(
        self,
        client: Any,
        source: PartitionSource,
        *,
        persist: bool | None = None,
        fan_in: int = 8,
        retries: int = 1,
    ) -> None:
        if fan_in < 2:
            raise InvalidParameterError(f"fan_in must be >= 2; got {fan_in}")
        self.client = client
        self.source = source
        self.fan_in = fan_in
        self.retries = retries
        if persist is None:
            persist = bool(dask.config.get("dppca_dask.persist", False))
        self.persisted = bool(source.always_persist or persist)
        self._token = uuid.uuid4().hex[:8]
        self._step = 0
        self.partitions_read = 0  # partitions read by the passes so far (public: request types and indices)
        self._parts: list[Any] | None = None
        self._read_ahead_dropped = False
        self._placement = self._place()
        self._direct = _direct_gathers(client)
        if self.persisted:
            self._parts = self._persist()

    @property
    def n_cols(self) -> int:
        return self.source.n_cols

    def _place(self) -> list[str | None]:
        """The worker each partition is placed on: partition ``i`` on the ``i mod W``-th of the workers sorted by
        address, from the public partition index alone (never from sizes or values). Sizes of the partitions are
        unequal only through their rows' non-zeros, which placement must not reveal; equal counts per worker
        balance them in expectation. ``None`` (no preference) when the scheduler lists no workers."""
        try:
            workers = sorted(self.client.scheduler_info(n_workers=-1).get("workers", {}))
        except Exception:  # a scheduler that does not list its workers: let Dask place the tasks
            workers = []
        n = self.source.n_partitions
        return [workers[i % len(workers)] if workers else None for i in range(n)]

    def _restrictions(self, i: int) -> dict[str, Any]:
        worker = self._placement[i]
        # A preference, not a requirement: a partition whose worker is gone runs on another one.
        return {"workers": [worker], "allow_other_workers": True} if worker else {}

    def _persist(self) -> list[Any]:
        from dask.delayed import Delayed

        parts = []
        loaders = scatter_inputs(self.source, self.client, self._placement)  # in-memory blocks travel once
        for i, (loader, args) in enumerate(loaders):
            resolved = tuple(self.client.compute(a) if isinstance(a, Delayed) else a for a in args)
            parts.append(
                self.client.submit(guarded(load_partition), (loader, resolved), key=f"dppca-partition-{self._token}-{i}",
                                   retries=self.retries, **self._restrictions(i))
            )
        return parts

    def _items(self, indices: Sequence[int]) -> list[Any]:
        if self._parts is not None:
            return [self._parts[i] for i in indices]
        return [self.source.loaders[i] for i in indices]

    def execute(self, request: Request) -> Any:
        """One pass: map the request's kernel over its partitions, tree-reduce on the workers, gather."""
        kernel, kw, vector, merge, final, indices = _plan(request, self.source.n_partitions)
        if not indices:
            return _empty_aggregate(request, self.source.n_cols)
        self.partitions_read += len(indices)
        self._step += 1
        prefix = f"dppca-{type(request).__name__.lower()}-{self._token}-{self._step}"
        try:
            aggregate = self._run(prefix, kernel, kw, vector, merge, final, indices)
        except CancelledError:
            # Scattered in-memory blocks have no lineage: a lost worker loses its blocks and the partitions built
            # from them. The client still holds the blocks: scatter them again, rebuild, and run the step once more
            # (exact kernels: the same aggregate; no noise has been drawn for it).
            if not (self.source.in_memory and self._parts is not None):
                raise
            self.close()
            self._token = uuid.uuid4().hex[:8]
            self._placement = self._place()
            self._parts = self._persist()
            aggregate = self._run(f"{prefix}-again", kernel, kw, vector, merge, final, indices)
        # No durations and no data-dependent numbers in logs: only the step number, the request type and its
        # partition count, which are the same on neighbouring datasets (a FilteredSum step aside, which happens
        # only on the accounted δ_pass event).
        log.debug("step %d (%s) over %d partitions", self._step, type(request).__name__, len(indices))
        return aggregate

    def _run(self, prefix: str, kernel: Callable[..., Any], kw: dict[str, Any], vector: Any,
             merge: Callable[..., Any], final: Callable[..., Any], indices: list[int]) -> Any:
        # The broadcast value travels inside a task, not by scatter: scattered data has no lineage and is lost
        # with its worker, while a task's result is recomputed elsewhere if a worker dies.
        vector_future = (
            self.client.submit(_identity, vector, key=f"{prefix}-broadcast", retries=self.retries)
            if vector is not None else None
        )
        args = (vector_future,) if vector_future is not None else ()
        # Persisted partitions: the map task runs where its partition is. Re-read partitions: on the worker of
        # the partition's public index, so every step spreads the reads alike, and each worker takes its
        # partitions in the order of their indices (a priority from the public index alone), so that a worker
        # reading from object storage can fetch the next one of its own while it works on the current one.
        place = self._parts is None
        level = [
            self.client.submit(guarded(kernel), item, *args, key=f"{prefix}-map-{i}", retries=self.retries,
                               **({**self._restrictions(i), "priority": -i} if place else {}), **kw)
            for i, item in zip(indices, self._items(indices))
        ]
        depth = 0
        while len(level) > self.fan_in:
            depth += 1
            level = [
                self.client.submit(guarded(merge), *level[i : i + self.fan_in], key=f"{prefix}-reduce-{depth}-{i}",
                                   retries=self.retries)
                for i in range(0, len(level), self.fan_in)
            ]
        # The last level (at most fan_in partials) is gathered and merged here: one hop fewer than a last reduce
        # task on a worker. Task errors come back as values without data in them (see coordinator.guard).
        partials = [unwrap(p) for p in self.client.gather(level, direct=self._direct)]
        del level, vector_future
        return final(*partials)

    def close(self) -> None:
        if self._parts is not None:
            for f in self._parts:
                f.release()
            self._parts = None
        if self.partitions_read and not self._read_ahead_dropped:
            # The partitions the workers fetched ahead or kept on their disks (stores in object storage) go with the
            # run; persisted runs read through the same path (their first step) and drop them too.
            self._read_ahead_dropped = True
            _drop_read_ahead(self.client)

    def __enter__(self) -> Coordinator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _direct_gathers(client: Any) -> bool | None:
    """Whether a step's partials are fetched straight from the workers (``True``) or through the scheduler (Dask's
    default for a client outside the cluster, ``None`` here).

    The client's own setting (``Client(direct_to_workers=...)`` or ``distributed.client.direct-to-workers``) when it
    has one; otherwise straight from the workers when the client was made for a ``LocalCluster`` object, whose
    workers it can always reach (the package's embedded clusters); a client given a scheduler's address may sit where
    only the scheduler is reachable, and keeps Dask's default. Through the scheduler, each partial is received and
    sent on once more: on the 10⁸-entry benchmark store (8 partials of 0.6 MB), the private step's aggregate was
    back 15.3-17.4 ms after its last task ended, against 10.3-10.7 ms straight from the workers (the plain step's
    0.16 MB partials: 6-8 ms either way). The route carries the same partials either way.
    """
    setting = getattr(client, "direct_to_workers", None)
    if setting is not None:
        return bool(setting)
    cluster = getattr(client, "cluster", None)
    if cluster is None:  # (an in-process client has none: distributed is then not imported at all)
        return None
    from distributed import LocalCluster

    return True if isinstance(cluster, LocalCluster) else None
