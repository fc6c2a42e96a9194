"""The privacy-budget ledger: one set of books per dataset, kept per partition, where the rows live.

A ledger is created once, explicitly (``dppca-dask budget init`` or :meth:`Ledger.create` and
:meth:`Ledger.init_dataset`); opening a path that holds no ledger is an error, never a new empty ledger (an empty
ledger would let a completed job release again). Each dataset key has a total (ε, δ), the neighbouring relation
its guarantee is stated for, and the id of the store it was last used with.

**The model.** The privacy unit is a row, and a row lives in one partition. Every release of any kind (a whole-store
``pca``, ``lowrank`` or ``topics`` job, a sliding-window release, a binary-tree node, a spectral-histogram
checkpoint) is one *entry* of its dataset key, charged to every partition it reads. A partition is named by its
public identity, never by a store's random id: ``t:<day or time>`` for a stamped partition (its timestamp), ``#<i>``
for the ``i``-th partition of an unstamped store, and ``*`` for "every partition of the dataset" (a release whose
partitions are not known). A reservation is refused unless, for **every** partition it touches, the PLD composition
of everything already reserved or charged to that partition (``*`` entries included) plus this release stays within
the dataset's total; the check and the insert are one transaction, so racing jobs can never overspend. A re-ingested
store keeps its partitions' identities (the same days are the same ``t:`` partitions); when a dataset key moves to
another store (``allow_new_store``), its ordinal partitions cannot be matched to the new store's rows, so their
charges carry over to every partition (``*``). ``budget show`` reports the worst-off partition's composed ε first.

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
crash) finds its reservation instead of reserving twice. Two backends keep the same books with the same
semantics: a SQLite file (the embedded default; serialised by SQLite's write lock, ``BEGIN IMMEDIATE``; it must
live on a local file system) and, for ``postgresql://`` URLs, a PostgreSQL database (serialisable transactions,
retried on conflict; see :mod:`dppca_dask.ledger._postgres`). New SQLite ledgers are created owner-only whatever
the umask and ``DPPCA_DASK_FILE_MODE``: the file 0600, every directory created for it (missing parents included)
0700; directories that existed keep their mode. A ledger of an earlier schema (1 or 2: window releases kept on
``<dataset>/partition/<store>:<i>`` keys of their own) is refused until ``dppca-dask budget migrate`` converts it.
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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
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
    "budgeted_release",
    "compose_epsilon",
    "group_size_for",
    "partition_identities",
    "partition_identity",
]

RESERVED, CHARGED, RELEASED, REFUSED = "reserved", "charged", "released", "refused"
#: Statuses whose events count against the budget.
_COUNTED = (RESERVED, CHARGED)
SCHEMA_VERSION = 3
#: Relative slack when comparing a composed ε with the total (PLD results are upper bounds already).
_TOLERANCE = 1e-9
#: The finest PLD grid the ledger composes on. A pure ε below it is rounded *up* to it (pessimistic), so a tiny ε
#: costs at most this much extra, and the grid never grows to the millions of points that made one reservation
#: with ε = 1e-5 take minutes inside the write lock.
MIN_INTERVAL = 1e-4
#: What ``budget init`` is called as (named in errors about a missing ledger or dataset).
INIT_COMMAND = "dppca-dask budget init --ledger {path} --dataset KEY --total-epsilon E --total-delta D"

_TABLES = ("meta", "datasets", "entries", "charges")
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
    store_id TEXT,
    UNIQUE (dataset, job_id)
);
CREATE TABLE charges (
    entry_id INTEGER NOT NULL REFERENCES entries(id),
    partition TEXT NOT NULL,
    events TEXT,
    PRIMARY KEY (entry_id, partition)
);
CREATE INDEX charges_by_partition ON charges (partition);
"""
#: Version 1 -> 2: the store id of each dataset key, and the group size an entry's events count with.
_MIGRATE_1 = (
    "ALTER TABLE datasets ADD COLUMN store_id TEXT",
    "ALTER TABLE entries ADD COLUMN group_size INTEGER NOT NULL DEFAULT 1",
)
#: Version 2 -> 3: every entry charged to the partitions it read (the charges table), and the store it read.
_MIGRATE_2 = (
    "ALTER TABLE entries ADD COLUMN store_id TEXT",
    "CREATE TABLE charges (entry_id INTEGER NOT NULL REFERENCES entries(id), partition TEXT NOT NULL, events TEXT, "
    "PRIMARY KEY (entry_id, partition))",
    "CREATE INDEX charges_by_partition ON charges (partition)",
)
#: What ``budget migrate`` is called as (named when an earlier schema is refused).
MIGRATE_COMMAND = "dppca-dask budget migrate --ledger {path} [--store STORE ...]"

#: The partition identity that stands for every partition of a dataset (a release whose partitions are unknown,
#: and the charges of ordinal partitions carried over to a new store).
EVERY_PARTITION = "*"


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


# ------------------------------------------------------------------------------------------------ partitions


def partition_identity(timestamp: float | None, index: int) -> str:
    """The public identity of a partition in the ledger: ``t:2026-11-02`` for a partition stamped midnight UTC
    (``t:2026-11-02T06:00:00Z`` for another time), ``#<index>`` for an unstamped one. Never the store's id: the
    same day re-ingested into another store is the same partition."""
    if timestamp is None:
        return f"#{int(index)}"
    seconds = float(timestamp)
    moment = _dt.datetime.fromtimestamp(seconds, tz=_dt.timezone.utc)
    if seconds % 86400 == 0:
        return f"t:{moment.date().isoformat()}"
    spec = "seconds" if seconds == int(seconds) else "microseconds"
    return "t:" + moment.isoformat(timespec=spec).replace("+00:00", "Z")


