"""The privacy-budget ledger: a SQLite database that stops repeated releases about a dataset from overspending.

A ledger is created once, explicitly (``dppca-dask budget init`` or :meth:`Ledger.create` and
:meth:`Ledger.init_dataset`); opening a path that holds no ledger is an error, never a new empty ledger (an empty
ledger would let a completed job release again). Each dataset key has a total (ε, δ), the neighbouring relation
its guarantee is stated for, and the id of the store it was first used with.

A job *reserves* its DpEvents for a dataset in one transaction before it reads any data; the reservation is
refused if the composition of everything already spent or reserved and the new request exceeds the total.
Composition is by the PLD accountant over the stored DpEvents (tighter than adding ε; the sum of ε is kept beside
it), on a grid no finer than :data:`MIN_INTERVAL` (pessimistic rounding: the composed ε can only be
over-reported), so that a reservation takes well under a second whatever the events. A reservation becomes a
*charge* when the job releases, or is *released* (returned) only when the job failed without reading any data
value and without releasing anything; once noise was drawn, the budget is never returned (DESIGN.md,
invariant 6).

Events are stated for the job's neighbouring relation; they count against the key's relation after conversion
(:func:`group_size_for`): where one neighbouring step of the key's relation is at most ``k`` steps of the job's,
the events count with group privacy of size ``k``; where no implication holds the reservation is refused.

Reservations are keyed by ``(dataset, job_id)``: running the same job id again (a scheduled job re-run after a
crash) finds its reservation instead of reserving twice. Concurrent jobs in several processes are serialised by
SQLite's write lock (``BEGIN IMMEDIATE``): the check and the insert happen in one transaction, so racing jobs
can never overspend. The database must live on a local file system (SQLite's locking is unreliable on NFS).
New ledgers are created owner-only whatever the umask and ``DPPCA_DASK_FILE_MODE``: the file 0600, every directory
created for it (missing parents included) 0700; directories that existed keep their mode.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
import re
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from dppca_dask.errors import BudgetExceededError, InvalidParameterError, LedgerError

log = logging.getLogger(__name__)

__all__ = [
    "CHARGED",
    "MIN_INTERVAL",
    "REFUSED",
    "RELEASED",
    "RESERVED",
    "DatasetBudget",
    "Ledger",
    "LedgerEntry",
    "compose_epsilon",
    "group_size_for",
]

RESERVED, CHARGED, RELEASED, REFUSED = "reserved", "charged", "released", "refused"
#: Statuses whose events count against the budget.
_COUNTED = (RESERVED, CHARGED)
SCHEMA_VERSION = 2
#: Relative slack when comparing a composed ε with the total (PLD results are upper bounds already).
_TOLERANCE = 1e-9
#: The finest PLD grid the ledger composes on. A pure ε below it is rounded *up* to it (pessimistic), so a tiny ε
#: costs at most this much extra, and the grid never grows to the millions of points that made one reservation
#: with ε = 1e-5 take minutes inside the write lock.
MIN_INTERVAL = 1e-4
#: What ``budget init`` is called as (named in errors about a missing ledger or dataset).
INIT_COMMAND = "dppca-dask budget init --ledger {path} --dataset KEY --total-epsilon E --total-delta D"

_TABLES = ("meta", "datasets", "entries")
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE datasets (
    dataset TEXT PRIMARY KEY,
    total_epsilon REAL NOT NULL,
    total_delta REAL NOT NULL,
    neighbouring TEXT,
    created TEXT NOT NULL,
    store_id TEXT
);
CREATE TABLE entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    dataset TEXT NOT NULL REFERENCES datasets(dataset),
    job_id TEXT NOT NULL,
    job_name TEXT NOT NULL,
    mechanism TEXT NOT NULL,
    epsilon REAL NOT NULL,
    delta REAL NOT NULL,
    neighbouring TEXT NOT NULL,
    events TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('reserved', 'charged', 'released', 'refused')),
    outcome TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 1,
    first_release TEXT,
    created TEXT NOT NULL,
    updated TEXT NOT NULL,
    group_size INTEGER NOT NULL DEFAULT 1,
    UNIQUE (dataset, job_id)
);
"""
#: Version 1 -> 2: the store id of each dataset key, and the group size an entry's events count with.
_MIGRATE_1 = (
    "ALTER TABLE datasets ADD COLUMN store_id TEXT",
    "ALTER TABLE entries ADD COLUMN group_size INTEGER NOT NULL DEFAULT 1",
)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------------------ relations

_ENTRY = re.compile(r"^one entry changes by at most (?P<b>[0-9.eE+-]+)$")
_ROW = re.compile(r"^one row changes by a vector of L2 norm at most (?P<s>[0-9.eE+-]+)$")


