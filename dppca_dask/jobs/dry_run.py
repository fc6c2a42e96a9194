"""``dppca-dask run --dry-run``: the checks a run makes before it reserves, and the reservation itself tried on a
copy of the ledger; nothing is reserved, read for a release, released or written (see below for what a job that
ingests its store first leaves to the run).

What is checked, in the order a run checks it: the spec (when it is loaded), the job's earlier attempts in the
ledger, the output path, the store (opened; every partition read and validated, as before a real run), its schema,
the mechanism's public plan (the DpEvents to reserve, described part by part: a pca job's private mean and
explained variance, a topic model's whitening and tensor releases), the topic model's word counts, the TLS files
and the scheduler (when the spec names one), where the run would execute (``[cluster] executor``, decided from
the store's declared width and partition count as the run decides it), and the budget: the job's events are
reserved, under the real rules (composition, relation, store id), in a private snapshot of the ledger (SQLite's
backup API) that is deleted afterwards. The ledger file itself is only read.

A ``sliding-window`` job is checked as its run checks it: the ``[budget]`` totals against the ledger's key, an
earlier charge of the date, the TLS files and the scheduler, the day's ``[data.append]`` file, the window ending at
the date (chosen from the public partition table), where its release would execute (decided from the window's
declared width and partition count, by the function the release calls), and its events reserved, in the ledger
snapshot, on every partition key the run reserves: the partitions the release is charged to are decided by the
function the release calls (``plan_charges``): the window's, or for ``structure = "spectral-histogram"`` also those
before the window that the saved histogram may cover, with the run's checks of the histogram's parameters and of
the saved structure (read, not changed).

When the run would first append the day's file, the dry run checks that it exists and what the append checks on
the partition table (a dppca_dask store, a timestamp that is a real day; days come in any order), then plans the
window on the partition table as the append leaves it: one more partition, stamped with the date, under the store's id (so its ledger key is known:
``<dataset>/partition/<store id>:<index>``), and tries the reservations on the window's keys, the day's included.
Left to the run: the file's contents (format, width, values, labels: the append reads it; the dry run does not),
and, if the file holds more rows than the store's rows per partition, the further partitions the append makes
(new keys, and the executor decided again from the window's partition count). A row window (``last_rows``) is
planned the same way: it reads and is charged to every partition up to its end (with ``last`` too, to those of that
time window), whatever their row counts.

A job that refreshes its store from ``[data.ingest]`` first is planned from its spec and its source, without
ingesting (the store is neither written nor read, and need not exist yet): the source exists, its format (the
``format`` key, else its name or magic bytes), the declared width the ingest would use (``n_features``; Parquet
triplets need ``column_ids``), a named AnnData ``layer`` (the file opened read-only, no matrix read, with the
ingest's message), that the store's path can be replaced, and the reservation of the events planned from the
declared width. Left to the run, and said so in a note: the values and their width against the declared one (read
by the ingest), every partition and a topic model's word counts (read before the reservation), where the run
executes when the ingested store's partition count decides it (``"undecided"``), and the reservation of a
mechanism whose plan needs the store's number of rows (a low-rank job; private power's C-doubling on the
embedding): the dry run says it could not try it, and still succeeds. A job resuming an earlier attempt does not
refresh its store, and is checked against the store as it is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, cast

from dppca_dask.errors import DppcaError
from dppca_dask.jobs.spec import JobSpec, dated

__all__ = ["DryRun", "dry_run_job"]


@dataclass(frozen=True, slots=True)
class DryRun:
    """What a run of the job would do (public values only: the spec's, the ledger's and the declared schema)."""

    job_id: str
    status: str
    """``"would-run"``, ``"would-resume"`` or ``"already-completed"`` (the run would do nothing)."""
    mechanism: str
    epsilon: float
    delta: float
    neighbouring: str | None
    dataset: str
    output: str
    remaining_epsilon_after: float | None
    """The dataset's remaining ε once this job is charged (``None`` when nothing would be reserved)."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    parameters: dict[str, Any] = field(default_factory=dict)
    """The mechanism's parameters as the run takes them (defaults filled in, e.g. a pca job's ``center``)."""
    releases: tuple[str, ...] = field(default_factory=tuple)
    """What the reservation covers, one line per part (public calibrated constants)."""
    executor: dict[str, str] = field(default_factory=dict)
    """Where the run would execute: ``{"asked": [cluster] executor, "executor": "in-process", "cluster" or, before
    an ingest when the partition count decides, "undecided",
    "reason": ...}`` (empty when the run would do nothing)."""
    layer: str | None = None
    """The AnnData layer ``[data.ingest]`` would ingest (``None``: ``X``, or no ingest)."""
    ingest: dict[str, Any] | None = None
    """The ingest the run would perform first (``source``, ``format``, the declared ``n_features``, ``layer``,
    ``column_ids``), or ``None`` (no ``[data.ingest]``, or a resumed job, which does not refresh its store)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": True, "job_id": self.job_id, "status": self.status, "mechanism": self.mechanism,
            "epsilon": self.epsilon, "delta": self.delta, "neighbouring": self.neighbouring, "dataset": self.dataset,
            "output": self.output, "remaining_epsilon_after": self.remaining_epsilon_after,
            "notes": list(self.notes), "parameters": dict(self.parameters), "releases": list(self.releases),
            "executor": dict(self.executor), "layer": self.layer,
            "ingest": None if self.ingest is None else dict(self.ingest),
        }


@contextlib.contextmanager
def _ledger_snapshot(path: str) -> Iterator[str]:
    """A consistent copy (a SQLite file) of the ledger at ``path`` in a private temporary directory, removed on
    exit.

    A refusal raised while the copy is used (a budget exceeded, a missing dataset) names ``path``, the ledger the
    run would use, not the copy that disappears with the dry run.
    """
    with tempfile.TemporaryDirectory(prefix="dppca-dry-run-") as directory:
        copy = os.path.join(directory, "ledger.db")
        from dppca_dask.ledger import Ledger

        Ledger(path, read_only=True).copy_to(copy)  # a SQLite copy, whatever the ledger's backend
        try:
            yield copy
        except DppcaError as exc:
            from dppca_dask.ledger._postgres import redact

            shown = redact(path)  # a URL's password is never printed
            home = shown if "://" in path else os.path.dirname(os.path.abspath(path))
            exc.args = tuple(a.replace(copy, shown).replace(directory, home) if isinstance(a, str) else a
                             for a in exc.args)
            raise


def dry_run_job(spec: JobSpec, *, date: str | None = None, allow_new_store: bool = False) -> DryRun:
    """Check ``spec`` for ``date`` as :func:`~dppca_dask.jobs.run_job` would, without reserving or releasing.

    Raises the errors a run would raise before its reservation (:class:`~dppca_dask.errors.JobSpecError`,
    :class:`~dppca_dask.errors.InvalidInputError`, :class:`~dppca_dask.errors.LedgerError`,
    :class:`~dppca_dask.errors.BudgetExceededError`, ...).
    """
    from dppca_dask.coordinator.client import check_scheduler
    from dppca_dask.coordinator.preflight import preflight
    from dppca_dask.jobs import runner
    from dppca_dask.ledger import CHARGED, RESERVED, Ledger, partition_identities

    date = runner._check_date(date or runner.today())
    spec = spec.on_date(date)  # dated sources ({date}) name this run's files
    if spec.kind == "window":
        return _dry_run_window(spec, date)
    job_id = spec.job_id(date)
    output = spec.output_dir(date)
    dataset = spec.budget.dataset
    allow_new_store = allow_new_store or spec.budget.allow_new_store
    ledger = Ledger(spec.budget.ledger, read_only=True)
    previous = ledger.entry(dataset, job_id)

    layer = (spec.data.ingest or {}).get("layer")

    def outcome(status: str, neighbouring: str | None, remaining: float | None, notes: list[str],
                releases: tuple[str, ...] = (), executor: dict[str, str] | None = None) -> DryRun:
        return DryRun(job_id=job_id, status=status, mechanism=spec.mechanism, epsilon=spec.epsilon,
                      delta=spec.delta, neighbouring=neighbouring, dataset=dataset, output=output,
                      remaining_epsilon_after=remaining, notes=tuple(notes), parameters=dict(spec.parameters),
                      releases=releases, executor=dict(executor or {}), layer=layer)

    if previous is not None and previous.status == CHARGED and previous.outcome == "succeeded":
        return outcome("already-completed", previous.neighbouring, None,
                       [f"job '{job_id}' already succeeded; a run would do nothing"])
    notes: list[str] = []
    runner._check_output(output)
    resuming = previous is not None and previous.status in (RESERVED, CHARGED)
    store: Any = None
    ingest: dict[str, Any] | None = None
    if spec.data.ingest is not None and not resuming:  # the run ingests first: plan from the spec and the source
        ingest = _check_ingest(spec, notes)
        n_rows, n_cols = None, int(ingest["n_features"])
    else:
        if spec.data.ingest is not None:
            notes.append(f"the store is not refreshed when a job resumes: '{spec.data.store}' is checked as it is")
        store = spec.data.open()
        runner._check_schema(spec, store)
        n_rows, n_cols = int(store.n_rows), int(store.n_cols)
    from dppca_dask.jobs.plan import planned_events, rows_needed

    unplanned = rows_needed(spec.mechanism, spec.parameters) if n_rows is None else None
    plan = None
    if unplanned is None:
        plan = planned_events(spec.mechanism, n_rows=n_rows, n_cols=n_cols, epsilon=spec.epsilon,
                              delta=spec.delta, parameters=dict(spec.parameters))
    security = runner._security(spec)
    if spec.cluster.address:
        check_scheduler(spec.cluster.address, security=security)
    if store is not None:
        choice = runner.job_executor(spec, store)
        executor = {"asked": spec.cluster.executor, "executor": choice.executor, "reason": choice.reason}
        preflight(store, None)
        runner._check_content(spec, store)
    else:
        executor = _executor_before_ingest(spec, n_cols)
    with _ledger_snapshot(spec.budget.ledger) as copy:
        trial = Ledger(copy)
        trial.check_store(dataset, runner._job_store_id(spec, store), allow_new_store=allow_new_store)
        remaining = None
        if plan is not None:
            trial.reserve(
                dataset, job_id, epsilon=spec.epsilon, delta=spec.delta, events=plan.events,
                mechanism=spec.mechanism, neighbouring=plan.neighbouring, job_name=spec.name,
                total_epsilon=spec.budget.total_epsilon, total_delta=spec.budget.total_delta,
                # every partition of the store, as the run reserves them (before an ingest: every partition)
                partitions=None if store is None else partition_identities(store),
                store_id=runner._job_store_id(spec, store),
            )
            remaining = float(trial.budget(dataset).remaining_epsilon)
        elif spec.budget.total_epsilon is not None:  # what the reservation would check first: the key's totals
            trial.ensure_dataset(dataset, total_epsilon=spec.budget.total_epsilon,
                                 total_delta=cast(float, spec.budget.total_delta))
        else:
            trial.budget(dataset)  # a key without a budget fails here, as in the run
    if unplanned is not None:
        notes.append(f"the reservation is not tried: {unplanned}, known only once the ingest has run; the run "
                     "plans and reserves it after its ingest, before any noise is drawn")
    if resuming:
        notes.append(f"job '{job_id}' has a reservation from an earlier attempt; a run would resume it")
    result = outcome("would-resume" if resuming else "would-run", None if plan is None else plan.neighbouring,
                     remaining, notes, () if plan is None else plan.describe(), executor)
    return dataclasses.replace(result, ingest=ingest)


def _check_ingest(spec: JobSpec, notes: list[str]) -> dict[str, Any]:
    """What the run's ingest would do, checked as far as it can be without reading the data: the source exists,
    its format, the declared width (and Parquet's column ids), an AnnData ``layer`` (the file opened read-only,
    no matrix read) and that the store's path can be replaced. Returns the ingest's public description."""
    from dppca_dask.jobs import runner
    from dppca_dask._urls import is_url
    from dppca_dask.storage._files import check_replaceable

    source, fmt, args = runner.ingest_arguments(spec)
    layer = args.get("layer")
    if layer is not None:  # as the ingest checks it, without reading the matrix
        from dppca_dask.ingest.adata import check_layer

        check_layer(source, layer)
    if not is_url(spec.data.store) and os.path.lexists(spec.data.store):
        try:
            check_replaceable(spec.data.store)  # the ingest replaces only a store or an empty directory
        except DppcaError as exc:
            from dppca_dask.errors import JobSpecError

            raise JobSpecError(f"{spec.source}: [data] store: {exc}") from exc
    ids = args.get("column_ids")
    described: dict[str, Any] = {"source": source, "format": fmt, "n_features": int(args["n_features"]),
                                 "layer": layer, "column_ids": ids if isinstance(ids, str) or ids is None
                                 else f"{len(ids)} ids"}
    what = f"layer '{layer}' of " if layer is not None else ""
    notes.append(
        f"the run would first ingest {what}'{source}' ({fmt}, declared width n_features={described['n_features']}"
        + (f", column ids from {ids}" if isinstance(ids, str) else "") + f") into '{spec.data.store}'; the dry "
        "run does not ingest: the values (and their width against the declared one) are read and checked by the "
        "ingest, then every partition"
        + (" and the word counts" if spec.kind == "topics" else "") + " before the reservation, not here"
    )
    return described


def _executor_before_ingest(spec: JobSpec, n_cols: int) -> dict[str, str]:
    """Where the run would execute, decided as :func:`~dppca_dask.jobs.runner.job_executor` decides it, before the
    ingest: from the declared width, the spec and the configuration; ``"auto"`` without a scheduler depends on the
    ingested store's partition count too, and is then ``"undecided"`` unless the width alone decides it."""
    from dppca_dask.coordinator.client import _limit, choose_executor

    target = spec.cluster.address or None
    asked = spec.cluster.executor
    max_partitions, max_cols = _limit("in-process-max-partitions"), _limit("in-process-max-columns")
    few = choose_executor(target, asked, n_cols=n_cols, n_partitions=0)
    many = choose_executor(target, asked, n_cols=n_cols, n_partitions=max_partitions + 1)
    if few.executor != many.executor:
        return {"asked": asked, "executor": "undecided",
                "reason": f"decided by the run from the ingested store's partition count: in this process with at "
                          f"most {max_partitions} partition(s) ({n_cols} columns, limit {max_cols}), else an "
                          "embedded LocalCluster (dppca_dask.executor.in-process-max-*)"}
    if few.reason == many.reason:  # the partition count plays no part
        return {"asked": asked, "executor": few.executor, "reason": few.reason}
    return {"asked": asked, "executor": few.executor,  # the width alone decides
            "reason": f"{n_cols} columns above the in-process limit {max_cols} "
                      "(dppca_dask.executor.in-process-max-columns), whatever the partition count"}