def partition_identities(store: Any, indices: Sequence[int] | None = None) -> tuple[str, ...]:
    """The identities (:func:`partition_identity`) of ``store``'s partitions ``indices`` (default: all), in order;
    read from the public partition table only."""
    parts = store.partitions
    chosen = range(len(parts)) if indices is None else indices
    return tuple(partition_identity(parts[int(i)].timestamp, int(i)) for i in chosen)


def describe_partition(identity: str) -> str:
    """A partition identity as ``budget show`` prints it."""
    if identity == EVERY_PARTITION:
        return "every partition"
    if identity.startswith("t:"):
        return identity[2:]
    return f"partition {identity}"


@dataclass(frozen=True)
class PartitionSpend:
    """What is spent on one partition of a dataset: the composition of every counted entry charged to it."""

    partition: str
    """Its identity (:func:`partition_identity`; ``*``: every partition)."""
    spent_epsilon: float
    """PLD composition, at the dataset's total δ, of the counted entries charged to it (``*`` entries included)."""
    sum_epsilon: float
    sum_delta: float
    entries: int
    """How many counted entries are charged to it."""

    def to_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "spent_epsilon": self.spent_epsilon, "sum_epsilon": self.sum_epsilon,
                "sum_delta": self.sum_delta, "entries": self.entries}


class _Books:
    """The counted entries of one dataset by partition, and compositions of them cached by what they compose."""

    def __init__(self, total_delta: float) -> None:
        self.total_delta = total_delta
        self.by_partition: dict[str, list[tuple[int, str, list[Any], float, float]]] = {}
        self._cache: dict[tuple[Any, ...], float] = {}

    def add(self, entry_id: int, partition: str, key: str, events: list[Any], epsilon: float, delta: float) -> None:
        self.by_partition.setdefault(partition, []).append((entry_id, key, events, epsilon, delta))

    def partitions(self) -> list[str]:
        named = sorted(p for p in self.by_partition if p != EVERY_PARTITION)
        return named or ([EVERY_PARTITION] if EVERY_PARTITION in self.by_partition else [])

    def on(self, partition: str) -> list[tuple[int, str, list[Any], float, float]]:
        own = self.by_partition.get(partition, [])
        if partition == EVERY_PARTITION:
            return list(own)
        return own + self.by_partition.get(EVERY_PARTITION, [])

    def compose(self, partition: str, extra: tuple[str, list[Any]] | None = None) -> float:
        counted = self.on(partition)
        signature = tuple(sorted((e[0], e[1]) for e in counted)) + ((("new", extra[0]),) if extra else ())
        if signature not in self._cache:
            events = [ev for e in counted for ev in e[2]] + (list(extra[1]) if extra else [])
            self._cache[signature] = compose_epsilon(events, self.total_delta)
        return self._cache[signature]

    def spend(self, partition: str) -> PartitionSpend:
        counted = self.on(partition)
        return PartitionSpend(partition, self.compose(partition), float(sum(e[3] for e in counted)),
                              float(sum(e[4] for e in counted)), len(counted))


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
    partitions: tuple[str, ...] = ()
    """The identities of the partitions it is charged to (:func:`partition_identity`; ``*``: every partition)."""
    store_id: str | None = None
    """The store the release read (public: the store's random id), when the caller said."""

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
            "partitions": list(self.partitions), "store_id": self.store_id,
        }


@dataclass(frozen=True)
class DatasetBudget:
    """A dataset's total, what is spent (charged or reserved) on its worst-off partition, and what remains."""

    dataset: str
    total_epsilon: float
    total_delta: float
    neighbouring: str | None
    spent_epsilon: float
    """The worst-off partition's spend: the largest, over the dataset's partitions, PLD composition (at
    ``total_delta``) of the charged or reserved entries charged to a partition (events for the dataset's relation).
    The figure that matters: a row of that partition has been released at this ε."""
    sum_epsilon: float
    """Basic composition (sum of ε) of the same partition's entries, for comparison."""
    sum_delta: float
    entries: tuple[LedgerEntry, ...]
    store_id: str | None = None
    partitions: tuple[PartitionSpend, ...] = ()
    """Every partition charged so far, in identity order (``*`` alone when only releases of unknown partitions
    were charged)."""
    worst_partition: str | None = None
    """The identity of the worst-off partition (``None``: nothing counted yet)."""

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
            "worst_partition": self.worst_partition, "partitions": [p.to_dict() for p in self.partitions],
            "history": [e.to_dict() for e in self.entries],
        }


def _charged_parts(partitions: Sequence[str] | Mapping[str, Sequence[Any]] | None, events: Sequence[Any],
                   encoded: str) -> list[tuple[str, str | None]]:
    """``(identity, events JSON or None for the entry's own events)`` of each partition a reservation charges,
    sorted by identity (``*`` alone for ``None``)."""
    from dppca_dask.accounting import event_to_json

    if partitions is None:
        return [(EVERY_PARTITION, None)]
    if isinstance(partitions, (str, bytes)):
        raise InvalidParameterError(f"partitions must be a list of partition identities; got the string "
                                    f"{partitions!r}: pass [{partitions!r}]")
    out: dict[str, str | None] = {}
    items = partitions.items() if isinstance(partitions, Mapping) else ((p, None) for p in partitions)
    for part, part_events in items:
        if not isinstance(part, str) or not part:
            raise InvalidParameterError(f"a partition identity must be a non-empty string; got {part!r}")
        if part_events is None:
            out[part] = None
            continue
        part_events = list(part_events)
        if not part_events:
            raise InvalidParameterError(f"partition {part!r} is charged no events; leave it out instead")
        enc = json.dumps([event_to_json(e) for e in part_events], sort_keys=True)
        out[part] = None if enc == encoded else enc
    if not out:
        raise InvalidParameterError("a reservation charges at least one partition; got none")
    return sorted(out.items())