def _parse(relation: str) -> tuple[str, float]:
    from dppca_dask.accounting import ADD_REMOVE_ROW, REPLACE_ROW

    if relation == ADD_REMOVE_ROW:
        return "add/remove", 0.0
    if relation == REPLACE_ROW:
        return "replace", 0.0
    for kind, pattern in (("entry", _ENTRY), ("row", _ROW)):
        match = pattern.match(relation)
        if match:
            try:
                bound = float(next(iter(match.groupdict().values())))
            except ValueError:
                break
            if math.isfinite(bound) and bound > 0:
                return kind, bound
    return "other", 0.0


def _steps(large: float, small: float) -> int:
    """How many changes of at most ``small`` make a change of at most ``large`` (a whole number, rounded up)."""
    ratio = large / small
    k = math.ceil(ratio * (1 - 1e-12))
    return max(1, k)


def group_size_for(key_relation: str, job_relation: str) -> int | None:
    """The group size ``k`` with which events stated for ``job_relation`` count against ``key_relation``.

    One neighbouring step of the key's relation is at most ``k`` steps of the job's, so by group privacy the job's
    events with every sensitivity multiplied by ``k`` hold for the key's relation (``None``: no implication holds,
    and the reservation is refused). The rules:

    - the same relation: 1;
    - an entry change of at most b is a row change of L2 norm at most b, and a row change is a replacement of one
      row: key "entry ≤ b" under job "row ≤ s" gives ``ceil(b/s)``; under job "replace one row", 1;
    - key "entry ≤ b" under job "entry ≤ b'" gives ``ceil(b/b')``; key "row ≤ s" under job "row ≤ s'",
      ``ceil(s/s')``;
    - a replacement is a removal and an addition: key "replace one row", "row ≤ s" or "entry ≤ b" under job
      "add/remove one row" gives 2 (ε doubled, δ' = (1 + e^ε)·δ for an (ε, δ) event, Gaussian multipliers
      halved);
    - anything else (an addition is not a replacement; a row change is not an entry change; a replacement of an
      unclipped row is no bounded row change): no implication.
    """
    if key_relation == job_relation:
        return 1
    key, key_bound = _parse(key_relation)
    job, job_bound = _parse(job_relation)
    if job == "add/remove":
        return 2 if key in ("replace", "row", "entry") else None
    if job == "replace":
        return 1 if key in ("row", "entry") else None
    if job == "row":
        return _steps(key_bound, job_bound) if key in ("row", "entry") else None
    if job == "entry":
        return _steps(key_bound, job_bound) if key == "entry" else None
    return None


def _grouped(events: Sequence[Any], k: int) -> list[Any]:
    if k == 1:
        return list(events)
    from dppca_dask.accounting import group_events

    return group_events(list(events), group_size=k)


# ------------------------------------------------------------------------------------------------ composition


def compose_epsilon(events: Sequence[Any], delta: float) -> float:
    """ε at ``delta`` of ``events`` by the PLD accountant, on a grid no finer than :data:`MIN_INTERVAL`.

    Every PLD is built with pessimistic discretisation, so a coarser grid can only over-report ε (a pure ε below
    the grid counts as one grid step); the bound keeps any reservation well under a second.
    """
    from dppca_dask.accounting import epsilon_for, pld_interval_for

    if not events:
        return 0.0
    events = list(events)
    interval = max(MIN_INTERVAL, pld_interval_for(events))
    return float(epsilon_for(events, delta=delta, value_discretization_interval=min(1.0, interval)))


_compose = compose_epsilon  # the name earlier code used


@dataclass(frozen=True)
class LedgerEntry:
    """One job's reservation or charge against a dataset."""

    dataset: str
    job_id: str
    job_name: str
    mechanism: str
    epsilon: float
    delta: float
    neighbouring: str
    """The relation the job's events are stated for."""
    events: tuple[Any, ...]
    """The job's events, for its own relation."""
    status: str
    """``reserved``, ``charged``, ``released`` (returned unspent) or ``refused`` (over budget; never counted)."""
    outcome: str
    """``running``, ``succeeded``, ``failed`` (after reading data or drawing noise), ``failed-before-noise``
    (nothing read, nothing drawn) or ``resolved`` (a stale reservation returned by ``budget resolve``)."""
    attempts: int
    """Runs of the job id under this entry: the first, each re-run that resumed its reservation (or, after a
    failure that kept the charge, its checkpoint) and each budget check of a released or refused entry. A run
    refused before it reserved anything (the job id already charged, or reused with other parameters) is none."""
    created: str
    updated: str
    first_release: str | None = None
    """When the job first wrote a released (noisy) value outside its process (a checkpoint or its result)."""
    group_size: int = 1
    """The events count against the dataset's relation with group privacy of this size (1: as they are)."""

    @property
    def counted_events(self) -> list[Any]:
        """What counts against the dataset's budget: the events converted to the dataset's relation."""
        return _grouped(self.events, self.group_size)

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "job": self.job_name, "mechanism": self.mechanism, "epsilon": self.epsilon,
            "delta": self.delta, "neighbouring": self.neighbouring, "status": self.status, "outcome": self.outcome,
            "attempts": self.attempts, "created": self.created, "updated": self.updated,
            "first_release": self.first_release, "group_size": self.group_size,
        }


