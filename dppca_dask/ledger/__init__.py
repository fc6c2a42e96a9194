"""The privacy-budget ledger: a SQLite database that stops repeated releases about a dataset from overspending.

Each dataset key has a total (ε, δ). A job *reserves* its DpEvents for a dataset in one transaction before it
reads any data; the reservation is refused if the composition of everything already spent or reserved and the
new request exceeds the total. Composition is by the PLD accountant over the stored DpEvents (tighter than
adding ε; the sum of ε is kept beside it). A reservation becomes a *charge* when the job releases, or is
*released* (returned) only when the job failed before drawing any data-dependent noise; once noise has been
drawn, the budget is never returned (DESIGN.md, invariant 6).

Reservations are keyed by ``(dataset, job_id)``: running the same job id again (a scheduled job re-run after a
crash) finds its reservation instead of reserving twice. Concurrent jobs in several processes are serialised by
SQLite's write lock (``BEGIN IMMEDIATE``): the check and the insert happen in one transaction, so racing jobs
can never overspend. The database must live on a local file system (SQLite's locking is unreliable on NFS).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from dppca_dask.errors import BudgetExceededError, InvalidParameterError, LedgerError

log = logging.getLogger(__name__)

__all__ = [
    "RESERVED",
    "CHARGED",
    "RELEASED",
    "REFUSED",
    "DatasetBudget",
    "Ledger",
    "LedgerEntry",
]

RESERVED, CHARGED, RELEASED, REFUSED = "reserved", "charged", "released", "refused"
#: Statuses whose events count against the budget.
_COUNTED = (RESERVED, CHARGED)
SCHEMA_VERSION = 1
#: Relative slack when comparing a composed ε with the total (PLD results are upper bounds already).
_TOLERANCE = 1e-9

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS datasets (
    dataset TEXT PRIMARY KEY,
    total_epsilon REAL NOT NULL,
    total_delta REAL NOT NULL,
    neighbouring TEXT,
    created TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS entries (
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
    UNIQUE (dataset, job_id)
);
"""


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


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
    events: tuple[Any, ...]
    status: str
    """``reserved``, ``charged``, ``released`` (returned unspent) or ``refused`` (over budget; never counted)."""
    outcome: str
    """``running``, ``succeeded``, ``failed`` (after noise was drawn) or ``failed-before-noise``."""
    attempts: int
    created: str
    updated: str
    first_release: str | None = None
    """When the job first wrote a released (noisy) value outside the process (a checkpoint), if it did."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "job": self.job_name, "mechanism": self.mechanism, "epsilon": self.epsilon,
            "delta": self.delta, "neighbouring": self.neighbouring, "status": self.status, "outcome": self.outcome,
            "attempts": self.attempts, "created": self.created, "updated": self.updated,
            "first_release": self.first_release,
        }


@dataclass(frozen=True)
class DatasetBudget:
    """A dataset's total, what is spent (charged or reserved), and what remains."""

    dataset: str
    total_epsilon: float
    total_delta: float
    neighbouring: str | None
    spent_epsilon: float
    """PLD composition of every charged or reserved entry's events, at ``total_delta``."""
    sum_epsilon: float
    """Basic composition (sum of ε) of the same entries, for comparison."""
    sum_delta: float
    entries: tuple[LedgerEntry, ...]

    @property
    def remaining_epsilon(self) -> float:
        """``total_epsilon − spent_epsilon`` (indicative: composition is not additive, so a request of this ε may
        or may not fit; the reservation decides)."""
        return max(0.0, self.total_epsilon - self.spent_epsilon)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset, "total_epsilon": self.total_epsilon, "total_delta": self.total_delta,
            "neighbouring": self.neighbouring, "spent_epsilon": self.spent_epsilon, "sum_epsilon": self.sum_epsilon,
            "sum_delta": self.sum_delta, "remaining_epsilon": self.remaining_epsilon,
            "accountant": "pld", "history": [e.to_dict() for e in self.entries],
        }


def _check_total(epsilon: float, delta: float) -> tuple[float, float]:
    epsilon, delta = float(epsilon), float(delta)
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise InvalidParameterError(f"total_epsilon must be finite and > 0; got {epsilon}")
    if not (0.0 <= delta < 1.0):
        raise InvalidParameterError(f"total_delta must be in [0, 1); got {delta}")
    return epsilon, delta