def _dry_run_window(spec: JobSpec, date: str) -> DryRun:
    """A ``sliding-window`` job: the window ending at ``date`` chosen from the public partition table (with the day's
    partition when the run would append it first), where its release would execute (decided from the window's
    declared width and partition count, as the release decides it), and its events reserved on every partition key
    the run reserves (:func:`~dppca_dask.methods.window.job.window_charges`), in a snapshot of the ledger."""
    from dppca_dask.accounting import ADD_REMOVE_ROW
    from dppca_dask.coordinator.client import check_scheduler
    from dppca_dask.jobs import runner
    from dppca_dask.ledger import RESERVED, Ledger
    from dppca_dask.methods.window.budget import partition_key, reserve_partitions
    from dppca_dask.methods.window.job import earlier_charge, plan_window_job, window_charges
    from dppca_dask.methods.window.release import _choose
    from dppca_dask.methods.window.selection import parse_timestamp

    job_id = spec.job_id(date)
    output = spec.output_dir(date)
    dataset = spec.budget.dataset
    ledger = Ledger(spec.budget.ledger, read_only=True)

    def outcome(status: str, neighbouring: str | None, remaining: float | None, notes: list[str],
                releases: tuple[str, ...] = (), executor: dict[str, str] | None = None) -> DryRun:
        return DryRun(job_id=job_id, status=status, mechanism=spec.mechanism, epsilon=spec.epsilon,
                      delta=spec.delta, neighbouring=neighbouring, dataset=dataset, output=output,
                      remaining_epsilon_after=remaining, notes=tuple(notes), parameters=dict(spec.parameters),
                      releases=releases, executor=dict(executor or {}))

    if spec.budget.total_epsilon is not None:  # the run's first check (run_window_job), whatever the run leaves
        with ledger._connection() as db:  # only reads: the read-only ledger, named in its message
            ledger._ensure(db, dataset, float(spec.budget.total_epsilon), float(cast(float, spec.budget.total_delta)),
                          None)
    ledger.budget(dataset)  # a missing key fails before anything is read
    charged = earlier_charge(ledger, dataset, job_id, output)
    if charged is not None:
        return outcome("already-completed", charged.neighbouring, None,
                       [f"job '{job_id}' already succeeded; a run would do nothing"])
    # An earlier attempt that stopped before its charge left its reservations on the window's partition keys; a
    # run reserves them again unchanged (nothing of that attempt was released: the result is written after the charge)
    previous = ledger.entry(dataset, job_id)
    resuming = previous is not None and previous.status == RESERVED
    security = runner._security(spec)
    address = spec.cluster.address or None
    if address:
        check_scheduler(address, security=security)
    notes: list[str] = []
    store = spec.data.open()
    runner._check_schema(spec, store)
    pending = None  # the index of the partition the day's file would become, before it is appended
    if spec.data.append is not None:
        source = dated(spec.data.append["source"], date)
        stamp = parse_timestamp(date, name="date")
        if not any(p.timestamp == stamp for p in store.partitions):
            if not os.path.exists(source):
                from dppca_dask.errors import JobSpecError

                raise JobSpecError(f"{spec.source}: [data.append] source '{source}' does not exist")
            from dppca_dask.ingest.append import check_append

            check_append(store, date)  # what the append checks on the partition table, before it reads the file
            store, pending = _with_pending_day(store, stamp), len(store.partitions)
    from dppca_dask.methods.window.job import require_day

    require_day(store, date)  # as the run: a window is never released without its day
    plan = plan_window_job(spec, date, store)
    choice = _choose(plan, address, spec.cluster.executor)  # as the run (window()): the executor, then the charges
    charges = window_charges(spec, date, plan)
    executor = {"asked": spec.cluster.executor, "executor": choice.executor, "reason": choice.reason}
    window = tuple(plan.selection.partitions)
    partitions = tuple(charges.partitions)

    def listed(indices: tuple[int, ...]) -> str:
        return f"{len(indices)} partition(s): {', '.join(str(i) for i in indices)}" if indices else "none"

    if charges.histogram is None:
        releases = (f"{plan.release} release of the window's Gram ({listed(window)}), charged to each partition's "
                    "key",)
    else:
        before = tuple(i for i in partitions if i < window[0])
        releases = (f"{plan.release} release of the spectral histogram's first checkpoint (the window's "
                    f"{listed(window)}; before it, covered by the saved histogram: {listed(before)}), charged to "
                    "each of these partitions' keys",)
    if pending is not None:
        rows = store.metadata.get("rows_per_partition")
        more = (f"; if it holds more than {rows} rows (the store's rows per partition), the append makes further "
                f"partitions ({pending + 1}, ...): of the same day, in the same books, reserved by "
                "the run, and the run decides the executor again from the window's partition count") if rows else ""
        notes.append(f"the run would append '{source}' (stamped {date}) first: checked as the day's partition "
                     f"{pending} ('{partition_key(dataset, store, pending)}' in the ledger) with the window chosen from the "
                     f"partition table; the file itself (format, width, values) is read and checked by the append, "
                     f"not here{more}")
    with _ledger_snapshot(spec.budget.ledger) as copy:
        trial = Ledger(copy)
        if spec.budget.total_epsilon is not None:
            trial.ensure_dataset(dataset, total_epsilon=spec.budget.total_epsilon,
                                 total_delta=cast(float, spec.budget.total_delta))
        reserve_partitions(trial, dataset, job_id, store=plan.store, partitions=partitions,
                           epsilon=plan.epsilon, delta=plan.delta, events=plan.planned_events)
        touched = {partition_key(dataset, plan.store, i) for i in partitions}
        after = trial.budget(dataset)  # the least remaining among the partitions it reads
        remaining = max(0.0, after.total_epsilon - max(p.spent_epsilon for p in after.partitions
                                                       if p.partition in touched or p.partition == "*"))
    if resuming:
        notes.append(f"job '{job_id}' has reservations from an earlier attempt that released nothing; a run would "
                     "resume them and release the window")
    return outcome("would-resume" if resuming else "would-run", plan.neighbouring, remaining, notes, releases,
                   executor)


def _with_pending_day(store: Any, stamp: float) -> Any:
    """``store`` as its partition table would read once the day's file is appended stamped ``stamp``: one more
    partition (index, timestamp; no rows counted, none read), the same store id (so the same ledger keys)."""
    import dataclasses

    from dppca_dask.storage import Partition

    day = Partition(len(store.partitions), store.n_rows, store.n_rows, store.nnz, store.nnz, stamp)
    return dataclasses.replace(store, partitions=(*store.partitions, day), generation=store.generation + 1)
