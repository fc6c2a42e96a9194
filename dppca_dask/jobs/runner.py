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
from dataclasses import dataclass
from typing import Any

from dppca_dask.errors import (
    BudgetExceededError,
    JobSpecError,
    LedgerError,
    StoreCorruptError,
    StoreNotFoundError,
    UnsupportedStoreVersionError,
)
from dppca_dask.jobs.spec import JobSpec

from dppca_dask.ledger._postgres import redact  # a ledger URL's password is never printed

__all__ = ["JobOutcome", "ingest_arguments", "job_executor", "job_lock", "run_job", "store_id", "store_schema"]

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.json"
JOB_FILE = "job.json"
PENDING = ".pending"
#: Written into ``.pending/`` after the whole result: a re-run finishes only a result that has it.
COMPLETE = "COMPLETE"
FILE_MODE = 0o600

#: Failures that read no data value: the store or the cluster could not be reached, a chunk is missing or cannot
#: be decoded, or the process was interrupted. With no noise drawn and nothing released, the reservation returns.
_REFUNDABLE: tuple[type[BaseException], ...] = (
    StoreNotFoundError, StoreCorruptError, UnsupportedStoreVersionError, OSError, KeyboardInterrupt,
)


def _kill_point(name: str) -> None:
    """A named point between two steps of a job where a crash leaves a distinct state (fault-injection tests
    replace this function to kill the process there)."""


@dataclass(frozen=True)
class JobOutcome:
    """What a job run did: its id, the ledger entry, where the result is and what happened."""

    job_id: str
    status: str
    """``completed``, ``already-completed``, ``resumed-and-completed`` or ``completed-from-pending``."""
    output: str
    ledger_entry: Any
    result: Any
    resumed_from: int | None = None
    """Releases recovered from the checkpoint of an interrupted attempt (adaptive power), if any."""
    partitions: tuple[Any, ...] = ()
    """A ``sliding-window`` job's charges: every partition key it is charged to, in partition order
    (:class:`~dppca_dask.methods.window.job.ChargedPartition`; ``ledger_entry`` is the last one's entry). Empty
    for a job charged to its dataset key."""

    def to_dict(self) -> dict[str, Any]:
        partition_keys = None
        if self.partitions:
            from dppca_dask.methods.window.job import summarise_partitions

            partition_keys = summarise_partitions(self.partitions)
        return {
            "job_id": self.job_id, "status": self.status, "output": self.output,
            "ledger": self.ledger_entry.to_dict(), "partition_keys": partition_keys,
            "resumed_from": self.resumed_from,
            "privacy": self.result.privacy.to_dict() if self.result is not None else None,
            "mechanism": self.result.mechanism if self.result is not None else None,
        }


def today() -> str:
    """The default run date: today in UTC, ``YYYY-MM-DD``."""
    return _dt.datetime.now(_dt.timezone.utc).date().isoformat()


def _check_date(date: str) -> str:
    try:
        return _dt.date.fromisoformat(date).isoformat()
    except (TypeError, ValueError) as exc:
        raise JobSpecError(f"date must be YYYY-MM-DD; got {date!r}") from exc


