"""The ``sliding-window`` job: append the day's file, release the window, charge the partitions it read.

A job spec with ``[mechanism] name = "sliding-window"`` runs here instead of the dataset-scoped runner (the window
entry's own runner, :attr:`~dppca_dask.methods.Entry.run_job`, which ``run_job`` finds in the registry): its
budget is partition-scoped (:mod:`~dppca_dask.methods.window.budget`) under the spec's ``[budget] dataset`` key.
For the run's date D:

1. ``[data.append]`` (optional): the file ``source`` (``{date}`` replaced by D) is appended to the store stamped
   D, unless a partition stamped D is already there (a re-run does not append twice);
2. the window ending at D is released once (``dppca_dask.window`` with the ``[mechanism]`` parameters, where
   ``[cluster]`` says: ``address``, or ``executor`` and the embedded cluster's ``n_workers`` and ``memory_limit``),
   charged to every partition it reads under the job id ``<id>@D``, and written to the output directory.

A ``[cluster] address`` (or a scheduler address given to the run) is reached with the ``[cluster] tls*`` settings,
as an ordinary job reaches it (the same ``Security``), and checked
(:func:`~dppca_dask.coordinator.client.check_scheduler`) before anything is appended or reserved.

The run is atomic as a ``pca`` job's is: the reservation (one entry of the dataset key, on every partition the
release reads, one transaction) is made before any value is read; once the release's noise is drawn the ledger
records it (never refunded); the result is written to ``.pending/`` and marked complete, then the reservation
becomes a charge, then the result is moved into place. Killed at any point, a re-run finishes what was released
(a complete pending result is charged and published, never released again), returns a reservation that released
nothing, or refuses (exit 3) when values were released but no complete result is left.

A re-run of a completed date prints the saved release and spends nothing, and is refused (exit 2) when its spec
asks for another release (other privacy parameters or window) than the one saved; a run whose charge is recorded but
whose result is missing is refused (running it again would be a second release). Either way the outcome names every
partition the job id is charged to (:func:`charged_partitions`), with its timestamp (public: the partition table),
never anything read from the rows.

The dry run (:func:`dry_run_window_job`, ``dppca-dask run --dry-run``) checks a ``sliding-window`` job as its
run checks it: the ``[budget]`` totals against the ledger's key, an earlier charge of the date, the TLS files and the scheduler, the day's ``[data.append]`` file, the window ending at
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
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, cast

from dppca_dask.errors import BudgetExceededError

__all__ = ["ChargedPartition", "charged_partitions", "dry_run_window_job", "earlier_charge", "plan_window_charges",
           "require_day", "run_window_job", "window_charges"]


@dataclass(frozen=True)
class ChargedPartition:
    """One partition key a window job is charged to: the job's dataset key, the partition's ledger key, its index
    and timestamp in the store (``None`` when the key is another store's), and its ledger entry."""

    dataset: str
    key: str
    index: int | None
    timestamp: str | None
    entry: Any

    def to_dict(self) -> dict[str, Any]:
        e = self.entry
        return {"key": self.key, "partition": self.index, "timestamp": self.timestamp, "status": e.status,
                "outcome": e.outcome, "epsilon": e.epsilon, "delta": e.delta, "attempts": e.attempts}

    def label(self) -> str:
        """The key and, when known, its partition's timestamp: ``KEY (2026-11-02)``."""
        return f"{self.key} ({self.timestamp})" if self.timestamp else self.key


def _stamp(seconds: float | None) -> str | None:
    """A partition timestamp as its day (``2026-11-02``) when it is midnight UTC, else as an ISO time."""
    if seconds is None:
        return None
    import datetime as _dt

    from dppca_dask.methods.window.selection import _iso

    if float(seconds) % 86400 == 0:
        return _dt.datetime.fromtimestamp(float(seconds), tz=_dt.timezone.utc).date().isoformat()
    return _iso(float(seconds))


def charged_partitions(ledger: Any, dataset: str, job_id: str, store: Any) -> tuple[ChargedPartition, ...]:
    """Every partition of ``dataset`` that ``job_id`` is charged to in ``ledger``, in partition order, with its
    index and timestamp in ``store`` (the public partition table; nothing about the rows; ``None`` for a partition
    ``store`` does not have)."""
    from dppca_dask.ledger import CHARGED, partition_identities

    entry = ledger.entry(dataset, job_id)
    if entry is None or entry.status != CHARGED:
        return ()
    parts = getattr(store, "partitions", ())
    names = partition_identities(store) if parts else ()
    index_of: dict[str, int] = {}
    for position, name in enumerate(names):
        index_of.setdefault(name, position)
    out = []
    for key in entry.partitions:
        found = index_of.get(key)
        stamp = None if found is None else _stamp(parts[found].timestamp)
        out.append(ChargedPartition(dataset, key, found, stamp, entry))
    return tuple(sorted(out, key=lambda c: (c.index is None, c.index or 0, c.key)))


def _partition_table(data: Any) -> Any:
    """The store at ``path`` for its partition table, or ``None`` when it cannot be opened (a completed job's
    outcome then names its keys without their timestamps)."""
    from dppca_dask.errors import StoreCorruptError, StoreNotFoundError, UnsupportedStoreVersionError

    try:
        return data.open()
    except (StoreNotFoundError, StoreCorruptError, UnsupportedStoreVersionError, OSError):
        return None


def earlier_charge(ledger: Any, dataset: str, job_id: str, output: str) -> Any:
    """The charge of a completed earlier run of ``job_id`` (``None`` when there is none); a charge whose result is
    missing from ``output`` is refused (running it again would be a second release)."""
    from dppca_dask.jobs.steps import PENDING
    from dppca_dask.ledger import CHARGED

    charged = ledger.entry(dataset, job_id)
    if charged is None or charged.status != CHARGED:
        return None
    if os.path.exists(os.path.join(output, "release.json")) or (
            charged.outcome == "succeeded" and _pending_complete(os.path.join(output, PENDING), job_id)):
        return charged
    raise BudgetExceededError(
        f"job '{job_id}' is charged to the partitions of '{dataset}' but its result is missing from "
        f"'{output}'; running it again would be a second release: restore the result, or give the run a "
        "new job id (--job-id or --date)"
    )


def plan_window_job(spec: Any, date: str, store: Any) -> Any:
    """The window release's public plan for ``date`` (:func:`~dppca_dask.methods.window.release.plan_window`:
    the window chosen from the public partition table; reads no data)."""
    import inspect

    from dppca_dask.methods.window.release import plan_window

    parameters = dict(spec.parameters)
    parameters.setdefault("end", date)
    names = set(inspect.signature(plan_window).parameters) - {"store", "epsilon", "delta"}
    return plan_window(store, epsilon=spec.epsilon, delta=spec.delta,
                       **{k: v for k, v in parameters.items() if k in names})


def plan_window_charges(spec: Any, date: str, store: Any) -> tuple[Any, Any]:
    """The window release's public plan for ``date`` and the partitions its run is charged to
    (:func:`~dppca_dask.methods.window.release.plan_charges`, as :func:`~dppca_dask.window`
    decides them for the run: the window's, or a spectral histogram's, validated with the saved structure); reads
    no partition."""
    plan = plan_window_job(spec, date, store)
    return plan, window_charges(spec, date, plan)


def window_charges(spec: Any, date: str, plan: Any) -> Any:
    """The partitions the run of ``plan`` (:func:`plan_window_job`) is charged to, as :func:`plan_window_charges`
    gives them; for a caller that decides the executor in between, as the run does."""
    from dppca_dask.methods.window.release import plan_charges

    parameters = dict(spec.parameters)
    parameters.setdefault("end", date)
    names = ("structure", "last", "end", "eta", "regularizer", "cache")
    return plan_charges(plan, **{k: parameters[k] for k in names if k in parameters})


def require_day(store: Any, date: str) -> None:
    """Refuse a window release for ``date`` when no partition of ``store`` is stamped within that day (UTC): the
    day has not arrived, and the window would be released without it (a public check on the partition table)."""
    from dppca_dask.errors import InvalidParameterError
    from dppca_dask.methods.window.selection import parse_timestamp

    start = parse_timestamp(date, name="date")
    if not any(p.timestamp is not None and start <= p.timestamp < start + 86400.0 for p in store.partitions):
        raise InvalidParameterError(
            f"no partition of '{store.path}' is stamped {date}: the day has not arrived, and the window would be "
            f"released without it; append it (`dppca-dask append {store.path} FILE --timestamp {date}`, or "
            "[data.append] in the job) and run the job again"
        )


def _pending_complete(pending: str, job_id: str) -> bool:
    """Whether ``pending`` holds a complete result of ``job_id`` (its ``COMPLETE`` marker written last)."""
    import json

    from dppca_dask.jobs.steps import COMPLETE

    try:
        with open(os.path.join(pending, COMPLETE), encoding="utf-8") as fh:
            return bool(json.load(fh).get("job_id") == job_id)
    except (OSError, ValueError, AttributeError):
        return False


def _release_spec(spec: Any) -> dict[str, Any]:
    """What a window job's release is: its privacy parameters and its mechanism's (the window, the structure...),
    as its job id's saved ``job.json`` records them; a re-run of a completed id with others is refused."""
    import json

    return json.loads(json.dumps({"mechanism": spec.mechanism, "epsilon": spec.epsilon, "delta": spec.delta,
                                  "parameters": dict(spec.parameters)}, sort_keys=True, default=str))


def _check_same_release(spec: Any, output: str, job_id: str, dataset: str) -> None:
    """Refuse (exit 2) a run of ``job_id`` whose spec asks for another release than the one its earlier attempt
    recorded in ``output`` (a job id stands for one release)."""
    import json

    from dppca_dask.errors import LedgerError
    from dppca_dask.jobs.steps import JOB_FILE

    path = os.path.join(output, JOB_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            saved = json.load(fh)
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        raise LedgerError(f"'{path}' cannot be read ({type(exc).__name__}); it records job '{job_id}': restore it, or "
                          "give the run a new job id (--job-id or --date)") from exc
    if saved.get("job_id") == job_id and saved.get("release") != _release_spec(spec):
        raise LedgerError(
            f"job id '{job_id}' already has an entry for dataset '{dataset}' with other parameters (saved in "
            f"'{path}': {json.dumps(saved.get('release'), sort_keys=True)}); a job id stands for one release, and "
            "its result is not this spec's: give the run a new job id (--job-id or --date)"
        )


class _JobLedger:
    """The job's view of its ledger for the release: the reservation as the release makes it (with the job's kill
    point after it), but the release's charge deferred to the job, which charges once its result is pending. A
    release's noise, once drawn, is recorded at once (``note_first_release``): from then on the reservation is never
    returned (invariant 6). A failure's charge goes through."""

    def __init__(self, ledger: Any) -> None:
        self._ledger = ledger
        self.path, self.id = ledger.path, ledger.id

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ledger, name)

    def reserve(self, *args: Any, **kwargs: Any) -> Any:
        from dppca_dask.jobs import steps

        entry = self._ledger.reserve(*args, **kwargs)
        steps._kill_point("reserved")
        return entry

    def charge(self, dataset: str, job_id: str, *, outcome: str = "succeeded") -> Any:
        if outcome != "succeeded":
            return self._ledger.charge(dataset, job_id, outcome=outcome)
        return self._ledger.note_first_release(dataset, job_id)


def run_window_job(spec: Any, *, date: str, client: Any = None, noise: Any = None,
                   allow_new_store: bool = False) -> Any:
    """Run a ``sliding-window`` job spec for ``date`` (``YYYY-MM-DD``); returns a :class:`~dppca_dask.jobs.steps.JobOutcome`."""
    from dppca_dask.jobs import steps
    from dppca_dask.jobs.steps import JobOutcome, job_lock
    from dppca_dask.ledger import CHARGED, RESERVED, Ledger
    from dppca_dask.methods.window.release import load_release

    ledger = Ledger(spec.budget.ledger)
    dataset = spec.budget.dataset
    if spec.budget.total_epsilon is not None:
        ledger.ensure_dataset(dataset, total_epsilon=spec.budget.total_epsilon, total_delta=spec.budget.total_delta)
    ledger.budget(dataset)  # a missing key fails before anything is read
    job_id = spec.job_id(date)
    output = spec.output_dir(date)
    pending = os.path.join(output, steps.PENDING)
    with job_lock(ledger, dataset, job_id):
        _check_same_release(spec, output, job_id, dataset)
        previous = ledger.entry(dataset, job_id)
        if previous is not None and previous.status == CHARGED and previous.outcome == "succeeded":
            steps._finalise(output)  # a crash between the charge and the move of the result
        charged = earlier_charge(ledger, dataset, job_id, output)
        if charged is not None:
            partitions = charged_partitions(ledger, dataset, job_id, _partition_table(spec.data))
            return JobOutcome(job_id, "already-completed", output, charged, load_release(output),
                              partitions=partitions)
        if previous is not None and previous.status == RESERVED and _pending_complete(pending, job_id):
            ledger.charge(dataset, job_id, outcome="succeeded")  # released and written: finish, never again
            steps._kill_point("charged")
            steps._finalise(output)
            partitions = charged_partitions(ledger, dataset, job_id, _partition_table(spec.data))
            return JobOutcome(job_id, "completed-from-pending", output, partitions[-1].entry, load_release(output),
                              partitions=partitions)
        if previous is not None and (previous.status == CHARGED or previous.first_release is not None):
            if previous.status == RESERVED:
                ledger.charge(dataset, job_id, outcome="failed")
            raise BudgetExceededError(
                f"job '{job_id}' released values and its budget stays spent (ledger '{spec.budget.ledger}', dataset "
                f"'{dataset}'), but no complete result of it was found in '{output}': running it again would be a "
                "second release; give the run a new job id (--job-id or --date) to spend new budget"
            )
        steps._kill_point("before-reservation")
        result = _release_window(spec, date, ledger, dataset, job_id, output, client=client, noise=noise,
                                 allow_new_store=allow_new_store)
        partitions = charged_partitions(ledger, dataset, job_id, _partition_table(spec.data))
        return JobOutcome(job_id, "completed", output, partitions[-1].entry, result, partitions=partitions)


def _release_window(spec: Any, date: str, ledger: Any, dataset: str, job_id: str, output: str, *, client: Any,
                    noise: Any, allow_new_store: bool) -> Any:
    """Check, append, reserve and release the window, write the result pending, charge, publish (see the module
    docstring); returns the release."""
    import contextlib
    import json

    import dask.config

    from dppca_dask.coordinator import connect
    from dppca_dask.coordinator.client import check_scheduler
    from dppca_dask.jobs import steps
    from dppca_dask.methods._registry import resolve
    from dppca_dask.methods.window.selection import parse_timestamp
    from dppca_dask.jobs.spec import dated
    from dppca_dask.storage._files import make_directories, make_tree_private

    store = spec.data.open()
    steps._check_schema(spec, store)  # an inferred width is refused before anything is read
    steps._check_output(output)
    stamp = parse_timestamp(date, name="date")
    security = steps._security(spec)  # missing TLS files, or a scheduler that cannot be used, fail before the append
    address = spec.cluster.address if client is None and spec.cluster.address else None
    if isinstance(client, str) and client != "local":  # a scheduler given by the caller: the same security
        address, client = client, None
    if address:
        check_scheduler(address, security=security)
    # the same people's rows in another store: refused unless allowed; either way its days keep their books
    ledger.check_store(dataset, steps.store_id(store),
                       allow_new_store=bool(allow_new_store or spec.budget.allow_new_store))
    if spec.data.append is not None:
        from dppca_dask.ingest.append import append_file

        if not any(p.timestamp == stamp for p in store.partitions):
            options = {k: v for k, v in spec.data.append.items() if k != "source"}
            append_file(store, dated(spec.data.append["source"], date), timestamp=date, **options)
            store = spec.data.open()
    require_day(store, date)  # the day not arrived: refused (exit 2) rather than released without it
    parameters = dict(spec.parameters)
    parameters.setdefault("end", date)
    make_directories(output)  # owner-only unless DPPCA_DASK_FILE_MODE=umask
    steps._write_json(os.path.join(output, steps.JOB_FILE), {"job_id": job_id, "date": date, "dataset": dataset,
                                                              "release": _release_spec(spec)})
    pending = os.path.join(output, steps.PENDING)
    if os.path.isdir(pending):  # what an attempt that released nothing left half-written
        import shutil

        shutil.rmtree(pending)
    embedded = {f"dppca_dask.cluster.{key}": value for key, value in (
        ("n-workers", spec.cluster.n_workers), ("memory-limit", spec.cluster.memory_limit)) if value is not None}
    deferred = _JobLedger(ledger)
    with contextlib.ExitStack() as stack:
        stack.enter_context(dask.config.set(embedded))  # the embedded cluster's shape, when the release starts one
        if address:  # the scheduler, reached with the spec's TLS settings
            client = stack.enter_context(connect(address, security=security))
        window = resolve("dppca_dask.window")  # the entry point, by its public name
        result = window(spec.data.open(), epsilon=spec.epsilon, delta=spec.delta, ledger=deferred,
                        dataset=dataset, job_id=job_id, client=client, executor=spec.cluster.executor,
                        noise=noise, **parameters)
    try:
        steps._kill_point("released")
        # Owner-only whatever the umask, like every job's output: directories 0700, files 0600.
        make_directories(pending)
        make_tree_private(result.save(pending))
        steps._kill_point("pending-written")
        steps._write_json(os.path.join(pending, steps.COMPLETE), {"job_id": job_id})
        steps._kill_point("pending-complete")
    except BaseException:
        ledger.charge(dataset, job_id, outcome="failed")  # released: the budget stays spent
        raise
    ledger.charge(dataset, job_id, outcome="succeeded")
    steps._kill_point("charged")
    steps._finalise(output)
    return result


def dry_run_window_job(spec: Any, date: str) -> Any:
    """A ``sliding-window`` job: the window ending at ``date`` chosen from the public partition table (with the day's
    partition when the run would append it first), where its release would execute (decided from the window's
    declared width and partition count, as the release decides it), and its events reserved on every partition key
    the run reserves (:func:`~dppca_dask.methods.window.job.window_charges`), in a snapshot of the ledger."""
    from dppca_dask.coordinator.client import check_scheduler
    from dppca_dask.jobs.dry_run import DryRun, _ledger_snapshot
    from dppca_dask.jobs.spec import dated
    from dppca_dask.jobs.steps import _check_schema, _security
    from dppca_dask.ledger import RESERVED, Ledger
    from dppca_dask.methods.window.budget import partition_key, reserve_partitions
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
    security = _security(spec)
    address = spec.cluster.address or None
    if address:
        check_scheduler(address, security=security)
    notes: list[str] = []
    store = spec.data.open()
    _check_schema(spec, store)
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
