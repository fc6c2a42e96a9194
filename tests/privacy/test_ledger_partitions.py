"""Invariant 11, one budget per population: a reservation is accepted exactly when, for every partition it touches,
the composition of everything counted on that partition's rows (releases of any kind, ``*`` releases included) and
this release stays within the dataset's total; after any sequence of releases no partition's books exceed it. The
ledger's decisions are checked against an independent recomputation of each partition's books, on both backends
(a SQLite file and a PostgreSQL database started by the tests).

Deterministic: the sequence of releases is drawn from a seeded generator; no statistical assertion."""

from __future__ import annotations

import numpy as np
import pytest

from dp_accounting import GaussianDpEvent

from dppca_dask.accounting import EpsilonDeltaDpEvent
from dppca_dask.errors import BudgetExceededError, LedgerError
from dppca_dask.ledger import EVERY_PARTITION, RESERVED, Ledger, compose_epsilon

ROW = "add/remove one row"
DELTA = 1e-5
DAYS = [f"t:2026-11-{d:02d}" for d in range(1, 9)]


def _independent(books: dict[str, list], partition: str, extra: list) -> float:
    """A partition's composition recomputed from this test's own record of what was accepted."""
    counted = books.get(partition, []) + (books.get(EVERY_PARTITION, []) if partition != EVERY_PARTITION else [])
    return compose_epsilon(counted + extra, DELTA)


@pytest.mark.parametrize(("seed", "gaussian", "total"), [(3, False, 1.5), (17, True, 3.0)], ids=["pure", "gaussian"])
def test_a_reservation_fits_on_every_partition_it_touches_or_is_refused(ledger_location: str, seed: int,
                                                                        gaussian: bool, total: float) -> None:
    rng = np.random.default_rng(seed)
    ledger = Ledger.create(ledger_location)
    ledger.init_dataset("ds", total_epsilon=total, total_delta=DELTA, neighbouring=ROW)
    books: dict[str, list] = {}
    accepted = refused = 0
    for n in range(18):
        kind = rng.integers(3)
        if kind == 0:  # a whole-store release: every partition it reads (all days so far)
            parts = list(DAYS)
        elif kind == 1:  # a window of consecutive days
            start = int(rng.integers(len(DAYS)))
            parts = DAYS[start : start + int(rng.integers(1, 4))]
        else:  # a release whose partitions are not known: every partition
            parts = [EVERY_PARTITION]
        # one event kind per run (the PLD of a mix is slow to compose, and adds nothing to the rule)
        events = ([GaussianDpEvent(float(rng.choice([3.0, 6.0])))] if gaussian
                  else [EpsilonDeltaDpEvent(float(rng.choice([0.2, 0.35, 0.5])))])
        targets = sorted(set(books) | {EVERY_PARTITION} | set(DAYS)) if parts == [EVERY_PARTITION] else parts
        fits = all(_independent(books, p, events) <= total * (1 + 1e-9) for p in targets)
        job = f"job-{n}"
        try:
            entry = ledger.reserve("ds", job, epsilon=0.5, delta=0.0, events=events, mechanism="m",
                                   neighbouring=ROW, partitions=parts)
        except BudgetExceededError as exc:
            assert not fits, (n, parts, str(exc))
            assert ledger.entry("ds", job).status == "refused"  # recorded, counted nowhere
            refused += 1
            continue
        assert fits, (n, parts)
        assert entry.status == RESERVED and entry.partitions == tuple(sorted(parts))
        for p in parts:
            books.setdefault(p, []).extend(events)
        if rng.integers(2):
            ledger.charge("ds", job)
        accepted += 1
    assert accepted >= 3 and refused >= 3  # both decisions were exercised
    budget = ledger.budget("ds")
    recomputed = {p: _independent(books, p, []) for p in sorted(set(books) - {EVERY_PARTITION}) or [EVERY_PARTITION]}
    assert {p.partition: p.spent_epsilon for p in budget.partitions} == pytest.approx(recomputed)
    assert budget.spent_epsilon == pytest.approx(max(recomputed.values()))
    assert budget.spent_epsilon <= total * (1 + 1e-9)


def test_releases_of_any_kind_compose_on_the_rows_they_share(ledger_location: str) -> None:
    """The issue's case: window releases of (0.8) over two days, then a whole-store release: the day both read is
    over the total and the whole-store release is refused, though each key alone had room."""
    ledger = Ledger.create(ledger_location)
    ledger.init_dataset("ds", total_epsilon=1.0, total_delta=1e-5, neighbouring=ROW)
    event = [EpsilonDeltaDpEvent(0.8)]
    ledger.reserve("ds", "night-1", epsilon=0.8, delta=0.0, events=event, mechanism="sliding-window",
                   neighbouring=ROW, partitions=DAYS[:2])
    with pytest.raises(BudgetExceededError, match="on partition 't:2026-11-01'"):
        ledger.reserve("ds", "whole", epsilon=0.8, delta=0.0, events=event, mechanism="analyze-gauss",
                       neighbouring=ROW, partitions=DAYS[:4])
    with pytest.raises(BudgetExceededError, match="on partition 't:2026-11-01'"):  # every partition: day 1 too
        ledger.reserve("ds", "unknown", epsilon=0.8, delta=0.0, events=event, mechanism="pca", neighbouring=ROW)
    ledger.reserve("ds", "night-3", epsilon=0.8, delta=0.0, events=event, mechanism="sliding-window",
                   neighbouring=ROW, partitions=DAYS[2:4])  # other rows: room
    assert ledger.budget("ds").spent_epsilon == pytest.approx(0.8, rel=1e-3)


def test_ordinal_partitions_carry_their_spending_to_every_partition_of_a_new_store(ledger_location: str) -> None:
    """An unstamped store's partitions are named by ordinal; when the key moves to another store (allowed), the
    ordinals no longer name the same rows, so their charges count against every partition; stamped days keep their
    own books."""
    ledger = Ledger.create(ledger_location)
    ledger.init_dataset("ds", total_epsilon=1.0, total_delta=1e-5, neighbouring=ROW)
    ledger.check_store("ds", "store-a")
    event = [EpsilonDeltaDpEvent(0.6)]
    ledger.reserve("ds", "first", epsilon=0.6, delta=0.0, events=event, mechanism="m", neighbouring=ROW,
                   partitions=["#0"])
    ledger.reserve("ds", "day", epsilon=0.6, delta=0.0, events=event, mechanism="m", neighbouring=ROW,
                   partitions=["t:2026-11-01"])
    ledger.reserve("ds", "other-rows", epsilon=0.6, delta=0.0, events=event, mechanism="m", neighbouring=ROW,
                   partitions=["#1"])
    ledger.charge("ds", "other-rows")
    with pytest.raises(LedgerError, match="was budgeted on store store-a"):
        ledger.check_store("ds", "store-b")
    ledger.check_store("ds", "store-b", allow_new_store=True)
    assert ledger.entry("ds", "first").partitions == (EVERY_PARTITION,)
    assert ledger.entry("ds", "day").partitions == ("t:2026-11-01",)
    with pytest.raises(BudgetExceededError):  # partition #5 of the new store may hold the rows of the old #0
        ledger.reserve("ds", "new", epsilon=0.6, delta=0.0, events=event, mechanism="m", neighbouring=ROW,
                       partitions=["#5"])
    with pytest.raises(LedgerError, match="never refunded"):  # invariant 6: a charge stays
        ledger.release("ds", "other-rows")