def _compose(events: Sequence[Any], delta: float) -> float:
    from dppca_dask.accounting import epsilon_for

    if not events:
        return 0.0
    return float(epsilon_for(list(events), delta=delta))


class Ledger:
    """A privacy-budget ledger in the SQLite file ``path`` (created on first use).

    Parameters
    ----------
    path
        The database file. Keep it on a local file system and back it up: losing it forgets what was spent.
        A missing file is created (with a warning) unless ``create=False``: check the path, since a new
        ledger knows nothing of what an old one recorded.
    timeout
        Seconds a writer waits for another process's transaction before failing.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = 120.0, create: bool = True) -> None:
        self.path = os.fspath(path)
        if not os.path.exists(self.path):
            if not create:
                raise LedgerError(f"ledger '{self.path}' does not exist")
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            log.warning("creating a new, empty privacy-budget ledger at %s", self.path)
        self._timeout = float(timeout)
        with self._connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                for statement in _SCHEMA.strip().split(";"):
                    if statement.strip():
                        db.execute(statement)
                row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                if row is None:
                    db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                elif int(row[0]) != SCHEMA_VERSION:
                    raise LedgerError(
                        f"ledger '{self.path}' has schema version {row[0]}; this version of dppca_dask reads "
                        f"version {SCHEMA_VERSION}"
                    )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def __repr__(self) -> str:
        return f"Ledger({self.path!r})"

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        try:
            db = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
        except sqlite3.Error as exc:
            raise LedgerError(f"cannot open ledger '{self.path}': {exc}") from exc
        try:
            db.row_factory = sqlite3.Row
            db.execute("PRAGMA foreign_keys = ON")
            db.execute("PRAGMA synchronous = FULL")
            yield db
        except sqlite3.DatabaseError as exc:
            raise LedgerError(f"ledger '{self.path}': {exc}") from exc
        finally:
            db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction holding SQLite's write lock from the start (no check-then-insert race)."""
        with self._connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    # -- datasets ---------------------------------------------------------------------------------------------

    def ensure_dataset(
        self, dataset: str, *, total_epsilon: float, total_delta: float, neighbouring: str | None = None
    ) -> None:
        """Create the dataset's budget, or check that the recorded totals are the ones given.

        Totals are fixed once recorded: a job spec cannot raise them. Raises :class:`LedgerError` on a mismatch.
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
            db.execute("INSERT INTO datasets VALUES (?, ?, ?, ?, ?)", (dataset, eps, delta, neighbouring, _now()))
            return
        if not (math.isclose(row[0], eps, rel_tol=1e-12) and math.isclose(row[1], delta, rel_tol=1e-12)):
            raise LedgerError(
                f"ledger '{self.path}' records a total of (epsilon={row[0]:g}, delta={row[1]:g}) for dataset "
                f"'{dataset}'; the job gives (epsilon={eps:g}, delta={delta:g}). A dataset's total is fixed when "
                "it is first recorded; give the recorded total"
            )
        if neighbouring is not None and row[2] is not None and row[2] != neighbouring:
            raise LedgerError(
                f"dataset '{dataset}' is budgeted for neighbours differing by {row[2]}; this job's guarantee is for "
                f"{neighbouring}; budgets under different neighbouring relations do not compose: use a separate "
                "dataset key"
            )
        if neighbouring is not None and row[2] is None:
            db.execute("UPDATE datasets SET neighbouring = ? WHERE dataset = ?", (neighbouring, dataset))

    def datasets(self) -> list[str]:
        with self._connection() as db:
            return [r[0] for r in db.execute("SELECT dataset FROM datasets ORDER BY dataset")]

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
    ) -> LedgerEntry:
        """Reserve ``events`` (a job's (ε, δ)) for ``dataset`` under ``job_id``, in one transaction.

        If ``job_id`` already has an entry, it is returned unchanged when it is reserved or charged (a re-run
        resumes it; the caller decides what a charged entry means), and reserved again (with the budget check)
        when it was released or refused. A refusal is recorded (status ``refused``, never counted) so that the
        history shows it. An entry with other parameters is an error: a job id stands for one release.

        ``total_epsilon``/``total_delta`` create the dataset's budget if it is new (see :meth:`ensure_dataset`).

        Raises
        ------
        BudgetExceededError
            If the composition would exceed the dataset's total (message: requested, spent, remaining, total).
        """
        from dppca_dask.accounting import event_to_json

        if not isinstance(job_id, str) or not job_id:
            raise InvalidParameterError(f"job_id must be a non-empty string; got {job_id!r}")
        epsilon, delta = float(epsilon), float(delta)
        events = list(events)
        if not events:
            raise InvalidParameterError("a reservation needs the job's DpEvents; got none")
        encoded = json.dumps([event_to_json(e) for e in events], sort_keys=True)
        refusal: BudgetExceededError | None = None
        with self._transaction() as db:
            if total_epsilon is not None or total_delta is not None:
                if total_epsilon is None or total_delta is None:
                    raise InvalidParameterError("give both total_epsilon and total_delta, or neither")
                te, td = _check_total(total_epsilon, total_delta)
                self._ensure(db, dataset, te, td, neighbouring)
            budget = db.execute("SELECT total_epsilon, total_delta, neighbouring FROM datasets WHERE dataset = ?",
                                (dataset,)).fetchone()
            if budget is None:
                raise LedgerError(
                    f"dataset '{dataset}' has no budget in ledger '{self.path}'; give its total_epsilon and "
                    "total_delta"
                )
            if budget[2] is not None and budget[2] != neighbouring:
                raise LedgerError(
                    f"dataset '{dataset}' is budgeted for neighbours differing by {budget[2]}; this job's guarantee "
                    f"is for {neighbouring}; use a separate dataset key"
                )
            existing = db.execute("SELECT * FROM entries WHERE dataset = ? AND job_id = ?",
                                  (dataset, job_id)).fetchone()
            if existing is not None:
                entry = self._entry(existing)
                if (entry.mechanism != mechanism or not math.isclose(entry.epsilon, epsilon, rel_tol=1e-12)
                        or not math.isclose(entry.delta, delta, rel_tol=1e-12)
                        or existing["events"] != encoded):
                    raise LedgerError(
                        f"job id '{job_id}' already has an entry for dataset '{dataset}' with other parameters "
                        f"({entry.mechanism}, epsilon={entry.epsilon:g}, delta={entry.delta:g}); a job id stands for "
                        "one release: give the run a new job id"
                    )
                if entry.status in _COUNTED:
                    db.execute("UPDATE entries SET attempts = attempts + 1, updated = ? WHERE id = ?",
                               (_now(), existing["id"]))
                    return self._get(db, dataset, job_id)
            spent = self._spent_events(db, dataset, exclude_job=job_id)
            total_eps, total_delta_ = float(budget[0]), float(budget[1])
            if delta >= total_delta_ and delta > 0:
                raise BudgetExceededError(
                    f"requested delta={delta:g} is not below the total delta={total_delta_:g} of dataset '{dataset}' "
                    f"in ledger '{self.path}'"
                )
            before = _compose(spent, total_delta_)
            after = _compose(spent + events, total_delta_)
            now = _now()
            if after > total_eps * (1 + _TOLERANCE):
                refusal = BudgetExceededError(
                    f"budget exceeded for dataset '{dataset}' in ledger '{self.path}': requested (epsilon={epsilon:g}, "
                    f"delta={delta:g}); spent epsilon={before:.4g} of total epsilon={total_eps:g} (PLD at "
                    f"delta={total_delta_:g}), remaining {max(0.0, total_eps - before):.4g}; with this job the "
                    f"composition would be epsilon={after:.4g}"
                )
            status, outcome = (REFUSED, "over budget") if refusal is not None else (RESERVED, "running")
            if existing is not None:  # released or refused before: reserve again (or record the new refusal)
                db.execute("UPDATE entries SET status = ?, outcome = ?, attempts = attempts + 1, updated = ? "
                           "WHERE id = ?", (status, outcome, now, existing["id"]))
            else:
                db.execute(
                    "INSERT INTO entries (dataset, job_id, job_name, mechanism, epsilon, delta, neighbouring, events,"
                    " status, outcome, attempts, created, updated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)",
                    (dataset, job_id, job_name or job_id, mechanism, epsilon, delta, neighbouring, encoded, status,
                     outcome, now, now),
                )
            reserved = self._get(db, dataset, job_id)
        if refusal is not None:  # recorded (committed) for the history; nothing is counted
            raise refusal
        return reserved

    def charge(self, dataset: str, job_id: str, *, outcome: str = "succeeded") -> LedgerEntry:
        """Turn the reservation into a charge (the job released, or failed after drawing noise)."""
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
        """Record that the job has written a released value outside its process (e.g. a checkpoint).

        From then on the job can only continue from what it released, or stay spent: a later attempt that cannot
        find those values must not start again with fresh noise.
        """
        with self._transaction() as db:
            entry = self._get(db, dataset, job_id)
            if entry.status not in _COUNTED:
                raise LedgerError(f"job '{job_id}' has no reservation for '{dataset}'; reserve before releasing")
            db.execute("UPDATE entries SET first_release = COALESCE(first_release, ?), updated = ? "
                       "WHERE dataset = ? AND job_id = ?", (_now(), _now(), dataset, job_id))
            return self._get(db, dataset, job_id)

    def release(self, dataset: str, job_id: str) -> LedgerEntry:
        """Return a reservation: only for a job that failed before drawing any data-dependent noise.

        A charged entry is never returned (invariant 6): this raises :class:`LedgerError` for it.
        """
        with self._transaction() as db:
            entry = self._get(db, dataset, job_id)
            if entry.status == CHARGED or entry.first_release is not None:
                raise LedgerError(
                    f"job '{job_id}' is charged to '{dataset}' or has released values; a charge is never refunded "
                    "once noise was drawn"
                )
            db.execute("UPDATE entries SET status = ?, outcome = 'failed-before-noise', updated = ? "
                       "WHERE dataset = ? AND job_id = ?", (RELEASED, _now(), dataset, job_id))
            return self._get(db, dataset, job_id)

    def entry(self, dataset: str, job_id: str) -> LedgerEntry | None:
        with self._connection() as db:
            row = db.execute("SELECT * FROM entries WHERE dataset = ? AND job_id = ?", (dataset, job_id)).fetchone()
            return None if row is None else self._entry(row)

    # -- reading -----------------------------------------------------------------------------------------------

    def budget(self, dataset: str) -> DatasetBudget:
        """The dataset's totals, spent budget (PLD and sum of ε) and history, oldest first."""
        with self._connection() as db:
            row = db.execute("SELECT * FROM datasets WHERE dataset = ?", (dataset,)).fetchone()
            if row is None:
                known = ", ".join(self.datasets()) or "none"
                raise LedgerError(f"no dataset '{dataset}' in ledger '{self.path}' (datasets: {known})")
            entries = tuple(self._entry(r) for r in db.execute(
                "SELECT * FROM entries WHERE dataset = ? ORDER BY id", (dataset,)))
            spent = self._spent_events(db, dataset)
        counted = [e for e in entries if e.status in _COUNTED]
        return DatasetBudget(
            dataset=dataset,
            total_epsilon=float(row["total_epsilon"]),
            total_delta=float(row["total_delta"]),
            neighbouring=row["neighbouring"],
            spent_epsilon=_compose(spent, float(row["total_delta"])),
            sum_epsilon=float(sum(e.epsilon for e in counted)),
            sum_delta=float(sum(e.delta for e in counted)),
            entries=entries,
        )

    # -- helpers -----------------------------------------------------------------------------------------------

    def _spent_events(self, db: sqlite3.Connection, dataset: str, exclude_job: str | None = None) -> list[Any]:
        from dppca_dask.accounting import event_from_json

        out: list[Any] = []
        for row in db.execute(
            "SELECT job_id, events FROM entries WHERE dataset = ? AND status IN (?, ?)", (dataset, *_COUNTED)
        ):
            if row["job_id"] != exclude_job:
                out.extend(event_from_json(e) for e in json.loads(row["events"]))
        return out

    def _get(self, db: sqlite3.Connection, dataset: str, job_id: str) -> LedgerEntry:
        row = db.execute("SELECT * FROM entries WHERE dataset = ? AND job_id = ?", (dataset, job_id)).fetchone()
        if row is None:
            raise LedgerError(f"no reservation for job '{job_id}' on dataset '{dataset}' in ledger '{self.path}'")
        return self._entry(row)

    @staticmethod
    def _entry(row: sqlite3.Row) -> LedgerEntry:
        from dppca_dask.accounting import event_from_json

        return LedgerEntry(
            dataset=row["dataset"], job_id=row["job_id"], job_name=row["job_name"], mechanism=row["mechanism"],
            epsilon=float(row["epsilon"]), delta=float(row["delta"]), neighbouring=row["neighbouring"],
            events=tuple(event_from_json(e) for e in json.loads(row["events"])), status=row["status"],
            outcome=row["outcome"], attempts=int(row["attempts"]), created=row["created"], updated=row["updated"],
            first_release=row["first_release"],
        )
