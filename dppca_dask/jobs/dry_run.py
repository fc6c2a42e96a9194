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

An entry kind with a job runner of its own (:attr:`~dppca_dask.methods.Entry.dry_run`) is checked by its own dry
run, as its run checks it: a ``sliding-window`` job's is
:func:`~dppca_dask.methods.window.job.dry_run_window_job`.

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
from dppca_dask.jobs.spec import JobSpec

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
    from dppca_dask.jobs import runner, steps
    from dppca_dask.ledger import CHARGED, RESERVED, Ledger, partition_identities

    date = runner._check_date(date or runner.today())
    spec = spec.on_date(date)  # dated sources ({date}) name this run's files
    if spec.entry.dry_run is not None:  # an entry with a runner of its own checks as that runner does
        from dppca_dask.methods._registry import resolve

        return cast(DryRun, resolve(spec.entry.dry_run)(spec, date))
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
    steps._check_output(output)
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
        steps._check_schema(spec, store)
        n_rows, n_cols = int(store.n_rows), int(store.n_cols)
    from dppca_dask.jobs.plan import planned_events, rows_needed

    unplanned = rows_needed(spec.mechanism, spec.parameters) if n_rows is None else None
    plan = None
    if unplanned is None:
        plan = planned_events(spec.mechanism, n_rows=n_rows, n_cols=n_cols, epsilon=spec.epsilon,
                              delta=spec.delta, parameters=dict(spec.parameters))
    security = steps._security(spec)
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
        + (f" and {spec.entry.content_checked}" if spec.entry.content_checked else "") + " before the reservation, "
        "not here"
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