def _postgres_tables(db: Any) -> set[str]:
    from dppca_dask.ledger import _postgres

    return _postgres.tables(db)


def _postgres_namespace() -> str:
    from dppca_dask.ledger import _postgres

    return _postgres.NAMESPACE


@contextmanager
def budgeted_release(
    ledger: Any,
    dataset: str | None,
    job_id: str | None,
    *,
    store: Any,
    epsilon: float,
    delta: float,
    events: Sequence[Any] | None,
    mechanism: str,
    neighbouring: str,
    noise: Any,
) -> Iterator[LedgerEntry | None]:
    """A release of a Python call given a ledger (``pca(..., ledger=, dataset=, job_id=)`` and the functions built
    on it): ``events`` reserved on every partition of ``store`` it reads (``*`` for in-memory data, whose
    partitions have no public identity) before the body runs; charged when the body returns; when it raises,
    charged (outcome ``failed``) once any noise was drawn or the failure may depend on the data, returned only when
    nothing was drawn and the data could not be read (invariant 6). With no ledger, dataset and job id, does
    nothing.

    Raises :class:`InvalidParameterError` for a partial budget (the three go together) or a release that is not
    private; :class:`LedgerError` for a job id already charged (a release draws fresh noise, which that charge does
    not count); :class:`BudgetExceededError` when a partition it reads cannot take it.
    """
    from dppca_dask.errors import StoreCorruptError, StoreNotFoundError, UnsupportedStoreVersionError

    if ledger is None and dataset is None and job_id is None:
        yield None
        return
    if ledger is None or dataset is None or job_id is None:
        raise InvalidParameterError(f"a ledger budget needs ledger, dataset and job_id together; got ledger={ledger!r}, "
                                    f"dataset={dataset!r}, job_id={job_id!r}")
    if noise is None or not events:
        raise InvalidParameterError(f"mechanism={mechanism!r} releases nothing private: run it without a ledger")
    book = Ledger(ledger) if isinstance(ledger, (str, os.PathLike)) else ledger
    earlier = book.entry(dataset, job_id)
    if earlier is not None and earlier.status == CHARGED:
        raise LedgerError(f"job id '{job_id}' is already charged to '{dataset}' in ledger '{book.path}'; a release "
                          "draws fresh noise, which that charge does not count: give the release a new job id")
    parts = partition_identities(store) if getattr(store, "partitions", None) else None
    entry = book.reserve(dataset, job_id, epsilon=epsilon, delta=delta, events=list(events), mechanism=mechanism,
                         neighbouring=neighbouring, partitions=parts, store_id=getattr(store, "store_id", None))
    if entry.status == CHARGED:  # charged by another process since the check above
        raise LedgerError(f"job id '{job_id}' is already charged to '{dataset}'; give the release a new job id")
    try:
        yield entry
    except BaseException as exc:
        unread = (StoreNotFoundError, StoreCorruptError, UnsupportedStoreVersionError, OSError, KeyboardInterrupt)
        drawn = bool(noise.released_keys) or bool(getattr(noise, "data_dependent_keys", ()))
        if drawn or not isinstance(exc, unread):
            book.charge(dataset, job_id, outcome="failed")
        else:
            book.release(dataset, job_id)
        raise
    book.charge(dataset, job_id)


_PARTITION_KEY = re.compile(r"^(?P<dataset>.+)/partition/(?P<store>[^/:]+):(?P<index>[0-9]+)$")


def _migrate(db: Any, path: str, identities: Mapping[str, tuple[str, ...]]) -> list[str]:
    """:meth:`Ledger.migrate` inside its transaction."""
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    version = None if row is None else row[0]
    if version == str(SCHEMA_VERSION):
        return [f"ledger '{path}' is already at schema version {SCHEMA_VERSION}; nothing to do"]
    if version not in ("1", "2"):
        raise LedgerError(f"ledger '{path}' has schema version {version}; only versions 1 and 2 are migrated")
    done = []
    if version == "1":
        for statement in _MIGRATE_1:
            db.execute(statement)
    for statement in _MIGRATE_2:
        db.execute(statement)
    db.execute("INSERT OR IGNORE INTO meta VALUES ('ledger_id', ?)", (uuid.uuid4().hex,))
    datasets = {r["dataset"] for r in db.execute("SELECT dataset FROM datasets").fetchall()}
    groups: dict[tuple[str, str], list[tuple[Any, str]]] = {}
    for key in sorted(datasets):
        match = _PARTITION_KEY.match(key)
        if match is None or match["dataset"] not in datasets:
            for r in db.execute("SELECT id FROM entries WHERE dataset = ?", (key,)).fetchall():
                db.execute("INSERT INTO charges VALUES (?, ?, NULL)", (r["id"], EVERY_PARTITION))
            continue
        known = identities.get(match["store"], ())
        index = int(match["index"])
        part = known[index] if index < len(known) else EVERY_PARTITION
        for r in db.execute("SELECT * FROM entries WHERE dataset = ?", (key,)).fetchall():
            groups.setdefault((match["dataset"], r["job_id"]), []).append((r, part))
        if part == EVERY_PARTITION:
            done.append(f"partition key '{key}': its store is not among those given; its releases count against "
                        f"every partition of '{match['dataset']}'")
    for (dataset, job_id), rows in sorted(groups.items()):
        done.append(_merge_window_entries(db, dataset, job_id, rows))
    for key in {r[0]["dataset"] for rows in groups.values() for r in rows}:
        db.execute("DELETE FROM entries WHERE dataset = ?", (key,))
        db.execute("DELETE FROM datasets WHERE dataset = ?", (key,))
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION),))
    done.append(f"ledger '{path}': schema version {version} -> {SCHEMA_VERSION}")
    return done