@dataclass(frozen=True)
class DatasetBudget:
    """A dataset's total, what is spent (charged or reserved), and what remains."""

    dataset: str
    total_epsilon: float
    total_delta: float
    neighbouring: str | None
    spent_epsilon: float
    """PLD composition of every charged or reserved entry's events (for the dataset's relation), at
    ``total_delta``."""
    sum_epsilon: float
    """Basic composition (sum of ε) of the same entries, for comparison."""
    sum_delta: float
    entries: tuple[LedgerEntry, ...]
    store_id: str | None = None

    @property
    def remaining_epsilon(self) -> float:
        """``total_epsilon − spent_epsilon`` (indicative: composition is not additive, so a request of this ε may
        or may not fit; the reservation decides)."""
        return max(0.0, self.total_epsilon - self.spent_epsilon)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset, "total_epsilon": self.total_epsilon, "total_delta": self.total_delta,
            "neighbouring": self.neighbouring, "store_id": self.store_id, "spent_epsilon": self.spent_epsilon,
            "sum_epsilon": self.sum_epsilon, "sum_delta": self.sum_delta,
            "remaining_epsilon": self.remaining_epsilon, "accountant": "pld",
            "history": [e.to_dict() for e in self.entries],
        }


def _check_total(epsilon: float, delta: float) -> tuple[float, float]:
    epsilon, delta = float(epsilon), float(delta)
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise InvalidParameterError(f"total_epsilon must be finite and > 0; got {epsilon}")
    if not (0.0 <= delta < 1.0):
        raise InvalidParameterError(f"total_delta must be in [0, 1); got {delta}")
    return epsilon, delta


def _writable_hint(path: str) -> str:
    return (f"check that the ledger '{path}' and its directory '{os.path.dirname(os.path.abspath(path))}' exist "
            "and are writable by this user")


