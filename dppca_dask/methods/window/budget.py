"""Partition-scoped budget: a window release charges each partition it reads, in its dataset key's books.

A window release touches only the rows in its window, so its cost is charged to the partitions it reads: it is one
entry of the dataset key, charged to those partitions by their public identity (their day; see
:func:`dppca_dask.ledger.partition_identity`), in the same books as the dataset's whole-store releases. A release is
refused if any partition of its window would exceed the dataset's total with everything already charged to it
(window, tree, histogram and whole-store releases alike), all partitions checked in one transaction. This is
**event-level** privacy: one row is one event, and a person with rows in many partitions is protected only by group
privacy over their rows (the ledger does not bound that).

The reservation is made after the window's partitions are checked and before any value is read into an aggregate;
it is returned only if the release fails before its noise is drawn, and charged once the noise is drawn (a job
defers the charge until its result is pending: :mod:`~dppca_dask.methods.window.job`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dppca_dask.accounting import ADD_REMOVE_ROW
from dppca_dask.errors import InvalidParameterError, LedgerError
from dppca_dask.storage import MatrixStore

__all__ = ["PartitionReservation", "partition_key", "reserve_each", "reserve_partitions"]

#: Mechanism name recorded in the ledger for window releases (also the job mechanism's name).
MECHANISM = "sliding-window"


def partition_key(dataset: str, store: MatrixStore, index: int) -> str:
    """The ledger identity of partition ``index`` of ``store`` (:func:`~dppca_dask.ledger.partition_identity`: its
    day, or its ordinal when unstamped), which every release of ``dataset`` reading it is charged to."""
    from dppca_dask.ledger import partition_identities

    return partition_identities(store, [int(index)])[0]


@dataclass
class PartitionReservation:
    """The reservation of one window release: one entry of the dataset key, on every partition it reads."""

    ledger: Any
    job_id: str
    keys: tuple[str, ...]
    """The partition identities it is charged to."""
    dataset: str = ""

    def charge(self, *, outcome: str = "succeeded") -> None:
        self.ledger.charge(self.dataset, self.job_id, outcome=outcome)

    def note_release(self) -> None:
        """Record that the release is about to write its noisy values outside its process (the binary tree's
        state): from then on they are the ones later releases use, and the ledger says so."""
        self.ledger.note_first_release(self.dataset, self.job_id)

    def give_back(self) -> None:
        """Return the reservation (only before the release's noise is drawn)."""
        self.ledger.release(self.dataset, self.job_id, outcome="failed-before-noise")

    def close_failed(self, *, drawn: bool) -> None:
        """Close the reservation of a release that failed: charged (outcome ``failed``) once any of its noise was
        drawn, since the budget then stays spent (invariant 6); returned otherwise."""
        if drawn:
            self.charge(outcome="failed")
        else:
            self.give_back()


def _already_charged(job_id: str, dataset: str) -> LedgerError:
    # The ledger returns a charged entry unchanged (not as an attempt), but this release draws fresh noise: under the
    # same id it would go uncounted.
    return LedgerError(
        f"job id '{job_id}' is already charged to the partitions of '{dataset}'; a release draws fresh noise, which "
        "that charge does not count: give the release a new job id"
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
    """Reserve ``events`` on every partition of the window (one entry of ``dataset``, one transaction).

    Raises
    ------
    BudgetExceededError
        A partition of the window would exceed the dataset's total; the message names the partition.
    LedgerError
        No budget for ``dataset``, a job id reused with other parameters, or a job id already charged (a release
        draws fresh noise; a re-run of a job that stopped before its charge resumes its reservation): refused
        before anything is reserved, and no entry counts it as an attempt.
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
    """Reserve, on each partition ``i`` of ``charges``, its own ``(ε, δ, events)``: one entry of ``dataset``
    whose headline (ε, δ, events) is the largest partition's, in one transaction; or nothing at all.

    What :func:`reserve_partitions` does when a release charges its partitions different events (the binary tree
    charges a partition one event per node drawn that holds it, under its own ``mechanism`` name). Partitions of
    one identity (one day split over several partitions) are charged the largest of their events. Errors as
    :func:`reserve_partitions`.
    """
    from dppca_dask.ledger import CHARGED, Ledger, partition_identities

    if isinstance(ledger, (str, os.PathLike)):
        ledger = Ledger(ledger)
    if not isinstance(job_id, str) or not job_id:
        raise InvalidParameterError(f"job_id must be a non-empty string; got {job_id!r}")
    if not charges:
        raise InvalidParameterError("a window release reads at least one partition; got none")
    earlier = ledger.entry(dataset, job_id)
    if earlier is not None and earlier.status == CHARGED:  # refused before anything: no entry, no attempt
        raise _already_charged(job_id, dataset)
    indices = sorted(int(i) for i in charges)
    names = dict(zip(indices, partition_identities(store, indices)))
    per: dict[str, tuple[float, float, tuple[Any, ...]]] = {}
    for index in indices:
        epsilon, delta, events = charges[index]
        if names[index] not in per or (epsilon, len(events)) > (per[names[index]][0], len(per[names[index]][2])):
            per[names[index]] = (float(epsilon), float(delta), tuple(events))
    head = max(per.values(), key=lambda c: (c[0], len(c[2])))
    entry = ledger.reserve(dataset, job_id, epsilon=head[0], delta=head[1], events=list(head[2]),
                           mechanism=mechanism, neighbouring=ADD_REMOVE_ROW, job_name=job_id,
                           partitions={name: c[2] for name, c in per.items()}, store_id=store.store_id)
    if entry.status == CHARGED:  # charged since the check above (another process): returned unchanged
        raise _already_charged(job_id, dataset)
    return PartitionReservation(ledger, job_id, tuple(sorted(per)), dataset)