def _merge_window_entries(db: Any, dataset: str, job_id: str, rows: list[tuple[Any, str]]) -> str:
    """One entry of ``dataset`` for a window release's entries on its partition keys (``rows``: each entry with
    the identity of its partition): charged while any was charged, reserved while any was, else as the first."""
    statuses = [r["status"] for r, _ in rows]
    match = _PARTITION_KEY.match(rows[0][0]["dataset"])
    store_id = None if match is None else match["store"]
    lead = next((r for r, _ in rows if r["status"] == CHARGED), None) or next(
        (r for r, _ in rows if r["status"] == RESERVED), rows[0][0])
    head = max((r for r, _ in rows), key=lambda r: len(json.loads(r["events"])))
    name = job_id
    if db.execute("SELECT 1 FROM entries WHERE dataset = ? AND job_id = ?", (dataset, job_id)).fetchone():
        name = f"{job_id}#window"  # the same id on the dataset key (another release): both kept
    firsts = [r["first_release"] for r, _ in rows if r["first_release"]]
    db.execute(
        "INSERT INTO entries (dataset, job_id, job_name, mechanism, epsilon, delta, neighbouring, events, status, "
        "outcome, attempts, first_release, created, updated, group_size, store_id) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (dataset, name, head["job_name"], head["mechanism"], max(float(r["epsilon"]) for r, _ in rows),
         max(float(r["delta"]) for r, _ in rows), head["neighbouring"], head["events"], lead["status"],
         lead["outcome"], max(int(r["attempts"]) for r, _ in rows), min(firsts) if firsts else None,
         min(r["created"] for r, _ in rows), max(r["updated"] for r, _ in rows),
         max(int(r["group_size"]) for r, _ in rows), store_id),
    )
    new_id = db.execute("SELECT id FROM entries WHERE dataset = ? AND job_id = ?", (dataset, name)).fetchone()["id"]
    parts: dict[str, str | None] = {}
    for r, part in rows:
        events = None if r["events"] == head["events"] else r["events"]
        if part not in parts or events is None:
            parts[part] = events
    for part, events in parts.items():
        db.execute("INSERT INTO charges VALUES (?, ?, ?)", (new_id, part, events))
    return (f"window release '{name}' of '{dataset}': {len(rows)} partition key(s) -> one entry ({lead['status']}; "
            f"statuses {', '.join(sorted(set(statuses)))}) on {len(parts)} partition(s)")


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
        and back it up: losing it forgets what was spent. Or a ``postgresql://`` URL of a database holding a
        ledger (:mod:`dppca_dask.ledger._postgres`), with the same semantics; ``path`` is then the URL with its
        password hidden.
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
        self._setup(path, timeout, read_only)
        if self.is_postgres:
            with self._connection() as db:
                self._check_schema(db)
            self.id = self._meta("ledger_id") or ""
            return
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

    def _setup(self, path: str | os.PathLike[str], timeout: float, read_only: bool) -> None:
        from dppca_dask.ledger import _postgres

        self._url = os.fspath(path)
        self.is_postgres = _postgres.is_postgres_url(self._url)
        """Whether the ledger is a PostgreSQL database (else a SQLite file)."""
        self.path = _postgres.redact(self._url) if self.is_postgres else self._url
        self._timeout = float(timeout)
        self._read_only = bool(read_only)

    @staticmethod
    def exists(path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` holds something (a file, or a PostgreSQL database with the ledger's tables): ``budget
        init`` creates a ledger only where there is none."""
        from dppca_dask.ledger import _postgres

        path = os.fspath(path)
        if not _postgres.is_postgres_url(path):
            return os.path.lexists(path)
        with _postgres.connect(path, read_only=True, timeout=30) as db:
            return bool(_postgres.tables(db))

    @contextmanager
    def job_lock(self, name: str) -> Iterator[bool]:
        """For a PostgreSQL ledger: the database's session lock ``name`` held while the context runs (yields whether
        it was taken). A SQLite ledger's jobs lock files beside it instead (:func:`dppca_dask.jobs.steps.job_lock`)."""
        from dppca_dask.ledger import _postgres

        if not self.is_postgres:
            raise LedgerError(f"ledger '{self.path}' is a SQLite file: its jobs lock files beside it")
        with _postgres.session_lock(self._url, f"{self.id}\0{name}", timeout=self._timeout) as taken:
            yield taken

    # -- creation ------------------------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike[str], *, timeout: float = 120.0) -> Ledger:
        """Create a new, empty ledger at ``path`` (owner-only whatever the umask: the file 0600, and its directory and
        the missing parents, when created, 0700; directories that existed keep their mode).

        Raises :class:`LedgerError` if anything exists at ``path`` (an existing ledger is never reset).
        """
        path = os.fspath(path)
        from dppca_dask.ledger import _postgres

        if _postgres.is_postgres_url(path):
            return cls._create_postgres(path, timeout)
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

    @classmethod
    def _create_postgres(cls, url: str, timeout: float) -> Ledger:
        """Create the ledger's tables (schema ``dppca_ledger``) in the database at ``url``, in one transaction."""
        from dppca_dask.ledger import _postgres

        with _postgres.connect(url, read_only=False, timeout=timeout) as db:
            db.raw.execute("SELECT pg_advisory_xact_lock(4224)")  # two creations at once: one creates, one sees it
            if _postgres.tables(db):
                raise LedgerError(
                    f"'{_postgres.redact(url)}' already holds a ledger (schema {_postgres.NAMESPACE}); a ledger is "
                    "created once and never overwritten: use it as it is, or give another database"
                )
            for statement in _postgres.SCHEMA.strip().split(";"):
                if statement.strip():
                    db.raw.execute(statement)
            db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            db.execute("INSERT INTO meta VALUES ('ledger_id', ?)", (uuid.uuid4().hex,))
            db.execute("INSERT INTO meta VALUES ('created', ?)", (_now(),))
        log.info("created a new privacy-budget ledger in %s", _postgres.redact(url))
        return cls(url, timeout=timeout)

    @classmethod
    def migrate(cls, path: str | os.PathLike[str], *, stores: Sequence[Any] = (),
                timeout: float = 120.0) -> list[str]:
        """Convert a ledger of schema 1 or 2 to this version's books, in place, in one transaction; returns what it
        did, one line per change (nothing changes for a ledger already converted).

        Every entry of a dataset key is charged to every partition (``*``: earlier versions did not record which
        partitions a whole-store release read, and it read them all). The entries of a window release, kept on
        keys ``<dataset>/partition/<store id>:<i>`` of their own, become one entry of ``<dataset>`` charged to those
        partitions: by their day when the store with that id is among ``stores`` (paths or opened stores; their
        public partition tables are read, no row), else to every partition (``*``, the safe side: the ledger
        cannot tell which rows they were).
        """
        path = os.fspath(path)
        identities: dict[str, tuple[str, ...]] = {}
        for store in stores:
            if isinstance(store, (str, os.PathLike)):
                from dppca_dask.storage import open_matrix

                store = open_matrix(os.fspath(store))
            if getattr(store, "store_id", None):
                identities[str(store.store_id)] = partition_identities(store)
        ledger = cls.__new__(cls)
        ledger._setup(path, timeout, False)
        if ledger.is_postgres:
            with ledger._connection() as db:
                if not _postgres_tables(db):
                    raise LedgerError(f"no ledger in '{ledger.path}'; create one with "
                                      f"`{INIT_COMMAND.format(path=ledger.path)}`")
                return _migrate(db, ledger.path, identities)  # (a PostgreSQL ledger starts at this version)
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            raise LedgerError(f"ledger '{path}' does not exist or is empty; give the ledger's file")
        with ledger._connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                done = _migrate(db, path, identities)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        return done

    def _check_schema(self, db: Any) -> None:
        if self.is_postgres:
            tables = _postgres_tables(db)
            if not tables:
                raise LedgerError(
                    f"no ledger in '{self.path}' (the database has no {_postgres_namespace()} schema); a ledger is "
                    f"never created by a run: create it (once) with `{INIT_COMMAND.format(path=self.path)}`, or fix "
                    "the URL"
                )
        else:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not set(_TABLES[:3]) <= tables:
            raise LedgerError(
                f"'{self.path}' is a SQLite database but not a privacy-budget ledger (it has no "
                f"{', '.join(sorted(set(_TABLES[:3]) - tables))} table); nothing was written to it: give the ledger's "
                f"path, or create a ledger with `{INIT_COMMAND.format(path='NEW-PATH')}`"
            )
        row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = None if row is None else row[0]
        if version in ("1", "2"):
            raise LedgerError(
                f"ledger '{self.path}' has schema version {version}, which kept window releases on partition keys "
                "of their own, apart from the dataset's other releases; this version keeps one set of books per "
                f"dataset, per partition. Migrate it once (in place, one transaction) with "
                f"`{MIGRATE_COMMAND.format(path=self.path)}` (each STORE the dataset's window releases read: their "
                "partitions keep their days; without it they count against every partition), then run again"
            )
        if version != str(SCHEMA_VERSION):
            raise LedgerError(
                f"ledger '{self.path}' has schema version {version}; this version of dppca_dask reads version "
                f"{SCHEMA_VERSION} (and migrates versions 1 and 2 with `{MIGRATE_COMMAND.format(path=self.path)}`)"
            )

    def _meta(self, key: str) -> str | None:
        with self._connection() as db:
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
            return None if row is None else str(row[0])

    def __repr__(self) -> str:
        return f"Ledger({self.path!r})"

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        if self.is_postgres:
            from dppca_dask.ledger import _postgres

            with _postgres.connect(self._url, read_only=self._read_only, timeout=self._timeout) as pg:
                yield pg
            return
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
        if self.is_postgres:
            yield from self._pg_transaction()
            return
        with self._connection() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def _pg_transaction(self) -> Iterator[Any]:
        """A PostgreSQL write transaction holding the ledger's write lock from its start; connecting and taking the
        lock are retried after a transient failure, anything later fails closed (rolled back)."""
        from dppca_dask.ledger import _postgres

        def begin() -> Any:
            stack = ExitStack()
            try:
                db = stack.enter_context(self._connection())
                _postgres.lock_writers(db)
            except BaseException:
                stack.close()
                raise
            return stack, db

        stack, db = _postgres.retrying(begin)
        with stack:
            yield db

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
            self._carry_over(db, dataset)

    def _carry_over(self, db: Any, dataset: str) -> None:
        """A dataset key moved to another store keeps its spending: a stamped partition is the same day in the new
        store (its identity carries it), but an ordinal one (``#i``) cannot be matched to the new store's rows, so
        every charge on one counts against every partition (``*``) from now on."""
        rows = db.execute(
            "SELECT c.entry_id AS entry_id, c.partition AS partition, c.events AS events FROM charges c "
            "JOIN entries e ON e.id = c.entry_id WHERE e.dataset = ? AND c.partition LIKE '#%' ORDER BY c.entry_id",
            (dataset,)).fetchall()
        moved: dict[int, Any] = {}
        for r in rows:
            # several ordinal charges of one entry become one '*' charge: the entry's own events (NULL) if any
            # charge had them, else the one with the most events (one event kind per node: the largest spend)
            entry_id, events = int(r["entry_id"]), r["events"]
            if entry_id not in moved or events is None:
                moved[entry_id] = events
            elif moved[entry_id] is not None and len(json.loads(events)) > len(json.loads(moved[entry_id])):
                moved[entry_id] = events
        for entry_id, events in moved.items():
            db.execute("DELETE FROM charges WHERE entry_id = ? AND partition LIKE '#%'", (entry_id,))
            db.execute("DELETE FROM charges WHERE entry_id = ? AND partition = ?", (entry_id, EVERY_PARTITION))
            db.execute("INSERT INTO charges (entry_id, partition, events) VALUES (?, ?, ?)",
                       (entry_id, EVERY_PARTITION, events))
        if moved:
            log.warning("dataset %s: %d release(s) charged to ordinal partitions now count against every partition",
                        dataset, len(moved))

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
        partitions: Sequence[str] | Mapping[str, Sequence[Any]] | None = None,
        store_id: str | None = None,
    ) -> LedgerEntry:
        """Reserve ``events`` (a release's (ε, δ), stated for ``neighbouring``) for ``dataset`` under ``job_id``, on
        every partition it reads.

        ``partitions`` are the identities (:func:`partition_identities`) of the partitions the release reads, each
        charged ``events``; a mapping gives a partition its own events (a binary tree charges a partition one event
        per node that holds it). ``None`` charges every partition of the dataset (``*``: a release whose partitions
        are not known). The reservation is refused unless, for every partition it touches, the composition of the
        entries already counted on that partition (``*`` entries included) and this one stays within the total; the
        check and the insert are one transaction.

        If ``job_id`` already has an entry, it is returned when it is reserved (a re-run resumes it, and counts as
        one more attempt) or charged, and reserved again (with the budget check, one more attempt) when it was
        released or refused. A charged entry is returned unchanged, not counted as an attempt: the caller decides
        what it means (a release under a job id already charged is refused, and a refused run is no attempt of the
        job that was charged); a caller that goes on under the charge (a job resuming from the checkpoint of an
        attempt whose failure kept it) passes ``resume_charged=True``, which counts the attempt. A refusal over
        budget is recorded (status ``refused``, never counted) so that the history shows it. An entry with other
        parameters (partitions included) is an error, and changes nothing: a job id stands for one release.

        The dataset must have a budget (:meth:`init_dataset`); ``total_epsilon``/``total_delta``, when given, must
        be the recorded ones. A dataset without a recorded relation takes ``neighbouring``; otherwise the events
        count with the group size :func:`group_size_for` gives, and are refused when there is none.

        Raises
        ------
        BudgetExceededError
            If the composition on a partition would exceed the dataset's total (message: the partition, requested,
            spent, remaining, total).
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
        parts = _charged_parts(partitions, events, encoded)
        if (total_epsilon is None) != (total_delta is None):
            raise InvalidParameterError("give both total_epsilon and total_delta, or neither")
        refusal: BudgetExceededError | None = None
        with self._transaction() as db:
            if total_epsilon is not None and total_delta is not None:
                te, td = _check_total(total_epsilon, total_delta)
                self._ensure(db, dataset, te, td, None)
            k, budget = self._relation(db, dataset, neighbouring)
            existing = db.execute("SELECT * FROM entries WHERE dataset = ? AND job_id = ?",
                                  (dataset, job_id)).fetchone()
            if existing is not None:
                entry = self._entry(db, existing)
                same = (entry.mechanism == mechanism and math.isclose(entry.epsilon, epsilon, rel_tol=1e-12)
                        and math.isclose(entry.delta, delta, rel_tol=1e-12) and existing["events"] == encoded
                        and entry.neighbouring == neighbouring and self._parts_of(db, int(existing["id"])) == parts)
                if not same:
                    raise LedgerError(
                        f"job id '{job_id}' already has an entry for dataset '{dataset}' with other parameters "
                        f"({entry.mechanism}, epsilon={entry.epsilon:g}, delta={entry.delta:g}, "
                        f"{len(entry.partitions)} partition(s)); a job id stands for one release: give the run a new "
                        "job id"
                    )
                if entry.status == CHARGED and not resume_charged:
                    return entry  # unchanged: not an attempt unless the caller goes on under the charge
                if entry.status in _COUNTED:
                    db.execute("UPDATE entries SET attempts = attempts + 1, updated = ? WHERE id = ?",
                               (_now(), existing["id"]))
                    return self._get(db, dataset, job_id)
            refusal = self._check_budget(db, dataset, job_id, budget, k, parts, events, epsilon, delta)
            status, outcome = (REFUSED, "over budget") if refusal is not None else (RESERVED, "running")
            now = _now()
            if existing is not None:  # released or refused before: reserve again (or record the new refusal)
                db.execute("UPDATE entries SET status = ?, outcome = ?, attempts = attempts + 1, updated = ?, "
                           "group_size = ? WHERE id = ?", (status, outcome, now, k, existing["id"]))
            else:
                db.execute(
                    "INSERT INTO entries (dataset, job_id, job_name, mechanism, epsilon, delta, neighbouring, events,"
                    " status, outcome, attempts, created, updated, group_size, store_id) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?)",
                    (dataset, job_id, job_name or job_id, mechanism, epsilon, delta, neighbouring, encoded, status,
                     outcome, now, now, k, store_id),
                )
                new_id = db.execute("SELECT id FROM entries WHERE dataset = ? AND job_id = ?",
                                    (dataset, job_id)).fetchone()["id"]
                for part, part_events in parts:
                    db.execute("INSERT INTO charges (entry_id, partition, events) VALUES (?, ?, ?)",
                               (new_id, part, part_events))
            reserved = self._get(db, dataset, job_id)
        if refusal is not None:  # recorded (committed) for the history; nothing is counted
            raise refusal
        return reserved

    def _relation(self, db: Any, dataset: str, neighbouring: str) -> tuple[int, Any]:
        """(group size, the dataset's row) for events stated for ``neighbouring``; records the relation of a key
        that has none yet."""
        budget = db.execute("SELECT total_epsilon, total_delta, neighbouring FROM datasets WHERE dataset = ?",
                            (dataset,)).fetchone()
        if budget is None:
            raise self._no_budget(db, dataset)
        key_relation = budget["neighbouring"]
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
        return k, {"total_epsilon": float(budget["total_epsilon"]), "total_delta": float(budget["total_delta"]),
                   "neighbouring": key_relation}

    def _check_budget(self, db: Any, dataset: str, job_id: str, budget: Mapping[str, Any], k: int,
                      parts: list[tuple[str, str | None]], events: list[Any], epsilon: float,
                      delta: float) -> BudgetExceededError | None:
        """The refusal of a reservation of ``parts`` (``None``: it fits on every partition it touches)."""
        from dppca_dask.accounting import event_from_json

        total_eps, total_delta = budget["total_epsilon"], budget["total_delta"]
        books = self._books(db, dataset, total_delta, exclude_job=job_id)
        new: dict[str, tuple[str, list[Any]]] = {}
        for part, part_events in parts:
            decoded = None if part_events is None else [event_from_json(e) for e in json.loads(part_events)]
            new[part] = (part_events or "", _grouped(decoded if decoded is not None else events, k))
        counted_delta = max(sum(float(getattr(e, "delta", 0.0) or 0.0) for e in ev) for _, ev in new.values())
        if k == 1:
            counted_delta = delta
        if counted_delta >= total_delta and counted_delta > 0:
            return BudgetExceededError(
                f"requested delta={counted_delta:g} (for the key's relation) is not below the total "
                f"delta={total_delta:g} of dataset '{dataset}' in ledger '{self.path}'"
            )
        if EVERY_PARTITION in new:  # it touches every partition the dataset has (and those it will have)
            targets = sorted(set(books.by_partition) | set(new))
        else:
            targets = sorted(new)
        worst: tuple[float, float, str] | None = None
        for part in targets:
            mine = [new[p] for p in ([part] if part == EVERY_PARTITION else [part, EVERY_PARTITION]) if p in new]
            extra = ("|".join(m[0] for m in mine), [e for m in mine for e in m[1]])
            after = books.compose(part, extra)
            if worst is None or after > worst[0]:
                worst = (after, books.compose(part), part)
        assert worst is not None  # parts is never empty
        after, before, part = worst
        if after <= total_eps * (1 + _TOLERANCE):
            return None
        converted = "" if k == 1 else f" (counted with group privacy of size {k} for {budget['neighbouring']})"
        return BudgetExceededError(
            f"budget exceeded for dataset '{dataset}' in ledger '{self.path}' on partition '{part}' "
            f"({describe_partition(part)}: its rows' books): requested (epsilon={epsilon:g}, delta={delta:g}){converted}; spent epsilon="
            f"{before:.4g} of total epsilon={total_eps:g} on that partition (PLD at delta={total_delta:g}), "
            f"remaining {max(0.0, total_eps - before):.4g}; with this job the composition would be epsilon={after:.4g}"
        )

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
            return None if row is None else self._entry(db, row)

    def entries(self, datasets: Sequence[str]) -> list[LedgerEntry]:
        """Every entry of the listed dataset keys (a key the ledger does not hold has none), oldest first; unlike
        :meth:`budget` it composes nothing."""
        if isinstance(datasets, (str, bytes)):  # a string is a sequence of strings: its characters are not keys
            raise InvalidParameterError(f"entries takes a list of dataset keys; got the string {datasets!r}: "
                                        "pass [key]")
        keys = list(dict.fromkeys(datasets))
        rows: list[Any] = []
        with self._connection() as db:
            for start in range(0, len(keys), 500):  # below SQLite's limit on bound parameters
                chunk = keys[start : start + 500]
                rows.extend(db.execute(f"SELECT * FROM entries WHERE dataset IN ({', '.join('?' * len(chunk))})",
                                       chunk).fetchall())
            return [self._entry(db, r) for r in sorted(rows, key=lambda r: int(r["id"]))]

    def find(self, job_id: str) -> list[LedgerEntry]:
        """Every entry with this job id (one per dataset key)."""
        with self._connection() as db:
            rows = db.execute("SELECT * FROM entries WHERE job_id = ? ORDER BY id", (job_id,)).fetchall()
            return [self._entry(db, r) for r in rows]

    # -- reading -----------------------------------------------------------------------------------------------

    def budget(self, dataset: str) -> DatasetBudget:
        """The dataset's totals, what is spent on its worst-off partition (PLD and sum of ε), every partition's
        spend, and the history, oldest first."""
        with self._connection() as db:
            row = db.execute("SELECT * FROM datasets WHERE dataset = ?", (dataset,)).fetchone()
            if row is None:
                known = ", ".join(r["dataset"] for r in db.execute("SELECT dataset FROM datasets ORDER BY dataset"))
                raise LedgerError(f"no dataset '{dataset}' in ledger '{self.path}' (datasets: {known or 'none'})")
            rows = db.execute("SELECT * FROM entries WHERE dataset = ? ORDER BY id", (dataset,)).fetchall()
            entries = tuple(self._entry(db, r) for r in rows)
            books = self._books(db, dataset, float(row["total_delta"]))
        spends = tuple(books.spend(p) for p in books.partitions())
        worst = max(spends, key=lambda p: (p.spent_epsilon, p.sum_epsilon), default=None)
        return DatasetBudget(
            dataset=dataset,
            total_epsilon=float(row["total_epsilon"]),
            total_delta=float(row["total_delta"]),
            neighbouring=row["neighbouring"],
            spent_epsilon=0.0 if worst is None else worst.spent_epsilon,
            sum_epsilon=0.0 if worst is None else worst.sum_epsilon,
            sum_delta=0.0 if worst is None else worst.sum_delta,
            entries=entries,
            store_id=row["store_id"],
            partitions=spends,
            worst_partition=None if worst is None else worst.partition,
        )

    def copy_to(self, path: str | os.PathLike[str]) -> Ledger:
        """A consistent copy of this ledger in a new SQLite file ``path`` (a dry run tries its reservation there):
        SQLite's backup API for a SQLite ledger, the rows of one read-only transaction for a PostgreSQL one."""
        path = os.fspath(path)
        if not self.is_postgres:
            source = sqlite3.connect(f"file:{quote(os.path.abspath(self.path))}?mode=ro", uri=True)
            try:
                target = sqlite3.connect(path)
                try:
                    source.backup(target)
                finally:
                    target.close()
            finally:
                source.close()
            return Ledger(path)
        copy = Ledger.create(path)
        with self._connection() as db:
            rows = {table: db.execute(f"SELECT * FROM {table}").fetchall() for table in _TABLES}
        target = sqlite3.connect(path, isolation_level=None)
        try:
            target.execute("BEGIN IMMEDIATE")
            target.execute("DELETE FROM meta")
            for table in _TABLES:
                for row in rows[table]:
                    names = row.keys()
                    target.execute(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                                   [row[n] for n in names])
            target.execute("COMMIT")
        finally:
            target.close()
        return Ledger(copy.path)

    def counted_on(self, dataset: str, partition: str) -> list[Any]:
        """The events counted on ``partition`` of ``dataset`` (every reserved or charged entry charged to it or to
        every partition, converted to the key's relation), oldest entry first: what its books compose."""
        with self._connection() as db:
            row = db.execute("SELECT total_delta FROM datasets WHERE dataset = ?", (dataset,)).fetchone()
            if row is None:
                raise self._no_budget(db, dataset)
            books = self._books(db, dataset, float(row["total_delta"]))
        return [event for e in sorted(books.on(partition), key=lambda e: e[0]) for event in e[2]]

    # -- helpers -----------------------------------------------------------------------------------------------

    def _books(self, db: Any, dataset: str, total_delta: float, exclude_job: str | None = None) -> _Books:
        """The counted entries of ``dataset`` (but ``exclude_job``) on each partition, events converted to the
        key's relation."""
        from dppca_dask.accounting import event_from_json

        books = _Books(total_delta)
        rows = db.execute(
            "SELECT e.id AS id, e.job_id AS job_id, e.events AS events, e.group_size AS group_size, "
            "e.epsilon AS epsilon, e.delta AS delta, c.partition AS partition, c.events AS part_events "
            "FROM entries e JOIN charges c ON c.entry_id = e.id WHERE e.dataset = ? AND e.status IN (?, ?) "
            "ORDER BY e.id", (dataset, *_COUNTED)).fetchall()
        decoded: dict[str, list[Any]] = {}
        for r in rows:
            if r["job_id"] == exclude_job:
                continue
            text = r["part_events"] or r["events"]
            key = f"{int(r['group_size'])}:{text}"
            if key not in decoded:
                try:
                    decoded[key] = _grouped([event_from_json(e) for e in json.loads(text)], int(r["group_size"]))
                except Exception as exc:  # any decoding failure of a damaged row
                    raise self._damaged(r["job_id"], dataset, exc) from exc
            books.add(int(r["id"]), r["partition"], r["part_events"] or "", decoded[key], float(r["epsilon"]),
                      float(r["delta"]))
        return books

    def _parts_of(self, db: Any, entry_id: int) -> list[tuple[str, str | None]]:
        return sorted((r["partition"], r["events"]) for r in db.execute(
            "SELECT partition, events FROM charges WHERE entry_id = ?", (entry_id,)).fetchall())

    def _get(self, db: Any, dataset: str, job_id: str) -> LedgerEntry:
        row = db.execute("SELECT * FROM entries WHERE dataset = ? AND job_id = ?", (dataset, job_id)).fetchone()
        if row is None:
            raise LedgerError(f"no reservation for job '{job_id}' on dataset '{dataset}' in ledger '{self.path}'")
        return self._entry(db, row)

    def _damaged(self, job_id: str, dataset: str, exc: BaseException) -> LedgerError:
        return LedgerError(
            f"ledger '{self.path}' is damaged: the events of job '{job_id}' (dataset '{dataset}') cannot be read "
            f"({type(exc).__name__}); restore the ledger from a backup"
        )

    def _entry(self, db: Any, row: Any) -> LedgerEntry:
        from dppca_dask.accounting import event_from_json

        try:
            events = tuple(event_from_json(e) for e in json.loads(row["events"]))
        except Exception as exc:  # any decoding failure of a damaged row
            raise self._damaged(row["job_id"], row["dataset"], exc) from exc
        parts = tuple(p for p, _ in self._parts_of(db, int(row["id"])))
        return LedgerEntry(
            dataset=row["dataset"], job_id=row["job_id"], job_name=row["job_name"], mechanism=row["mechanism"],
            epsilon=float(row["epsilon"]), delta=float(row["delta"]), neighbouring=row["neighbouring"],
            events=events, status=row["status"], outcome=row["outcome"], attempts=int(row["attempts"]),
            created=row["created"], updated=row["updated"], first_release=row["first_release"],
            group_size=int(row["group_size"]), partitions=parts, store_id=row["store_id"],
        )