class Ledger:
    """A privacy-budget ledger in the SQLite file ``path``, which must already hold a ledger.

    Parameters
    ----------
    path
        The database file, made by :meth:`create` (``dppca-dask budget init``). Keep it on a local file system
        and back it up: losing it forgets what was spent.
    timeout
        Seconds a writer waits for another process's transaction before failing.
    read_only
        Open without writing anything (``budget show``); a ledger of an older schema is read as it is.

    Raises
    ------
    LedgerError
        The file is missing, empty, not a SQLite database, a database without the ledger's schema, of another
        schema version, or cannot be opened.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 120.0, read_only: bool = False) -> None:
        self.path = os.fspath(path)
        self._timeout = float(timeout)
        self._read_only = bool(read_only)
        if not os.path.exists(self.path):
            raise LedgerError(
                f"ledger '{self.path}' does not exist; a ledger is never created by a run: create it (once) with "
                f"`{INIT_COMMAND.format(path=self.path)}`, or fix the path"
            )
        if os.path.isdir(self.path):
            raise LedgerError(f"ledger '{self.path}' is a directory; give the ledger's file")
        if os.path.getsize(self.path) == 0:
            raise LedgerError(
                f"ledger '{self.path}' is an empty file, not a ledger (a ledger is never created implicitly); "
                "restore it from a backup, or create a new one at another path with "
                f"`{INIT_COMMAND.format(path='PATH')}`"
            )
        with self._connection() as db:
            self._check_schema(db)
        self.id = self._meta("ledger_id") or ""

    # -- creation ------------------------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike[str], *, timeout: float = 120.0) -> Ledger:
        """Create a new, empty ledger at ``path`` (owner-only whatever the umask: the file 0600, and its directory and
        the missing parents, when created, 0700; directories that existed keep their mode).

        Raises :class:`LedgerError` if anything exists at ``path`` (an existing ledger is never reset).
        """
        path = os.fspath(path)
        if os.path.lexists(path):
            raise LedgerError(
                f"'{path}' already exists; a ledger is created once and never overwritten (it is the record of what "
                "was spent): use it as it is, or give another path"
            )
        from dppca_dask.storage._files import FILE_MODE, make_directories

        directory = os.path.dirname(os.path.abspath(path))
        try:
            make_directories(directory, private=True)  # each directory it creates is 0700, set after mkdir
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, FILE_MODE)
            try:
                os.fchmod(fd, FILE_MODE)  # the mode given to open passes through the umask
            finally:
                os.close(fd)
        except OSError as exc:
            raise LedgerError(f"cannot create ledger '{path}': {exc.strerror or exc}; {_writable_hint(path)}") from exc
        try:
            db = sqlite3.connect(path, timeout=timeout, isolation_level=None)
            try:
                db.execute("BEGIN IMMEDIATE")
                for statement in _SCHEMA.strip().split(";"):
                    if statement.strip():
                        db.execute(statement)
                db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                db.execute("INSERT INTO meta VALUES ('ledger_id', ?)", (uuid.uuid4().hex,))
                db.execute("INSERT INTO meta VALUES ('created', ?)", (_now(),))
                db.execute("COMMIT")
            finally:
                db.close()
        except sqlite3.Error as exc:
            os.remove(path)
            raise LedgerError(f"cannot create ledger '{path}': {exc}; {_writable_hint(path)}") from exc
        log.info("created a new privacy-budget ledger at %s", path)
        return cls(path, timeout=timeout)

    def _check_schema(self, db: sqlite3.Connection) -> None:
        tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not set(_TABLES) <= tables:
            raise LedgerError(
                f"'{self.path}' is a SQLite database but not a privacy-budget ledger (it has no "
                f"{', '.join(sorted(set(_TABLES) - tables))} table); nothing was written to it: give the ledger's "
                f"path, or create a ledger with `{INIT_COMMAND.format(path='NEW-PATH')}`"
            )
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = None if row is None else row[0]
        if version == "1" and not self._read_only:
            db.execute("BEGIN IMMEDIATE")
            try:
                row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                if row[0] == "1":
                    for statement in _MIGRATE_1:
                        db.execute(statement)
                    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
                    db.execute("INSERT OR IGNORE INTO meta VALUES ('ledger_id', ?)", (uuid.uuid4().hex,))
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
            return
        if version not in ("1", str(SCHEMA_VERSION)):
            raise LedgerError(
                f"ledger '{self.path}' has schema version {version}; this version of dppca_dask reads version "
                f"{SCHEMA_VERSION} (and upgrades version 1)"
            )

    def _meta(self, key: str) -> str | None:
        with self._connection() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            return None if row is None else str(row[0])

    def __repr__(self) -> str:
        return f"Ledger({self.path!r})"

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        try:
            if self._read_only:
                uri = f"file:{quote(os.path.abspath(self.path))}?mode=ro"
                db = sqlite3.connect(uri, timeout=self._timeout, isolation_level=None, uri=True)
            else:
                db = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open ledger '{self.path}': {exc}; {_writable_hint(self.path)}") from exc
        try:
            db.row_factory = sqlite3.Row
            if not self._read_only:
                db.execute("PRAGMA foreign_keys = ON")
                db.execute("PRAGMA synchronous = FULL")
            yield db
        except sqlite3.DatabaseError as exc:
            message = str(exc)
            if "not a database" in message:
                raise LedgerError(
                    f"'{self.path}' is not a ledger (not a SQLite database: {message}); give the ledger's path, or "
                    f"restore it from a backup"
                ) from exc
            if "readonly" in message or "unable to open" in message or "disk I/O" in message:
                raise LedgerError(f"ledger '{self.path}': {message}; {_writable_hint(self.path)}") from exc
            raise LedgerError(f"ledger '{self.path}': {message}") from exc
        finally:
            db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction holding SQLite's write lock from the start (no check-then-insert race)."""
        if self._read_only:
            raise LedgerError(f"ledger '{self.path}' was opened read-only; open it without read_only to change it")
        with self._connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    # -- datasets ---------------------------------------------------------------------------------------------

    def init_dataset(
        self, dataset: str, *, total_epsilon: float, total_delta: float, neighbouring: str | None = None
    ) -> bool:
        """Give ``dataset`` its total budget (and optionally its neighbouring relation); True if it was new.

        Running it again with the same values does nothing; other values are refused (a total is fixed once
        recorded).
        """
        total_epsilon, total_delta = _check_total(total_epsilon, total_delta)
        if not isinstance(dataset, str) or not dataset:
            raise InvalidParameterError(f"dataset key must be a non-empty string; got {dataset!r}")
        if neighbouring is not None and (not isinstance(neighbouring, str) or not neighbouring.strip()):
            raise InvalidParameterError(f"neighbouring must name a relation; got {neighbouring!r}")
        with self._transaction() as db:
            row = db.execute("SELECT 1 FROM datasets WHERE dataset = ?", (dataset,)).fetchone()
            if row is None:
                db.execute("INSERT INTO datasets (dataset, total_epsilon, total_delta, neighbouring, created) "
                           "VALUES (?, ?, ?, ?, ?)", (dataset, total_epsilon, total_delta, neighbouring, _now()))
                return True
            self._ensure(db, dataset, total_epsilon, total_delta, neighbouring)
            return False

    def ensure_dataset(
        self, dataset: str, *, total_epsilon: float, total_delta: float, neighbouring: str | None = None
    ) -> None:
        """Check that the recorded totals (and relation, if recorded) of an existing dataset are the ones given.

        Raises :class:`LedgerError` on a mismatch or when the dataset has no budget (``budget init`` gives it one).
        """
        total_epsilon, total_delta = _check_total(total_epsilon, total_delta)
        with self._transaction() as db:
            self._ensure(db, dataset, total_epsilon, total_delta, neighbouring)

    def _ensure(self, db: sqlite3.Connection, dataset: str, eps: float, delta: float, neighbouring: str | None) -> None:
        if not isinstance(dataset, str) or not dataset:
            raise InvalidParameterError(f"dataset key must be a non-empty string; got {dataset!r}")
        row = db.execute("SELECT total_epsilon, total_delta, neighbouring FROM datasets WHERE dataset = ?",
                         (dataset,)).fetchone()
        if row is None:
            raise self._no_budget(db, dataset)
        if not (math.isclose(row[0], eps, rel_tol=1e-12) and math.isclose(row[1], delta, rel_tol=1e-12)):
            raise LedgerError(
                f"ledger '{self.path}' records a total of (epsilon={row[0]:g}, delta={row[1]:g}) for dataset "
                f"'{dataset}'; this one is (epsilon={eps:g}, delta={delta:g}). A dataset's total is fixed when "
                "it is first recorded; give the recorded total"
            )
        if neighbouring is not None and row[2] is not None and row[2] != neighbouring:
            raise LedgerError(
                f"dataset '{dataset}' is budgeted for neighbours differing by {row[2]}; the relation given is "
                f"{neighbouring}; a dataset's relation is fixed when it is first recorded"
            )

    def _no_budget(self, db: sqlite3.Connection, dataset: str) -> LedgerError:
        known = ", ".join(r[0] for r in db.execute("SELECT dataset FROM datasets ORDER BY dataset")) or "none"
        return LedgerError(
            f"dataset '{dataset}' has no budget in ledger '{self.path}' (datasets: {known}); give it one with "
            f"`{INIT_COMMAND.format(path=self.path).replace('KEY', dataset)}`"
        )

    def datasets(self) -> list[str]:
        with self._connection() as db:
            return [r[0] for r in db.execute("SELECT dataset FROM datasets ORDER BY dataset")]

    def check_store(self, dataset: str, store_id: str, *, allow_new_store: bool = False) -> None:
        """Record ``store_id`` for ``dataset`` at its first use, and refuse another store under the key later.

        ``allow_new_store`` records the new id instead (the same people's data, re-ingested into a new store).
        """
        if not isinstance(store_id, str) or not store_id:
            raise InvalidParameterError(f"store_id must be a non-empty string; got {store_id!r}")
        with self._transaction() as db:
            row = db.execute("SELECT store_id FROM datasets WHERE dataset = ?", (dataset,)).fetchone()
            if row is None:
                raise self._no_budget(db, dataset)
            if row[0] is None or row[0] == store_id:
                if row[0] is None:
                    db.execute("UPDATE datasets SET store_id = ? WHERE dataset = ?", (store_id, dataset))
                return
            if not allow_new_store:
                raise LedgerError(
                    f"dataset '{dataset}' in ledger '{self.path}' was budgeted on store {row[0]}; this store is "
                    f"{store_id}. If it holds the same people's data (e.g. re-ingested), run with --allow-new-store "
                    "(job spec: [budget] allow_new_store = true); if not, give it its own dataset key and budget"
                )
            log.warning("dataset %s: store id changes from %s to %s (allowed)", dataset, row[0], store_id)
            db.execute("UPDATE datasets SET store_id = ? WHERE dataset = ?", (store_id, dataset))

    # -- reservations ------------------------------------------------------------------------------------------

    def reserve(
        self,
        dataset: str,
        job_id: str,
        *,
        epsilon: float,
        delta: float,
        events: Sequence[Any],
        mechanism: str,
        neighbouring: str,
        job_name: str | None = None,
        total_epsilon: float | None = None,
        total_delta: float | None = None,
        resume_charged: bool = False,
    ) -> LedgerEntry:
        """Reserve ``events`` (a job's (ε, δ), stated for ``neighbouring``) for ``dataset`` under ``job_id``.

        If ``job_id`` already has an entry, it is returned when it is reserved (a re-run resumes it, and counts as
        one more attempt) or charged, and reserved again (with the budget check, one more attempt) when it was
        released or refused. A charged entry is returned unchanged, not counted as an attempt: the caller decides
        what it means (a release under a job id already charged is refused, and a refused run is no attempt of the
        job that was charged); a caller that goes on under the charge (a job resuming from the checkpoint of an
        attempt whose failure kept it) passes ``resume_charged=True``, which counts the attempt. A refusal over
        budget is recorded (status ``refused``, never counted) so that the history shows it. An entry with other
        parameters is an error, and changes nothing: a job id stands for one release.

        The dataset must have a budget (:meth:`init_dataset`); ``total_epsilon``/``total_delta``, when given, must
        be the recorded ones. A dataset without a recorded relation takes ``neighbouring``; otherwise the events
        count with the group size :func:`group_size_for` gives, and are refused when there is none.

        Raises
        ------
        BudgetExceededError
            If the composition would exceed the dataset's total (message: requested, spent, remaining, total).
        LedgerError
            No budget for the dataset, other totals, a relation with no implication, a job id reused.
        """
        from dppca_dask.accounting import event_to_json

        if not isinstance(job_id, str) or not job_id:
            raise InvalidParameterError(f"job_id must be a non-empty string; got {job_id!r}")
        if not isinstance(neighbouring, str) or not neighbouring.strip():
            raise InvalidParameterError(f"neighbouring must name the events' relation; got {neighbouring!r}")
        epsilon, delta = float(epsilon), float(delta)
        events = list(events)
        if not events:
            raise InvalidParameterError("a reservation needs the job's DpEvents; got none")
        encoded = json.dumps([event_to_json(e) for e in events], sort_keys=True)
        if (total_epsilon is None) != (total_delta is None):
            raise InvalidParameterError("give both total_epsilon and total_delta, or neither")
        refusal: BudgetExceededError | None = None
        with self._transaction() as db:
            if total_epsilon is not None and total_delta is not None:
                te, td = _check_total(total_epsilon, total_delta)
                self._ensure(db, dataset, te, td, None)
            budget = db.execute("SELECT total_epsilon, total_delta, neighbouring FROM datasets WHERE dataset = ?",
                                (dataset,)).fetchone()
            if budget is None:
                raise self._no_budget(db, dataset)
            key_relation = budget[2]
            if key_relation is None:
                db.execute("UPDATE datasets SET neighbouring = ? WHERE dataset = ?", (neighbouring, dataset))
                key_relation = neighbouring
            k = group_size_for(key_relation, neighbouring)
            if k is None:
                raise LedgerError(
                    f"dataset '{dataset}' is budgeted for neighbours differing by {key_relation}; this job's guarantee "
                    f"is for {neighbouring}, which implies nothing about the key's relation (see the relation rules "
                    "of jobs/README.md); run the job with parameters whose relation covers the key's, or use a "
                    "separate dataset key"
                )
            existing = db.execute("SELECT * FROM entries WHERE dataset = ? AND job_id = ?",
                                  (dataset, job_id)).fetchone()
            if existing is not None:
                entry = self._entry(existing)
                if (entry.mechanism != mechanism or not math.isclose(entry.epsilon, epsilon, rel_tol=1e-12)
                        or not math.isclose(entry.delta, delta, rel_tol=1e-12)
                        or existing["events"] != encoded or entry.neighbouring != neighbouring):
                    raise LedgerError(
                        f"job id '{job_id}' already has an entry for dataset '{dataset}' with other parameters "
                        f"({entry.mechanism}, epsilon={entry.epsilon:g}, delta={entry.delta:g}); a job id stands for "
                        "one release: give the run a new job id"
                    )
                if entry.status == CHARGED and not resume_charged:
                    return entry  # unchanged: not an attempt unless the caller goes on under the charge
                if entry.status in _COUNTED:
                    db.execute("UPDATE entries SET attempts = attempts + 1, updated = ? WHERE id = ?",
                               (_now(), existing["id"]))
                    return self._get(db, dataset, job_id)
            counted = _grouped(events, k)
            spent = self._spent_events(db, dataset, exclude_job=job_id)
            total_eps, total_delta_ = float(budget[0]), float(budget[1])
            counted_delta = sum(float(getattr(e, "delta", 0.0) or 0.0) for e in counted) if k > 1 else delta
            if counted_delta >= total_delta_ and counted_delta > 0:
                raise BudgetExceededError(
                    f"requested delta={counted_delta:g} (for the key's relation) is not below the total "
                    f"delta={total_delta_:g} of dataset '{dataset}' in ledger '{self.path}'"
                )
            before = compose_epsilon(spent, total_delta_)
            after = compose_epsilon(spent + counted, total_delta_)
            now = _now()
            if after > total_eps * (1 + _TOLERANCE):
                converted = "" if k == 1 else f" (counted with group privacy of size {k} for {key_relation})"
                refusal = BudgetExceededError(
                    f"budget exceeded for dataset '{dataset}' in ledger '{self.path}': requested (epsilon={epsilon:g}, "
                    f"delta={delta:g}){converted}; spent epsilon={before:.4g} of total epsilon={total_eps:g} (PLD at "
                    f"delta={total_delta_:g}), remaining {max(0.0, total_eps - before):.4g}; with this job the "
                    f"composition would be epsilon={after:.4g}"
                )
            status, outcome = (REFUSED, "over budget") if refusal is not None else (RESERVED, "running")
            if existing is not None:  # released or refused before: reserve again (or record the new refusal)
                db.execute("UPDATE entries SET status = ?, outcome = ?, attempts = attempts + 1, updated = ?, "
                           "group_size = ? WHERE id = ?", (status, outcome, now, k, existing["id"]))
            else:
                db.execute(
                    "INSERT INTO entries (dataset, job_id, job_name, mechanism, epsilon, delta, neighbouring, events,"
                    " status, outcome, attempts, created, updated, group_size) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?)",
                    (dataset, job_id, job_name or job_id, mechanism, epsilon, delta, neighbouring, encoded, status,
                     outcome, now, now, k),
                )
            reserved = self._get(db, dataset, job_id)
        if refusal is not None:  # recorded (committed) for the history; nothing is counted
            raise refusal
        return reserved

    def charge(self, dataset: str, job_id: str, *, outcome: str = "succeeded") -> LedgerEntry:
        """Turn the reservation into a charge (the job released, or failed after reading data or drawing noise)."""
        if outcome not in ("succeeded", "failed"):
            raise InvalidParameterError(f"outcome must be 'succeeded' or 'failed'; got {outcome!r}")
        with self._transaction() as db:
            entry = self._get(db, dataset, job_id)
            if entry.status not in _COUNTED:
                raise LedgerError(f"job '{job_id}' has no reservation for '{dataset}'; it cannot be charged")
            db.execute("UPDATE entries SET status = ?, outcome = ?, updated = ? WHERE dataset = ? AND job_id = ?",
                       (CHARGED, outcome, _now(), dataset, job_id))
            return self._get(db, dataset, job_id)

    def note_first_release(self, dataset: str, job_id: str) -> LedgerEntry:
        """Record that the job has written (or is about to write) a released value outside its process.

        From then on the job can only continue from what it released, or stay spent: a later attempt that cannot
        find those values must not start again with fresh noise, and the reservation is never returned.
        """
        with self._transaction() as db:
            entry = self._get(db, dataset, job_id)
            if entry.status not in _COUNTED:
                raise LedgerError(f"job '{job_id}' has no reservation for '{dataset}'; reserve before releasing")
            db.execute("UPDATE entries SET first_release = COALESCE(first_release, ?), updated = ? "
                       "WHERE dataset = ? AND job_id = ?", (_now(), _now(), dataset, job_id))
            return self._get(db, dataset, job_id)

    def release(self, dataset: str, job_id: str, *, outcome: str = "failed-before-noise") -> LedgerEntry:
        """Return a reservation: only for a job that read no data value and released nothing.

        A charged entry, or one with a recorded release, is never returned (invariant 6): this raises
        :class:`LedgerError` for it.
        """
        if outcome not in ("failed-before-noise", "resolved"):
            raise InvalidParameterError(f"outcome must be 'failed-before-noise' or 'resolved'; got {outcome!r}")
        with self._transaction() as db:
            entry = self._get(db, dataset, job_id)
            if entry.status == CHARGED or entry.first_release is not None:
                raise LedgerError(
                    f"job '{job_id}' is charged to '{dataset}' or has released values (first release recorded "
                    f"{entry.first_release or 'with the charge'}); a charge is never refunded once noise was drawn"
                )
            if entry.status != RESERVED:
                raise LedgerError(f"job '{job_id}' of dataset '{dataset}' holds no reservation (it is {entry.status})")
            db.execute("UPDATE entries SET status = ?, outcome = ?, updated = ? "
                       "WHERE dataset = ? AND job_id = ?", (RELEASED, outcome, _now(), dataset, job_id))
            return self._get(db, dataset, job_id)

    def entry(self, dataset: str, job_id: str) -> LedgerEntry | None:
        with self._connection() as db:
            row = db.execute("SELECT * FROM entries WHERE dataset = ? AND job_id = ?", (dataset, job_id)).fetchone()
            return None if row is None else self._entry(row)

    def entries(self, datasets: Sequence[str]) -> list[LedgerEntry]:
        """Every entry of the listed dataset keys (a key the ledger does not hold has none), oldest first; unlike
        :meth:`budget` it composes nothing."""
        if isinstance(datasets, (str, bytes)):  # a string is a sequence of strings: its characters are not keys
            raise InvalidParameterError(f"entries takes a list of dataset keys; got the string {datasets!r}: "
                                        "pass [key]")
        keys = list(dict.fromkeys(datasets))
        rows: list[sqlite3.Row] = []
        with self._connection() as db:
            for start in range(0, len(keys), 500):  # below SQLite's limit on bound parameters
                chunk = keys[start : start + 500]
                rows.extend(db.execute(f"SELECT * FROM entries WHERE dataset IN ({', '.join('?' * len(chunk))})",
                                       chunk))
        return [self._entry(r) for r in sorted(rows, key=lambda r: int(r["id"]))]

    def find(self, job_id: str) -> list[LedgerEntry]:
        """Every entry with this job id (one per dataset key)."""
        with self._connection() as db:
            return [self._entry(r) for r in db.execute("SELECT * FROM entries WHERE job_id = ? ORDER BY id",
                                                       (job_id,))]

    # -- reading -----------------------------------------------------------------------------------------------

    def budget(self, dataset: str) -> DatasetBudget:
        """The dataset's totals, spent budget (PLD and sum of ε) and history, oldest first."""
        with self._connection() as db:
            row = db.execute("SELECT * FROM datasets WHERE dataset = ?", (dataset,)).fetchone()
            if row is None:
                known = ", ".join(r[0] for r in db.execute("SELECT dataset FROM datasets ORDER BY dataset")) or "none"
                raise LedgerError(f"no dataset '{dataset}' in ledger '{self.path}' (datasets: {known})")
            entries = tuple(self._entry(r) for r in db.execute(
                "SELECT * FROM entries WHERE dataset = ? ORDER BY id", (dataset,)))
        counted = [e for e in entries if e.status in _COUNTED]
        spent = [event for e in counted for event in e.counted_events]
        return DatasetBudget(
            dataset=dataset,
            total_epsilon=float(row["total_epsilon"]),
            total_delta=float(row["total_delta"]),
            neighbouring=row["neighbouring"],
            spent_epsilon=compose_epsilon(spent, float(row["total_delta"])),
            sum_epsilon=float(sum(e.epsilon for e in counted)),
            sum_delta=float(sum(e.delta for e in counted)),
            entries=entries,
            store_id=row["store_id"] if "store_id" in row.keys() else None,
        )

    # -- helpers -----------------------------------------------------------------------------------------------

    def _spent_events(self, db: sqlite3.Connection, dataset: str, exclude_job: str | None = None) -> list[Any]:
        out: list[Any] = []
        for row in db.execute(
            "SELECT * FROM entries WHERE dataset = ? AND status IN (?, ?)", (dataset, *_COUNTED)
        ):
            if row["job_id"] != exclude_job:
                out.extend(self._entry(row).counted_events)
        return out

    def _get(self, db: sqlite3.Connection, dataset: str, job_id: str) -> LedgerEntry:
        row = db.execute("SELECT * FROM entries WHERE dataset = ? AND job_id = ?", (dataset, job_id)).fetchone()
        if row is None:
            raise LedgerError(f"no reservation for job '{job_id}' on dataset '{dataset}' in ledger '{self.path}'")
        return self._entry(row)

    def _entry(self, row: sqlite3.Row) -> LedgerEntry:
        from dppca_dask.accounting import event_from_json

        try:
            events = tuple(event_from_json(e) for e in json.loads(row["events"]))
        except Exception as exc:  # any decoding failure of a damaged row
            raise LedgerError(
                f"ledger '{self.path}' is damaged: the events of job '{row['job_id']}' (dataset '{row['dataset']}') "
                f"cannot be read ({type(exc).__name__}); restore the ledger from a backup"
            ) from exc
        keys = row.keys()
        return LedgerEntry(
            dataset=row["dataset"], job_id=row["job_id"], job_name=row["job_name"], mechanism=row["mechanism"],
            epsilon=float(row["epsilon"]), delta=float(row["delta"]), neighbouring=row["neighbouring"],
            events=events, status=row["status"], outcome=row["outcome"], attempts=int(row["attempts"]),
            created=row["created"], updated=row["updated"], first_release=row["first_release"],
            group_size=int(row["group_size"]) if "group_size" in keys else 1,
        )
