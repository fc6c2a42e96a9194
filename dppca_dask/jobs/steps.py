"""The steps every job run shares, whatever runs its release: the files of its output directory (``job.json``,
the checkpoint, the result written to ``.pending/`` and marked ``COMPLETE``, then moved into place), the checks of
the output path, the store's schema and the cluster's TLS files, the lock per job id, the outcome, and the named
kill points between steps (:func:`_kill_point`, which fault-injection tests replace on this module).

The dataset-scoped runner (:mod:`dppca_dask.jobs.runner`) and an entry's own job runner (a registry entry's
``run_job``, e.g. the sliding-window job's) both use them; this module imports neither.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dppca_dask.errors import JobSpecError, LedgerError

if TYPE_CHECKING:
    from dppca_dask.jobs.spec import JobSpec

__all__ = ["COMPLETE", "JOB_FILE", "JobOutcome", "PENDING", "job_lock", "store_id", "store_schema",
           "summarise_partitions"]

CHECKPOINT = "checkpoint.json"
JOB_FILE = "job.json"
PENDING = ".pending"
#: Written into ``.pending/`` after the whole result: a re-run finishes only a result that has it.
COMPLETE = "COMPLETE"
FILE_MODE = 0o600


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

    def __repr__(self) -> str:
        """A few lines: the job id and status, where the result is, the ledger entry's charge and the result's own
        first line (the result's arrays, events and full report are attributes, never printed here)."""
        lines = [f"JobOutcome(job_id={self.job_id!r}, status={self.status!r})", f"  output: {self.output}"]
        entry = self.ledger_entry
        if entry is not None:
            lines.append(f"  ledger: dataset {entry.dataset!r}, ({entry.epsilon:.4g}, {entry.delta:.3g}) "
                         f"{entry.status}" + (f", {len(self.partitions)} partition keys" if self.partitions else ""))
        if self.resumed_from is not None:
            lines.append(f"  resumed from release {self.resumed_from}")
        if self.result is not None:
            lines.append("  result: " + repr(self.result).splitlines()[0])
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        partition_keys = None
        if self.partitions:
            partition_keys = summarise_partitions(self.partitions)
        return {
            "job_id": self.job_id, "status": self.status, "output": self.output,
            "ledger": self.ledger_entry.to_dict(), "partition_keys": partition_keys,
            "resumed_from": self.resumed_from,
            "privacy": self.result.privacy.to_dict() if self.result is not None else None,
            "mechanism": self.result.mechanism if self.result is not None else None,
        }


def summarise_partitions(partitions: Sequence[Any]) -> dict[str, Any]:
    """The ``partition_keys`` of a window job's JSON outcome: the dataset key, how many partition keys the job is
    charged to, the first and the last, and each one (key, partition, timestamp and its ledger entry's figures)."""
    return {"dataset": partitions[0].dataset if partitions else None, "count": len(partitions),
            "first": partitions[0].to_dict() if partitions else None,
            "last": partitions[-1].to_dict() if partitions else None,
            "keys": [p.to_dict() for p in partitions]}


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


def _check_schema(spec: JobSpec, store: Any) -> None:
    """Refuse a store whose width was inferred from the data: every release reveals it, and a release on it would
    say its guarantee does not cover it (DESIGN.md, invariant 9). A job with ``[data.ingest]`` declares the width
    to its ingest (:func:`~dppca_dask.jobs.runner.ingest_arguments`); a store it does not ingest must have been
    ingested with a declared width. A declared width in the spec (``[data] n_features``) that the store does not
    have is refused too."""
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
