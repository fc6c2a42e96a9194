"""Running a job: refresh the store, reserve the budget, run the mechanism, charge, write the result.

The order is what makes a job safe to schedule and to re-run:

1. the spec, every parameter of the mechanism, the store (its declared schema and its id) and the output path
   are checked, and the store's metadata read: bad input fails here, before any budget is reserved (DESIGN.md
   invariant 7). The ledger must exist (``dppca-dask budget init`` makes it; a run never does);
2. the job's DpEvents are reserved in the ledger under its job id ``<id>@<date>`` on every partition of the store
   (one transaction; refused with exit code 3 if any partition's books would exceed the dataset's total with the
   releases of any kind already charged to it);
3. the mechanism runs; sequential adaptive power iteration (``center = "none"``) writes each released (noisy)
   iterate to ``checkpoint.json`` in the output directory before anything else sees it;
4. the ledger records the release, the result is written to ``.pending/`` and marked complete, the reservation
   becomes a charge, and the result is moved into place.

A job that fails without reading any data value and without releasing anything (the store or the cluster could
not be reached, a chunk is missing) returns its reservation; any other failure keeps the charge (invariant 6).
Running the same job id again:

- after success, does nothing (idempotent per job id and date) and reports the existing result;
- after a crash with a complete result in ``.pending/`` (written, not yet charged): charges it and moves it into
  place, without computing a second release;
- after a crash or a failure, continues under the same reservation: adaptive power iteration (sequential or block,
  centred or not) resumes from its last checkpoint without repeating a release (so the total released is exactly
  one run's); other mechanisms (``auto``, the topic model, ...) start again only if nothing of theirs was released;
- between the charge and the move of the result, finishes the move.

A result already in the output directory for the job id is never released again, whatever the ledger says.
Files the job writes (``job.json``, checkpoints, results) are owner-only (0600, directories 0700).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Iterator
from typing import Any, cast

from dppca_dask.errors import (
    BudgetExceededError,
    JobSpecError,
    LedgerError,
    StoreCorruptError,
    StoreNotFoundError,
    UnsupportedStoreVersionError,
)
from dppca_dask.jobs import steps
from dppca_dask.jobs.spec import JobSpec
from dppca_dask.jobs.steps import (
    CHECKPOINT,
    COMPLETE,
    JOB_FILE,
    PENDING,
    JobOutcome,
    _check_output,
    _check_schema,
    _finalise,
    _makedirs,
    _owner_only,
    _read_json,
    _resolved,
    _security,
    _write_json,
    job_lock,
    store_id,
)
from dppca_dask.ledger._postgres import redact  # a ledger URL's password is never printed

__all__ = ["ingest_arguments", "job_executor", "run_job"]

log = logging.getLogger(__name__)

#: Failures that read no data value: the store or the cluster could not be reached, a chunk is missing or cannot
#: be decoded, or the process was interrupted. With no noise drawn and nothing released, the reservation returns.
_REFUNDABLE: tuple[type[BaseException], ...] = (
    StoreNotFoundError, StoreCorruptError, UnsupportedStoreVersionError, OSError, KeyboardInterrupt,
)


def today() -> str:
    """The default run date: today in UTC, ``YYYY-MM-DD``."""
    return _dt.datetime.now(_dt.timezone.utc).date().isoformat()


def _check_date(date: str) -> str:
    try:
        return _dt.date.fromisoformat(date).isoformat()
    except (TypeError, ValueError) as exc:
        raise JobSpecError(f"date must be YYYY-MM-DD; got {date!r}") from exc


def _job_store_id(spec: JobSpec, store: Any) -> str:
    """The store id the ledger records for the job's dataset key: the store's own, except for a store the job
    refreshes from ``[data.ingest]`` (a new store, with a new id, at every run), which is identified by its
    resolved path and source (known before the ingest: ``store`` may then be ``None``)."""
    if spec.data.ingest is None:
        return store_id(store)
    key = json.dumps([_resolved(spec.data.store), _resolved(spec.data.ingest["source"])])
    return f"ingested:{hashlib.sha256(key.encode()).hexdigest()[:32]}"


def ingest_arguments(spec: JobSpec) -> tuple[str, str, dict[str, Any]]:
    """(source, format, keyword arguments of :func:`dppca_dask.ingest.ingest`) of the job's ``[data.ingest]``, with
    the spec's declared width as ``n_features`` (so the store's schema is declared and the ingest refuses data of
    another width). Checked before anything is read: the source exists, and Parquet triplets (``format``, else
    told from the source's name or magic bytes) come with their ``column_ids``."""
    from dppca_dask.ingest import detect_format

    assert spec.data.ingest is not None
    args = dict(spec.data.ingest)
    args.pop("source")
    source = spec.data.ingest_source()  # the run's day's file when the source is dated
    if not os.path.exists(source):
        raise JobSpecError(f"{spec.source}: [data.ingest] source '{source}' does not exist; fix the path, or make "
                           "the extract first")
    args["n_features"] = spec.data.declared_width  # required by the spec with an ingest
    fmt = args.get("format") or detect_format(source)
    if fmt == "parquet" and "column_ids" not in args:
        from dppca_dask.jobs.spec import parquet_needs_column_ids

        raise JobSpecError(parquet_needs_column_ids(spec.source))
    if "column_ids" in args and fmt != "parquet":
        raise JobSpecError(f"{spec.source}: [data.ingest] column_ids applies to Parquet triplets, but '{source}' is "
                           f"{fmt}: drop column_ids (n_features declares the width), or set format = \"parquet\"")
    return source, str(fmt), args


def _published(output: str, job_id: str) -> bool:
    """Whether the output directory already holds a result of ``job_id``."""
    result, job = os.path.join(output, "result.json"), os.path.join(output, JOB_FILE)
    if not (os.path.exists(result) and os.path.exists(job)):
        return False
    try:
        return _read_json(job).get("job_id") == job_id
    except (OSError, ValueError, AttributeError):
        return True  # unreadable: do not risk a second release


def _pending_complete(output: str, job_id: str) -> bool:
    marker = os.path.join(output, PENDING, COMPLETE)
    if not os.path.exists(marker):
        return False
    try:
        return _read_json(marker).get("job_id") == job_id
    except (OSError, ValueError, AttributeError):
        return False


# ------------------------------------------------------------------------------------------------ planning


def _plan(spec: JobSpec, store: Any) -> tuple[str, tuple[Any, ...]]:
    """(neighbouring relation, DpEvents to reserve) from public parameters and the store's declared shape."""
    from dppca_dask.jobs.plan import plan_job

    plan = plan_job(spec, store)
    return plan.neighbouring, plan.events


def _check_content(spec: JobSpec, store: Any) -> None:
    """Checks of the values a mechanism needs beyond the preflight's, before anything is reserved: the entry's
    (:attr:`~dppca_dask.methods.Entry.check_content`; the topic model's word counts must be whole numbers from 0
    to 2^53, one read of the data in this process, nothing derived)."""
    if spec.entry.check_content is not None:
        spec.entry.check_content(store)


def _refresh_store(spec: JobSpec) -> None:
    from dppca_dask.ingest import ingest

    source, _, args = ingest_arguments(spec)
    log.info("refreshing store %s from %s", spec.data.store, source)
    with _no_counts_at_info():
        ingest(source, spec.data.store, overwrite=True, storage_options=spec.data.storage_options, **args)
    log.info("store %s refreshed", spec.data.store)


class _DemoteCounts(logging.Filter):
    """Ingest and storage log the exact shape and entry counts at INFO; inside a job these are about the private
    data, so they go to DEBUG (kept when DEBUG is on, dropped otherwise)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO:
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


@contextlib.contextmanager
def _no_counts_at_info() -> Iterator[None]:
    import importlib

    for module in ("dppca_dask.ingest.svmlight", "dppca_dask.ingest.mtx", "dppca_dask.ingest.parquet",
                   "dppca_dask.ingest.arrays", "dppca_dask.ingest.adata", "dppca_dask.storage.writer"):
        try:  # their loggers exist once imported (ingest imports them lazily)
            importlib.import_module(module)
        except ImportError:  # an optional reader whose extra is not installed
            pass
    prefixes = ("dppca_dask.ingest", "dppca_dask.storage")
    names = [n for n in list(logging.root.manager.loggerDict) if n.startswith(prefixes)]
    loggers = [logging.getLogger(n) for n in {*names, *prefixes}]
    demote = _DemoteCounts()
    for logger in loggers:
        logger.addFilter(demote)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(demote)


# ------------------------------------------------------------------------------------------------ running


def _load_result(spec: JobSpec, output: str) -> Any:
    from dppca_dask.methods._registry import resolve

    return resolve(spec.entry.load_result)(output)


def _checkpoint(output: str, job_id: str, fingerprint: str, load_state: Any) -> Any:
    """The released state of an interrupted attempt of ``job_id`` (adaptive power), or None."""
    path = os.path.join(output, CHECKPOINT)
    if not os.path.exists(path):
        return None
    saved = _read_json(path)
    if saved.get("job_id") != job_id:
        log.info("ignoring the checkpoint of another job (%s) in %s", saved.get("job_id"), output)
        return None
    if saved.get("store_fingerprint") != fingerprint:
        raise LedgerError(
            f"job '{job_id}' was interrupted after releasing {saved.get('releases')} iterations of a store that has "
            f"changed since (fingerprint {saved.get('store_fingerprint')}, now {fingerprint}); it cannot resume on "
            "other data. Restore the store, or give the run a new job id (new budget)"
        )
    return load_state(saved["state"])


def run_job(
    spec: JobSpec,
    *,
    date: str | None = None,
    client: Any = None,
    noise: Any = None,
    progress: bool | None = None,
    allow_new_store: bool = False,
) -> JobOutcome:
    """Run ``spec`` once for ``date`` (default: today, UTC): see the module docstring for the steps.

    Parameters
    ----------
    client
        A ``distributed.Client`` to use instead of the spec's ``[cluster]`` (tests, notebooks).
    noise
        The noise source (default: a new one from the operating system's entropy). Tests pass a seeded one;
        the result is then not private, and says so, but the ledger still charges it.
    allow_new_store
        Accept a store other than the one the dataset key was first used with (and record it); also
        ``[budget] allow_new_store = true`` in the spec.

    Raises
    ------
    LedgerError
        The ledger does not exist (``dppca-dask budget init`` creates it), or the dataset key has no budget.
    BudgetExceededError
        The dataset's budget cannot cover the job (nothing was read or reserved).
    """
    from dppca_dask._urls import is_url
    from dppca_dask.jobs.outputs import publish_release

    date = _check_date(date or today())
    spec = spec.on_date(date)  # dated sources ({date}) name this run's files
    kwargs = {"client": client, "noise": noise, "progress": progress, "allow_new_store": allow_new_store}
    if is_url(spec.output):  # outputs in object storage: the run works on a local mirror (bucket_output.py)
        from dppca_dask.jobs.bucket_output import run_into_bucket

        return run_into_bucket(_run_here, spec, date, **kwargs)  # publishes into the bucket
    return publish_release(spec, date, _run_here(spec, date=date, **kwargs))  # table and latest (outputs.py)


def _run_here(spec: JobSpec, *, date: str, client: Any, noise: Any, progress: bool | None,
              allow_new_store: bool) -> JobOutcome:
    """The run of ``spec`` on ``date`` into its output directory on this machine, its release not yet recorded in
    the table of releases (:func:`run_job` records it, beside the output or in the bucket)."""
    from dppca_dask.ledger import Ledger

    allow_new_store = allow_new_store or spec.budget.allow_new_store
    if spec.entry.run_job is not None:  # an entry with a budget of its own (the window's partitions): its runner
        from dppca_dask.methods._registry import resolve

        run_entry_job = resolve(spec.entry.run_job)
        return cast(JobOutcome, run_entry_job(spec, date=date, client=client, noise=noise,
                                              allow_new_store=allow_new_store))
    ledger = Ledger(spec.budget.ledger)
    with job_lock(ledger, spec.budget.dataset, spec.job_id(date)):
        return _run_job(spec, ledger, date=date, client=client, noise=noise, progress=progress,
                        allow_new_store=allow_new_store)


def _run_job(spec: JobSpec, ledger: Any, *, date: str, client: Any, noise: Any, progress: bool | None,
             allow_new_store: bool) -> JobOutcome:
    from dppca_dask.ledger import CHARGED, RESERVED, partition_identities
    from dppca_dask.mechanisms import NoiseSource

    job_id = spec.job_id(date)
    output = spec.output_dir(date)
    dataset = spec.budget.dataset
    t0 = time.perf_counter()

    # -- an earlier attempt of this job id ------------------------------------------------------------------
    previous = ledger.entry(dataset, job_id)
    done = _earlier_attempt(spec, ledger, previous, job_id=job_id, output=output)
    if done is not None:
        return done
    resuming = previous is not None and previous.status in (RESERVED, CHARGED)

    # -- 1. data, public parameters and paths (nothing reserved yet) -------------------------------------
    store, neighbouring, events, security, resume = _prepare(
        spec, ledger, previous, job_id=job_id, output=output, resuming=resuming, client=client, noise=noise,
        allow_new_store=allow_new_store)

    # -- 2. reserve -------------------------------------------------------------------------------------------
    entry = ledger.reserve(
        dataset, job_id, epsilon=spec.epsilon, delta=spec.delta, events=events, mechanism=spec.mechanism,
        neighbouring=neighbouring, job_name=spec.name, total_epsilon=spec.budget.total_epsilon,
        total_delta=spec.budget.total_delta, resume_charged=resume is not None,
        partitions=partition_identities(store), store_id=_job_store_id(spec, store),  # every partition it reads
    )
    log.info("job %s: %s (epsilon=%g, delta=%g) %s for dataset %s", job_id, spec.mechanism, spec.epsilon,
             spec.delta, "resumed its reservation" if resuming else "reserved", dataset)
    steps._kill_point("reserved")
    # -- 3. run -----------------------------------------------------------------------------------------------
    if noise is None:
        noise = NoiseSource.from_entropy()
    fingerprint = store.fingerprint

    noted = [entry.first_release is not None]

    def note() -> None:
        if not noted[0]:  # from now on this job id can only continue from what it released
            ledger.note_first_release(dataset, job_id)
            noted[0] = True

    def checkpoint(state: Any, emitted: tuple[Any, ...]) -> None:
        # Released values only (noisy iterates, released thresholds): safe to write (invariant 3).
        if hasattr(state, "to_json"):
            note()
            _write_json(os.path.join(output, CHECKPOINT), {
                "job_id": job_id, "store_fingerprint": fingerprint, "mechanism": spec.mechanism,
                "releases": _released_iterations(state, emitted, spec), "state": state.to_json(),
            })
            steps._kill_point("checkpoint")

    pending = os.path.join(output, PENDING)
    connected = [False]  # set once the cluster is reached: before that, nothing of the data was read
    try:
        _makedirs(output)
        _write_json(os.path.join(output, JOB_FILE), {
            "job_id": job_id, "date": date, "spec": spec.to_dict(), "ledger": redact(spec.budget.ledger), "dataset": dataset,
            "store_fingerprint": store.fingerprint,
        })
        if os.path.isdir(pending):  # what a failed attempt left half-written; never moved into place
            shutil.rmtree(pending)
        result = _run_mechanism(spec, store, client=client, security=security, noise=noise,
                                on_release=checkpoint, resume=resume, progress=progress, connected=connected)
        steps._kill_point("computed")
        note()  # before the result reaches the disk: a crash while writing it must not lead to a second release
        steps._kill_point("noted")
        result.save(pending)
        _owner_only(pending)
        steps._kill_point("pending-written")
        _write_json(os.path.join(pending, COMPLETE), {"job_id": job_id})
        steps._kill_point("pending-complete")
    except BaseException as exc:
        refundable = ((not connected[0] or isinstance(exc, _REFUNDABLE)) and not noise.data_dependent_keys
                      and not noted[0] and resume is None and (previous is None or previous.status != CHARGED))
        if refundable:
            ledger.release(dataset, job_id)
            log.error("job %s failed before reading any data value (%s): its reservation is returned", job_id,
                      type(exc).__name__)
        else:
            ledger.charge(dataset, job_id, outcome="failed")
            log.error("job %s failed after reading its data or drawing noise: its budget stays spent", job_id)
        raise

    # -- 4. charge, then put the result in place ---------------------------------------------------------------
    entry = ledger.charge(dataset, job_id, outcome="succeeded")
    steps._kill_point("charged")
    _finalise(output)
    log.info("job %s completed in %.1f s; charged to %s", job_id, time.perf_counter() - t0, dataset)
    status = "resumed-and-completed" if resume is not None else "completed"
    resumed_from = None if resume is None else resume.released_iterations(_n_iter(spec))
    return JobOutcome(job_id, status, output, entry, result, resumed_from)


def _earlier_attempt(spec: JobSpec, ledger: Any, previous: Any, *, job_id: str, output: str) -> JobOutcome | None:
    """The outcome of an earlier attempt of this job id that needs no new run (completed, or complete in
    ``.pending`` and charged now); None when the job runs. Refuses what would be a second release."""
    from dppca_dask.ledger import CHARGED, RESERVED

    dataset = spec.budget.dataset
    if previous is not None and previous.status == CHARGED and previous.outcome == "succeeded":
        _finalise(output)  # a crash between the charge and the move of the result
        if not os.path.exists(os.path.join(output, "result.json")):
            raise LedgerError(
                f"job '{job_id}' is charged to '{dataset}' as succeeded but its result is missing from "
                f"'{output}'; it is not released again: restore the output, or give the run a new job id"
            )
        if (previous.mechanism != spec.mechanism or not math.isclose(previous.epsilon, spec.epsilon, rel_tol=1e-12)
                or not math.isclose(previous.delta, spec.delta, rel_tol=1e-12)):
            # (as the ledger refuses a reservation under this id: the saved result is not what this spec asks for)
            raise LedgerError(
                f"job id '{job_id}' already has an entry for dataset '{dataset}' with other parameters "
                f"({previous.mechanism}, epsilon={previous.epsilon:g}, delta={previous.delta:g}); a job id stands "
                "for one release, and its result is not this spec's: give the run a new job id (--job-id or --date)"
            )
        log.info("job %s already completed; nothing to do", job_id)
        return JobOutcome(job_id, "already-completed", output, previous, _load_result(spec, output))
    if _published(output, job_id):
        raise LedgerError(
            f"the output '{output}' already holds a result of job '{job_id}', which ledger '{redact(spec.budget.ledger)}' "
            f"does not record as charged to '{dataset}' (a replaced or restored ledger?); it is not released again: "
            "restore the ledger, or give the run a new job id (--job-id or --date)"
        )
    if previous is not None and previous.status == RESERVED and _pending_complete(output, job_id):
        # A crash after the result was complete in .pending but before the charge: finish it, do not recompute.
        entry = ledger.charge(dataset, job_id, outcome="succeeded")
        steps._kill_point("charged")
        _finalise(output)
        log.info("job %s: finished the complete result of an interrupted attempt; charged to %s", job_id, dataset)
        return JobOutcome(job_id, "completed-from-pending", output, entry, _load_result(spec, output))
    return None


def _prepare(spec: JobSpec, ledger: Any, previous: Any, *, job_id: str, output: str, resuming: bool, client: Any,
             noise: Any, allow_new_store: bool) -> tuple[Any, str, tuple[Any, ...], Any, Any]:
    """Everything checked before the reservation: the output path, the store (refreshed by its ingest), its schema
    and every partition's content, the plan, the cluster's security and scheduler, the executor, the noise sampler
    and what an interrupted attempt left to resume from. Returns (store, neighbouring, events, security, resume)."""
    from dppca_dask.coordinator.client import check_scheduler
    from dppca_dask.ledger import CHARGED, RESERVED
    from dppca_dask.mechanisms import default_sampler

    dataset = spec.budget.dataset
    _check_output(output)
    if spec.data.ingest is not None and not resuming:
        _refresh_store(spec)
    store = spec.data.open()
    _check_schema(spec, store)
    neighbouring, events = _plan(spec, store)
    security = _security(spec)
    resume = None
    if resuming:
        load_state = _state_loader(spec)
        if load_state is not None:
            resume = _checkpoint(output, job_id, store.fingerprint, load_state)
        if resume is None and (previous.status == CHARGED or previous.first_release is not None):
            if previous.status == RESERVED:  # released something (a checkpoint, a result being written): spent
                ledger.charge(dataset, job_id, outcome="failed")
            raise BudgetExceededError(
                f"job '{job_id}' released values or failed after reading its data, and its budget stays spent "
                f"(ledger '{redact(spec.budget.ledger)}', dataset '{dataset}'); no checkpoint or complete result of it was "
                f"found in '{output}' to resume from, so running it again would be a second release: restore the "
                "checkpoint, or give the run a new job id (--job-id or --date) to spend new budget"
            )
    ledger.check_store(dataset, _job_store_id(spec, store), allow_new_store=allow_new_store)
    if client is None and spec.cluster.address:  # a scheduler that cannot be used fails before reserving
        check_scheduler(spec.cluster.address, security=security)
    job_executor(spec, store, client)  # so does an executor that cannot be used (local with a client given)
    if noise is None:
        default_sampler()  # a bad noise-sampler setting fails before reserving

    # Every partition read and checked before the reservation: bad input reserves nothing (invariant 7).
    from dppca_dask.coordinator.preflight import preflight

    preflight(store, client if hasattr(client, "submit") else None)
    _check_content(spec, store)
    return store, neighbouring, events, security, resume


def _state_loader(spec: JobSpec) -> Any:
    """How the job's run reads its checkpoint back, or None for a run that does not resume: the entry's choice
    (:attr:`~dppca_dask.methods.Entry.load_state`), else the mechanism's own reader."""
    from dppca_dask.methods._registry import get_mechanism

    entry = spec.entry
    if entry.load_state is not None:
        return entry.load_state(spec.mechanism, spec.parameters)
    return get_mechanism(spec.mechanism, entry.name).load_state


def _released_iterations(state: Any, emitted: tuple[Any, ...], spec: JobSpec) -> int:
    """Iterations a checkpoint holds (what a resumed run reports as ``resumed_from``); for states that do not count
    iterations, the emitted events in pairs."""
    if hasattr(state, "released_iterations"):
        return int(state.released_iterations(_n_iter(spec)))
    return len(emitted) // 2


def _n_iter(spec: JobSpec) -> int:
    return int(spec.parameters.get("n_iter") or cast(int, spec.entry.default_n_iter))


def job_executor(spec: JobSpec, store: Any, client: Any = None) -> Any:
    """Where the job's release runs (:func:`~dppca_dask.coordinator.client.choose_executor`, the choice every
    release makes): ``[cluster] executor`` with the store's declared width and partition count (public values),
    the scheduler of ``[cluster] address``, or ``client``."""
    from dppca_dask.coordinator.client import choose_executor

    target = spec.cluster.address if client is None and spec.cluster.address else client
    return choose_executor(target, spec.cluster.executor, n_cols=int(store.n_cols),
                           n_partitions=int(store.n_partitions))


def _run_mechanism(spec: JobSpec, store: Any, *, client: Any, security: Any, noise: Any, on_release: Any,
                   resume: Any, progress: bool | None, connected: list[bool]) -> Any:
    from dppca_dask.coordinator import connect

    choice = job_executor(spec, store, client)
    if choice.executor == "in-process":
        log.info("job runs in this process (%s)", choice.reason)
        connected[0] = True  # nothing to reach: from here on, the data may be read
        return _call_mechanism(spec, store, client=None, executor="local", noise=noise, on_release=on_release,
                               resume=resume, progress=progress)
    target = spec.cluster.address if client is None and spec.cluster.address else client
    with connect(target, n_workers=spec.cluster.n_workers, memory_limit=spec.cluster.memory_limit,
                 security=security) as dask_client:
        connected[0] = True
        return _call_mechanism(spec, store, client=dask_client, executor="auto", noise=noise,
                               on_release=on_release, resume=resume, progress=progress)


def _call_mechanism(spec: JobSpec, store: Any, *, client: Any, executor: str, noise: Any, on_release: Any,
                    resume: Any, progress: bool | None) -> Any:
    from dppca_dask.methods._registry import resolve

    params = dict(spec.parameters)
    entry = spec.entry
    offered = {"mechanism": spec.mechanism, "on_release": on_release, "resume": resume, "progress": progress}
    run = resolve(entry.function)  # the entry point, by its public name
    return run(store, epsilon=spec.epsilon, delta=spec.delta, client=client, executor=executor, noise=noise,
               **{k: v for k, v in offered.items() if k in entry.run_arguments}, **params)
