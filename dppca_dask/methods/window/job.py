"""The ``sliding-window`` job: append the day's file, release the window, charge the partitions it read.

A job spec with ``[mechanism] name = "sliding-window"`` runs here instead of the dataset-scoped runner: its
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

A re-run of a completed date prints the saved release and spends nothing; a run whose charge is recorded but
whose result is missing is refused (running it again would be a second release). Either way the outcome names every
partition key the job id is charged to (:func:`charged_partitions`), with the timestamp of its partition (public:
the partition table), never anything read from the rows.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dppca_dask.errors import BudgetExceededError

__all__ = ["ChargedPartition", "charged_partitions", "earlier_charge", "plan_window_charges", "require_day", "run_window_job",
           "summarise_partitions", "window_charges"]


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
    """Every partition key of ``dataset`` that ``job_id`` is charged to in ``ledger``, in partition order, with the
    timestamp of its partition in ``store`` (the public partition table; nothing about the rows)."""
    from dppca_dask.ledger import CHARGED
    from dppca_dask.methods.window.budget import PARTITION_SCOPE

    prefix = f"{dataset}/{PARTITION_SCOPE}/"
    own = f"{prefix}{getattr(store, 'store_id', None)}:"
    stamps = {int(p.index): p.timestamp for p in getattr(store, "partitions", ())}
    out = []
    for entry in ledger.find(job_id):
        if entry.status != CHARGED or not entry.dataset.startswith(prefix):
            continue
        tail = entry.dataset[len(own):] if entry.dataset.startswith(own) else ""
        index = int(tail) if tail.isdigit() else None
        stamp = None if index is None else _stamp(stamps.get(index))
        out.append(ChargedPartition(dataset, entry.dataset, index, stamp, entry))
    return tuple(sorted(out, key=lambda c: (c.index is None, c.index or 0, c.key)))


def _partition_table(path: str) -> Any:
    """The store at ``path`` for its partition table, or ``None`` when it cannot be opened (a completed job's
    outcome then names its keys without their timestamps)."""
    from dppca_dask.errors import StoreCorruptError, StoreNotFoundError, UnsupportedStoreVersionError
    from dppca_dask.storage import open_matrix

    try:
        return open_matrix(path)
    except (StoreNotFoundError, StoreCorruptError, UnsupportedStoreVersionError, OSError):
        return None


def summarise_partitions(partitions: Sequence[ChargedPartition]) -> dict[str, Any]:
    """The ``partition_keys`` of a window job's JSON outcome: the dataset key, how many partition keys the job is
    charged to, the first and the last, and each one (key, partition, timestamp and its ledger entry's figures)."""
    return {"dataset": partitions[0].dataset if partitions else None, "count": len(partitions),
            "first": partitions[0].to_dict() if partitions else None,
            "last": partitions[-1].to_dict() if partitions else None,
            "keys": [p.to_dict() for p in partitions]}


def earlier_charge(ledger: Any, dataset: str, job_id: str, output: str) -> Any:
    """The charge of a completed earlier run of ``job_id`` (``None`` when there is none); a charge whose result is
    missing from ``output`` is refused (running it again would be a second release)."""
    from dppca_dask.ledger import CHARGED
    from dppca_dask.methods.window.budget import PARTITION_SCOPE

    prefix = f"{dataset}/{PARTITION_SCOPE}/"  # its partition keys only (another dataset key may start with "dataset/")
    charged = [e for e in ledger.find(job_id) if e.dataset.startswith(prefix) and e.status == CHARGED]
    if not charged:
        return None
    if os.path.exists(os.path.join(output, "release.json")):
        return charged[-1]
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
    (:func:`~dppca_dask.methods.window.release.plan_charges`, as :func:`~dppca_dask.methods.window.release.window`
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


def run_window_job(spec: Any, *, date: str, client: Any = None, noise: Any = None) -> Any:
    """Run a ``sliding-window`` job spec for ``date`` (``YYYY-MM-DD``); returns a :class:`JobOutcome`."""
    import contextlib

    from dppca_dask.coordinator import connect
    from dppca_dask.coordinator.client import check_scheduler
    from dppca_dask.jobs.runner import JobOutcome, _check_schema, _security, job_lock
    from dppca_dask.jobs.spec import dated
    from dppca_dask.ledger import Ledger
    from dppca_dask.methods.window.release import load_release, window
    from dppca_dask.methods.window.selection import parse_timestamp
    from dppca_dask.storage import open_matrix
    from dppca_dask.storage._files import make_directories, make_tree_private

    ledger = Ledger(spec.budget.ledger)
    dataset = spec.budget.dataset
    if spec.budget.total_epsilon is not None:
        ledger.ensure_dataset(dataset, total_epsilon=spec.budget.total_epsilon, total_delta=spec.budget.total_delta)
    ledger.budget(dataset)  # a missing key fails before anything is read
    job_id = spec.job_id(date)
    output = spec.output_dir(date)
    with job_lock(ledger, dataset, job_id):
        charged = earlier_charge(ledger, dataset, job_id, output)
        if charged is not None:
            partitions = charged_partitions(ledger, dataset, job_id, _partition_table(spec.data.store))
            return JobOutcome(job_id, "already-completed", output, partitions[-1].entry if partitions else charged,
                              load_release(output), partitions=partitions)
        _check_schema(spec, open_matrix(spec.data.store))  # an inferred width is refused before anything is read
        stamp = parse_timestamp(date, name="date")
        security = _security(spec)  # missing TLS files, or a scheduler that cannot be used, fail before the append
        address = spec.cluster.address if client is None and spec.cluster.address else None
        if isinstance(client, str) and client != "local":  # a scheduler given by the caller: the same security
            address, client = client, None
        if address:
            check_scheduler(address, security=security)
        if spec.data.append is not None:
            from dppca_dask.ingest.append import append_file

            store = open_matrix(spec.data.store)
            if not any(p.timestamp == stamp for p in store.partitions):
                options = {k: v for k, v in spec.data.append.items() if k != "source"}
                append_file(store, dated(spec.data.append["source"], date), timestamp=date, **options)
        require_day(open_matrix(spec.data.store), date)
        parameters = dict(spec.parameters)
        parameters.setdefault("end", date)
        import dask.config

        embedded = {f"dppca_dask.cluster.{key}": value for key, value in (
            ("n-workers", spec.cluster.n_workers), ("memory-limit", spec.cluster.memory_limit)) if value is not None}
        with contextlib.ExitStack() as stack:
            stack.enter_context(dask.config.set(embedded))  # the embedded cluster's shape, when the release starts one
            if address:  # the scheduler, reached with the spec's TLS settings
                client = stack.enter_context(connect(address, security=security))
            result = window(spec.data.store, epsilon=spec.epsilon, delta=spec.delta, ledger=ledger,
                            dataset=dataset, job_id=job_id, client=client, executor=spec.cluster.executor,
                            noise=noise, **parameters)
        # Owner-only whatever the umask, like every job's output: the output directory and its missing parents
        # 0700 (existing ones keep their mode), release.json 0600.
        make_directories(output)  # owner-only unless DPPCA_DASK_FILE_MODE=umask
        make_tree_private(result.save(output))
        partitions = charged_partitions(ledger, dataset, job_id, open_matrix(spec.data.store))
        return JobOutcome(job_id, "completed", output, partitions[-1].entry, result, partitions=partitions)
