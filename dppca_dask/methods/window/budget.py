"""Partition-scoped budget: a window release charges each partition it reads, under the dataset key's total.

A window release touches only the rows in its window, so its cost is charged to the partitions it reads: each
partition ``i`` of the store has its own ledger key ``<dataset>/partition/<store id>:<i>`` with the dataset key's
total, a partition's spend is the composition of the releases that read it, and a release is refused if any
partition of its window would exceed the total. This is **event-level** privacy: one row is one event, and a
person with rows in many partitions is protected only by group privacy over their rows (the ledger does not bound
that).

The reservation is made after the window's partitions are checked and before any value is read into an aggregate;
it is returned only if the release fails before its noise is drawn, and charged once the noise is drawn.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dppca_dask.accounting import ADD_REMOVE_ROW
from dppca_dask.errors import BudgetExceededError, InvalidParameterError, LedgerError
from dppca_dask.storage import MatrixStore

__all__ = ["PARTITION_SCOPE", "PartitionReservation", "partition_key", "reserve_each", "reserve_partitions"]

#: Name of the ledger scope of window releases.
PARTITION_SCOPE = "partition"

#: Mechanism name recorded in the ledger for window releases (also the job mechanism's name).
MECHANISM = "sliding-window"


def partition_key(dataset: str, store: MatrixStore, index: int) -> str:
    """The ledger key of partition ``index`` of ``store`` under ``dataset`` (the store's random id keeps a
    re-ingested store from inheriting another's spend)."""
    return f"{dataset}/{PARTITION_SCOPE}/{store.store_id}:{int(index)}"


@dataclass
class PartitionReservation:
    """The reservations of one window release, one per partition key; charge or return them together."""

    ledger: Any
    job_id: str
    keys: tuple[str, ...]

    def charge(self, *, outcome: str = "succeeded") -> None:
        for key in self.keys:
            self.ledger.charge(key, self.job_id, outcome=outcome)

    def note_release(self) -> None:
        """Record on every key that the release is about to write its noisy values outside its process (the binary
        tree's state): from then on they are the ones later releases use, and the ledger says so."""
        for key in self.keys:
            self.ledger.note_first_release(key, self.job_id)

    def give_back(self) -> None:
        """Return every reservation (only before the release's noise is drawn)."""
        for key in self.keys:
            self.ledger.release(key, self.job_id, outcome="failed-before-noise")

    def close_failed(self, *, drawn: bool) -> None:
        """Close the reservations of a release that failed: charged (outcome ``failed``) once any of its noise was
        drawn, since the budget then stays spent (invariant 6); returned otherwise."""
        if drawn:
            self.charge(outcome="failed")
        else:
            self.give_back()


def _already_charged(job_id: str, key: str) -> LedgerError:
    # The ledger returns a charged entry unchanged (not as an attempt), but this release draws fresh noise: under the
    # same id it would go uncounted on this partition.
    return LedgerError(
        f"job id '{job_id}' is already charged on partition key '{key}'; a release draws fresh noise, which that "
        "charge does not count: give the release a new job id"
    )


def reserve_partitions(
    ledger: Any,
    dataset: str,
    job_id: str,
    *,
    store: MatrixStore,
    partitions: Sequence[int],
    epsilon: float,
    delta: float,
    events: Sequence[Any],
) -> PartitionReservation:
    """Reserve ``events`` on every partition key of the window, or none of them.

    The dataset key must have a budget (``dppca-dask budget init``); its totals become each partition key's.

    Raises
    ------
    BudgetExceededError
        A partition of the window would exceed the total; reservations already made for this release are
        returned, and the message names the partition's key.
    LedgerError
        No budget for ``dataset``, a job id reused with other parameters, or a job id already charged on one of
        the partitions (a release draws fresh noise; a re-run of a job that stopped before its charge resumes its
        reservations): that one is refused before anything is reserved, and no entry counts it as an attempt.
        Reservations already made for this release are returned.
    """
    return reserve_each(ledger, dataset, job_id, store=store,
                        charges={int(i): (epsilon, delta, tuple(events)) for i in partitions})


def reserve_each(
    ledger: Any,
    dataset: str,
    job_id: str,
    *,
    store: MatrixStore,
    charges: Mapping[int, tuple[float, float, Sequence[Any]]],
    mechanism: str = MECHANISM,
) -> PartitionReservation:
    """Reserve, on each partition ``i`` of ``charges``, its own ``(ε, δ, events)``, or nothing at all.

    What :func:`reserve_partitions` does when a release charges its partitions different events (the binary tree
    charges a partition one event per node drawn that holds it, under its own ``mechanism`` name). Errors as
    :func:`reserve_partitions`.
    """
    from dppca_dask.ledger import CHARGED, Ledger

    if not isinstance(ledger, Ledger):
        ledger = Ledger(ledger)
    if not isinstance(job_id, str) or not job_id:
        raise InvalidParameterError(f"job_id must be a non-empty string; got {job_id!r}")
    if store.store_id is None:
        raise InvalidParameterError(
            f"'{store.path}' has no store id (an AnnData store opened directly); partition-scoped budgets need a "
            "dppca_dask store: `dppca-dask ingest`"
        )
    budget = ledger.budget(dataset)
    keys = {index: partition_key(dataset, store, index) for index in charges}
    for key in keys.values():  # refused before anything is reserved: the refused run leaves no entry, no attempt
        earlier = ledger.entry(key, job_id)
        if earlier is not None and earlier.status == CHARGED:
            raise _already_charged(job_id, key)
    done: list[str] = []
    try:
        for index, (epsilon, delta, events) in charges.items():
            key = keys[index]
            ledger.init_dataset(key, total_epsilon=budget.total_epsilon, total_delta=budget.total_delta,
                                neighbouring=ADD_REMOVE_ROW)
            entry = ledger.reserve(key, job_id, epsilon=epsilon, delta=delta, events=list(events),
                                   mechanism=mechanism, neighbouring=ADD_REMOVE_ROW, job_name=job_id)
            if entry.status == CHARGED:  # charged since the check above (another process): returned unchanged
                raise _already_charged(job_id, key)
            done.append(key)
    except (BudgetExceededError, LedgerError):
        for key in done:
            ledger.release(key, job_id, outcome="failed-before-noise")
        raise
    return PartitionReservation(ledger, job_id, tuple(done))