def _write_json(path: str, obj: Any) -> None:
    """Write ``obj`` to ``path`` atomically: owner-only (0600), or following the umask with
    ``DPPCA_DASK_FILE_MODE=umask``."""
    from dppca_dask.storage._files import private_files

    private = private_files()
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE if private else 0o666)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        if private:
            os.fchmod(handle.fileno(), FILE_MODE)
        json.dump(obj, handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _owner_only(path: str) -> None:
    """chmod a tree written by a library call that follows the umask: files 0600, directories 0700 (left as the
    umask made them with ``DPPCA_DASK_FILE_MODE=umask``)."""
    from dppca_dask.storage._files import make_tree_private

    make_tree_private(path)


def _makedirs(path: str) -> None:
    """Make ``path`` and its missing parents owner-only (existing directories keep their mode; with
    ``DPPCA_DASK_FILE_MODE=umask`` they follow the umask)."""
    from dppca_dask.storage._files import make_directories

    make_directories(path)


# ------------------------------------------------------------------------------------------------ checks


def store_schema(store: Any) -> str:
    """``"declared"`` or ``"inferred"``: whether the store's shape was declared at ingest or read off the data."""
    return "declared" if store.schema == "declared" else "inferred"


def store_id(store: Any) -> str:
    """A stable public id of the store: its recorded ``store_id``; for a store without one (AnnData opened
    directly), one derived from its format metadata (the encoding of its matrix) and its resolved path."""
    if getattr(store, "store_id", None):
        return str(store.store_id)
    try:
        attrs = dict(store.open_group()[store.matrix_key].attrs)
    except Exception:
        attrs = {}
    keys = {k: attrs.get(k) for k in ("encoding-type", "encoding-version")}
    digest = hashlib.sha256(json.dumps([_resolved(store.path), store.matrix_key, keys],
                                       sort_keys=True).encode()).hexdigest()[:32]
    return f"derived:{digest}"


def _resolved(path: str) -> str:
    """A local path with its links resolved; a URL (a store in object storage) as it is (``realpath`` would make
    it a path under the working directory, which changes with the directory a job is started from)."""
    from dppca_dask._urls import is_url

    return path if is_url(path) else os.path.realpath(path)


def _job_store_id(spec: JobSpec, store: Any) -> str:
    """The store id the ledger records for the job's dataset key: the store's own, except for a store the job
    refreshes from ``[data.ingest]`` (a new store, with a new id, at every run), which is identified by its
    resolved path and source (known before the ingest: ``store`` may then be ``None``)."""
    if spec.data.ingest is None:
        return store_id(store)
    key = json.dumps([_resolved(spec.data.store), _resolved(spec.data.ingest["source"])])
    return f"ingested:{hashlib.sha256(key.encode()).hexdigest()[:32]}"


def _check_schema(spec: JobSpec, store: Any) -> None:
    """Refuse a store whose width was inferred from the data: every release reveals it, and a release on it would
    say its guarantee does not cover it (DESIGN.md, invariant 9). A job with ``[data.ingest]`` declares the width
    to its ingest (:func:`ingest_arguments`); a store it does not ingest must have been ingested with a declared
    width. A declared width in the spec (``[data] n_features``) that the store does not have is refused too."""
    declared = spec.data.declared_width
    if store_schema(store) != "declared":
        raise JobSpecError(
            f"the store '{spec.data.store}' has a width inferred from the data, which a release would reveal and its "
            "guarantee does not cover; jobs need a declared schema: re-ingest it with `dppca-dask ingest SRC --out "
            "STORE --n-features D` (Parquet triplets: `--column-ids FILE`; D: the public number of features), or let "
            "the job ingest it: [data.ingest] source = SRC with n_features = D (or [data] n_features = D; Parquet: "
            "also column_ids)"
        )
    if declared is not None and int(store.n_cols) != int(declared):
        raise JobSpecError(
            f"{spec.source}: n_features = {declared} is declared but the store '{spec.data.store}' was declared with "
            f"{int(store.n_cols)} columns; re-ingest it with `dppca-dask ingest SRC --out STORE --n-features "
            f"{declared}`, or fix n_features"
        )


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


def _check_output(output: str) -> None:
    """The output directory can be created and written (checked before anything is reserved)."""
    if os.path.lexists(output) and not os.path.isdir(output):
        raise JobSpecError(f"[output] path '{output}' exists and is not a directory; give a directory path")
    head = os.path.abspath(output)
    while not os.path.exists(head):
        head = os.path.dirname(head)
    if not os.path.isdir(head):
        raise JobSpecError(f"[output] path '{output}': '{head}' is a file, not a directory; fix the path")
    if not os.access(head, os.W_OK | os.X_OK):
        raise JobSpecError(f"[output] path '{output}': '{head}' is not writable by this user; fix the permissions "
                           "or the path")
    if os.path.isdir(output):
        try:
            probe = os.path.join(output, f".write-test-{os.getpid()}")
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
            os.remove(probe)
        except OSError as exc:
            raise JobSpecError(f"[output] path '{output}' cannot be written: {exc.strerror or exc}; fix the "
                               "permissions or the path") from exc


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
    """Checks of the values a mechanism needs beyond the preflight's, before anything is reserved: the topic
    model's word counts must be whole numbers from 0 to 2^53 (one read of the data in this process;
    nothing is derived)."""
    if spec.kind == "topics":
        from dppca_dask.methods.tensor.topics import check_corpus

        check_corpus(store)


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


def _security(spec: JobSpec) -> Any:
    if not spec.cluster.tls:
        return None
    from distributed.security import Security

    for key in ("tls_ca_file", "tls_cert", "tls_key"):
        path = getattr(spec.cluster, key)
        if not os.path.exists(path):
            raise JobSpecError(f"{spec.source}: [cluster] {key} '{path}' does not exist")
    return Security(tls_ca_file=spec.cluster.tls_ca_file, tls_client_cert=spec.cluster.tls_cert,
                    tls_client_key=spec.cluster.tls_key, require_encryption=True)


def _finalise(output: str) -> None:
    """Move the result from ``.pending`` into the output directory (after the charge)."""
    pending = os.path.join(output, PENDING)
    if not os.path.isdir(pending):
        return
    marker = os.path.join(pending, COMPLETE)
    for name in sorted(os.listdir(pending)):
        if name == COMPLETE:
            continue
        target = os.path.join(output, name)
        if os.path.isdir(target):
            shutil.rmtree(target)
        elif os.path.exists(target):
            os.remove(target)
        os.replace(os.path.join(pending, name), target)
    if os.path.exists(marker):
        os.remove(marker)
    os.rmdir(pending)
    checkpoint = os.path.join(output, CHECKPOINT)
    if os.path.exists(checkpoint):
        os.remove(checkpoint)


def _load_result(spec: JobSpec, output: str) -> Any:
    if spec.kind == "topics":
        from dppca_dask.methods.tensor.topics import load_topics

        return load_topics(output)
    if spec.kind == "lowrank":
        from dppca_dask.lowrank import load_lowrank

        return load_lowrank(output)
    from dppca_dask.results import load_result

    return load_result(output)


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
    from dppca_dask.ledger import Ledger

    date = _check_date(date or today())
    from dppca_dask.jobs.outputs import publish_release

    spec = spec.on_date(date)  # dated sources ({date}) name this run's files
    from dppca_dask._urls import is_url

    if is_url(spec.output):  # outputs in object storage: the run works on a local mirror (bucket_output.py)
        from dppca_dask.jobs.bucket_output import run_into_bucket

        return run_into_bucket(run_job, spec, date, client=client, noise=noise, progress=progress,
                               allow_new_store=allow_new_store)
    if spec.kind == "window":  # partition-scoped budget: its own runner
        from dppca_dask.methods.window.job import run_window_job

        return publish_release(spec, date, run_window_job(spec, date=date, client=client, noise=noise,
                                                          allow_new_store=allow_new_store or spec.budget.allow_new_store))
    ledger = Ledger(spec.budget.ledger)
    with job_lock(ledger, spec.budget.dataset, spec.job_id(date)):
        outcome = _run_job(spec, ledger, date=date, client=client, noise=noise, progress=progress,
                           allow_new_store=allow_new_store or spec.budget.allow_new_store)
    return publish_release(spec, date, outcome)  # the table of releases and the latest pointer (outputs.py)


@contextlib.contextmanager
def job_lock(ledger: Any, dataset: str, job_id: str) -> Iterator[None]:
    """An exclusive lock per (ledger, dataset, job id) for the whole run: two overlapping runs of one job (a
    scheduler's retry while the first still runs) must not both release.

    The lock is keyed on the ledger's resolved file (a symlinked path finds the same lock) and on the ledger's own
    id (a PostgreSQL ledger's: a session lock of its database, :meth:`~dppca_dask.ledger.Ledger.job_lock`). It is a ``filelock`` lock in ``<resolved ledger>.locks/``; the operating system drops it when the process
    dies, so a crashed run never blocks its own resumption.
    """
    from filelock import FileLock, Timeout

    if getattr(ledger, "is_postgres", False):  # the database's session lock: schedulers on several machines
        with ledger.job_lock(f"{dataset}\0{job_id}") as taken:
            if not taken:
                raise LedgerError(f"job '{job_id}' of dataset '{dataset}' is already running in another process; "
                                  "wait for it to end (running it twice at once could release twice)")
            yield
        return
    resolved = os.path.realpath(ledger.path)
    directory = f"{resolved}.locks"
    try:
        _makedirs(directory)
    except OSError as exc:
        raise LedgerError(f"cannot make the job lock directory '{directory}' beside ledger '{ledger.path}': "
                          f"{exc.strerror or exc}; check that the ledger's directory is writable") from exc
    name = hashlib.sha256(f"{ledger.id}\0{dataset}\0{job_id}".encode()).hexdigest()[:32]
    lock = FileLock(os.path.join(directory, f"{name}.lock"), timeout=0, mode=FILE_MODE)
    try:
        lock.acquire()
    except Timeout as exc:
        raise LedgerError(
            f"job '{job_id}' of dataset '{dataset}' is already running in another process; wait for it to end "
            "(running it twice at once could release twice)"
        ) from exc
    except OSError as exc:
        raise LedgerError(f"cannot lock job '{job_id}' in '{directory}': {exc.strerror or exc}; check that the "
                          "directory is writable") from exc
    try:
        yield
    finally:
        lock.release()


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
    _kill_point("reserved")
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
            _kill_point("checkpoint")

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
        _kill_point("computed")
        note()  # before the result reaches the disk: a crash while writing it must not lead to a second release
        _kill_point("noted")
        result.save(pending)
        _owner_only(pending)
        _kill_point("pending-written")
        _write_json(os.path.join(pending, COMPLETE), {"job_id": job_id})
        _kill_point("pending-complete")
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
    _kill_point("charged")
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
        _kill_point("charged")
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
    """How the job's run reads its checkpoint back, or None for a run that does not resume: the mechanism's own
    reader, except that a centred adaptive power run (or one with ``row_norm_bound="auto"``) is a block run and
    checkpoints block states."""
    from dppca_dask.methods import get_mechanism

    params = spec.parameters
    name = spec.mechanism
    if name == "adaptive-power" and (params.get("center", "none") not in ("none", False, None)
                                     or params.get("row_norm_bound") == "auto"):
        name = "adaptive-power-block"
    return get_mechanism(name, spec.kind).load_state


def _released_iterations(state: Any, emitted: tuple[Any, ...], spec: JobSpec) -> int:
    """Iterations a checkpoint holds (what a resumed run reports as ``resumed_from``); for states that do not count
    iterations, the emitted events in pairs."""
    if hasattr(state, "released_iterations"):
        return int(state.released_iterations(_n_iter(spec)))
    return len(emitted) // 2


def _n_iter(spec: JobSpec) -> int:
    from dppca_dask.api import DEFAULT_N_ITER

    return int(spec.parameters.get("n_iter") or DEFAULT_N_ITER)


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
    params = dict(spec.parameters)
    if spec.kind == "topics":
        from dppca_dask.methods.tensor.topics import topics

        return topics(store, epsilon=spec.epsilon, delta=spec.delta, client=client, executor=executor, noise=noise,
                      **params)
    if spec.kind == "lowrank":
        from dppca_dask.lowrank import lowrank

        return lowrank(store, epsilon=spec.epsilon, delta=spec.delta, mechanism=spec.mechanism, client=client,
                       executor=executor, noise=noise, **params)
    from dppca_dask.api import pca

    return pca(store, epsilon=spec.epsilon, delta=spec.delta, mechanism=spec.mechanism, client=client,
               executor=executor, noise=noise, on_release=on_release, resume=resume, progress=progress, **params)
