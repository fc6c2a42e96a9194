"""The SQLite privacy-budget ledger: reservations, charges, PLD composition, refusals and races between processes."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import pytest
from ledger_race import race

from dppca_dask.accounting import EpsilonDeltaDpEvent, epsilon_for
from dppca_dask.api import plan_release
from dppca_dask.errors import BudgetExceededError, InvalidParameterError, LedgerError
from dppca_dask.ledger import CHARGED, REFUSED, RELEASED, RESERVED, Ledger

ROW = "add/remove one row"


def _new(path, *, dataset: str = "ds", total=(1.0, 1e-6), relation: str | None = None) -> Ledger:
    """A new ledger (as `budget init` makes it) with one dataset key."""
    ledger = Ledger.create(path)
    ledger.init_dataset(dataset, total_epsilon=total[0], total_delta=total[1], neighbouring=relation)
    return ledger


def _reserve(ledger: Ledger, job: str, events: list, *, eps: float, delta: float = 0.0, total=(1.0, 1e-6),
             mechanism: str = "test", neighbouring: str = ROW):
    return ledger.reserve("ds", job, epsilon=eps, delta=delta, events=events, mechanism=mechanism,
                          neighbouring=neighbouring, total_epsilon=total[0], total_delta=total[1])


def test_reserve_charge_and_show(ledger_location: str) -> None:
    ledger = _new(ledger_location)
    entry = _reserve(ledger, "a@2026-01-01", [EpsilonDeltaDpEvent(0.4)], eps=0.4)
    assert entry.status == RESERVED and entry.outcome == "running" and entry.attempts == 1
    budget = ledger.budget("ds")
    assert budget.spent_epsilon == pytest.approx(0.4, rel=1e-3)  # reservations count as spent
    charged = ledger.charge("ds", "a@2026-01-01")
    assert charged.status == CHARGED and charged.outcome == "succeeded"
    again = Ledger(ledger_location).budget("ds")  # durable: another handle sees it
    assert [e.job_id for e in again.entries] == ["a@2026-01-01"]
    assert again.sum_epsilon == pytest.approx(0.4)
    assert again.remaining_epsilon == pytest.approx(1.0 - again.spent_epsilon)
    assert again.to_dict()["history"][0]["status"] == CHARGED


def test_entries_of_many_keys_oldest_first_without_composing(ledger_location: str) -> None:
    ledger = _new(ledger_location, total=(100.0, 1e-6))
    keys = [f"ds/partition/s:{i}" for i in range(1200)]  # more than one query's worth of bound parameters
    for key in (keys[1100], keys[3]):
        ledger.init_dataset(key, total_epsilon=100.0, total_delta=1e-6)
        ledger.reserve(key, "a", epsilon=0.1, delta=0.0, events=[EpsilonDeltaDpEvent(0.1)], mechanism="test",
                       neighbouring=ROW)
    _reserve(ledger, "b", [EpsilonDeltaDpEvent(0.1)], eps=0.1, total=(100.0, 1e-6))
    found = ledger.entries(keys + ["missing", keys[3]])
    assert [(e.dataset, e.job_id) for e in found] == [(keys[1100], "a"), (keys[3], "a")]
    assert ledger.entries([]) == []


def test_entries_refuses_one_key_given_as_a_string(ledger_location: str) -> None:
    # A string is a sequence of strings: its characters would be read as keys (other datasets' entries).
    ledger = _new(ledger_location, total=(100.0, 1e-6))
    for key in ("a", "b"):
        ledger.init_dataset(key, total_epsilon=100.0, total_delta=1e-6)
        ledger.reserve(key, "j", epsilon=0.1, delta=0.0, events=[EpsilonDeltaDpEvent(0.1)], mechanism="test",
                       neighbouring=ROW)
    with pytest.raises(InvalidParameterError, match="a list of dataset keys"):
        ledger.entries("ab")
    assert [e.dataset for e in ledger.entries(["ab"])] == []


def test_refusal_names_requested_spent_remaining_and_total_and_is_recorded(ledger_location: str) -> None:
    ledger = _new(ledger_location)
    _reserve(ledger, "first", [EpsilonDeltaDpEvent(0.7)], eps=0.7)
    with pytest.raises(BudgetExceededError, match=r"requested \(epsilon=0.5.*spent epsilon=0\.7.*total epsilon=1"
                                                  r".*remaining 0\.3") as info:
        _reserve(ledger, "second", [EpsilonDeltaDpEvent(0.5)], eps=0.5)
    assert info.value.exit_code == 3
    budget = ledger.budget("ds")
    assert [(e.job_id, e.status) for e in budget.entries] == [("first", RESERVED), ("second", REFUSED)]
    assert budget.sum_epsilon == pytest.approx(0.7)  # the refusal is history only
    # A refused job id can be tried again later; it is checked again (and refused again here).
    with pytest.raises(BudgetExceededError):
        _reserve(ledger, "second", [EpsilonDeltaDpEvent(0.5)], eps=0.5)
    assert ledger.entry("ds", "second").attempts == 2


def test_pld_composition_is_tighter_than_adding_epsilons(ledger_location: str) -> None:
    """Four (0.5, 1e-7) adaptive-power runs fit a total of (1, 1e-6): their sum of ε is 2."""
    plan = plan_release(300, epsilon=0.5, delta=1e-7, mechanism="adaptive-power")
    ledger = _new(ledger_location)
    for i in range(4):
        _reserve(ledger, f"run-{i}", list(plan.events), eps=0.5, delta=1e-7)
    budget = ledger.budget("ds")
    assert budget.sum_epsilon == pytest.approx(2.0)
    assert budget.spent_epsilon <= 1.0
    fine = epsilon_for(list(plan.events) * 4, delta=1e-6)  # the accountant's own, finer grid
    assert fine <= budget.spent_epsilon <= fine * 1.005  # the ledger's bounded grid rounds up, never down
    with pytest.raises(BudgetExceededError):  # a fifth one does not fit
        _reserve(ledger, "run-4", list(plan.events), eps=0.5, delta=1e-7)


def test_release_returns_a_reservation_but_never_a_charge(ledger_location: str) -> None:
    ledger = _new(ledger_location)
    _reserve(ledger, "a", [EpsilonDeltaDpEvent(0.9)], eps=0.9)
    released = ledger.release("ds", "a")
    assert released.status == RELEASED and released.outcome == "failed-before-noise"
    assert ledger.budget("ds").spent_epsilon == 0.0
    _reserve(ledger, "b", [EpsilonDeltaDpEvent(0.9)], eps=0.9)  # the returned budget is available again
    ledger.charge("ds", "b", outcome="failed")
    with pytest.raises(LedgerError, match="never refunded"):
        ledger.release("ds", "b")
    assert ledger.entry("ds", "b").status == CHARGED
    # A released job id reserves again, with the budget check, which now refuses it.
    with pytest.raises(BudgetExceededError):
        _reserve(ledger, "a", [EpsilonDeltaDpEvent(0.9)], eps=0.9)


def test_same_job_id_resumes_its_reservation_instead_of_charging_twice(ledger_location: str) -> None:
    ledger = _new(ledger_location)
    events = [EpsilonDeltaDpEvent(0.6)]
    first = _reserve(ledger, "nightly@2026-01-01", events, eps=0.6)
    again = _reserve(ledger, "nightly@2026-01-01", events, eps=0.6)  # 0.6 + 0.6 would not fit
    assert again.status == RESERVED and again.attempts == 2 and again.created == first.created
    assert ledger.budget("ds").sum_epsilon == pytest.approx(0.6)
    with pytest.raises(LedgerError, match="other parameters"):
        _reserve(ledger, "nightly@2026-01-01", [EpsilonDeltaDpEvent(0.5)], eps=0.5)


def test_a_charged_entry_is_returned_unchanged_and_counted_only_when_resumed(ledger_location: str) -> None:
    """Finding a charged job id is no attempt of it: the caller decides (a release under a charged id is refused,
    and the history must not show the refused run as a second attempt). A caller that goes on under the charge
    (a job resuming its checkpoint after a failure that kept it) says so, and that attempt counts."""
    ledger = _new(ledger_location)
    events = [EpsilonDeltaDpEvent(0.6)]
    _reserve(ledger, "nightly@2026-01-01", events, eps=0.6)
    charged = ledger.charge("ds", "nightly@2026-01-01", outcome="failed")
    again = _reserve(ledger, "nightly@2026-01-01", events, eps=0.6)
    assert again == charged and again.attempts == 1
    with pytest.raises(LedgerError, match="other parameters"):  # a reuse with other parameters changes nothing
        _reserve(ledger, "nightly@2026-01-01", [EpsilonDeltaDpEvent(0.5)], eps=0.5)
    assert ledger.entry("ds", "nightly@2026-01-01") == charged
    resumed = ledger.reserve("ds", "nightly@2026-01-01", epsilon=0.6, delta=0.0, events=events, mechanism="test",
                             neighbouring=ROW, resume_charged=True)
    assert (resumed.status, resumed.outcome, resumed.attempts) == (CHARGED, "failed", 2)
    assert ledger.budget("ds").sum_epsilon == pytest.approx(0.6)


def test_totals_and_neighbouring_relation_are_fixed_per_dataset(ledger_location: str) -> None:
    ledger = _new(ledger_location)
    _reserve(ledger, "a", [EpsilonDeltaDpEvent(0.1)], eps=0.1)
    with pytest.raises(LedgerError, match=r"records a total of \(epsilon=1, delta=1e-06\)"):
        _reserve(ledger, "b", [EpsilonDeltaDpEvent(0.1)], eps=0.1, total=(2.0, 1e-6))
    with pytest.raises(LedgerError, match="implies nothing about the key's relation"):
        _reserve(ledger, "c", [EpsilonDeltaDpEvent(0.1)], eps=0.1, neighbouring="one entry changes by at most 1")
    with pytest.raises(LedgerError, match="no budget.*budget init --ledger .* --dataset other"):
        ledger.reserve("other", "x", epsilon=0.1, delta=0.0, events=[EpsilonDeltaDpEvent(0.1)], mechanism="t",
                       neighbouring=ROW)
    with pytest.raises(LedgerError, match="no dataset 'other'.*datasets: ds"):
        ledger.budget("other")
    with pytest.raises(InvalidParameterError, match="total_epsilon must be finite"):
        ledger.ensure_dataset("z", total_epsilon=0, total_delta=1e-6)
    with pytest.raises(BudgetExceededError, match="not below the total delta"):
        _reserve(ledger, "d", [EpsilonDeltaDpEvent(0.1, 1e-6)], eps=0.1, delta=1e-6)


def test_missing_ledger_and_foreign_schema_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="does not exist.*dppca-dask budget init --ledger"):
        Ledger(tmp_path / "nope.sqlite")
    assert not (tmp_path / "nope.sqlite").exists()
    path = tmp_path / "old.sqlite"
    Ledger.create(path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(LedgerError, match="schema version 99"):
        Ledger(path)
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not a database" * 100)
    with pytest.raises(LedgerError, match="garbage.sqlite"):
        Ledger(garbage)


def test_processes_racing_for_a_budget_never_overspend(tmp_path: Path, ledger_location: str) -> None:
    """Eight processes reserve (0.3, 0) at the same moment against a total of (1, 1e-6), in a SQLite ledger and in a
    PostgreSQL one: exactly as many succeed as would one after the other on a SQLite ledger, and the ledger's
    figures agree with an independent recomputation (dp_accounting's PLD over the reserved events)."""
    sequential = _new(tmp_path / "sequential.sqlite")
    fits = 0
    for i in range(8):
        try:
            _reserve(sequential, f"job-{i}", [EpsilonDeltaDpEvent(0.3)], eps=0.3)
            fits += 1
        except BudgetExceededError:
            pass
    assert 3 <= fits < 8

    path = ledger_location
    _new(path)
    ctx = multiprocessing.get_context("spawn")  # a new process, without this one's threads, forks the eight
    report = ctx.Queue()
    launcher = ctx.Process(target=race, args=(path, 8, report))
    launcher.start()
    outcomes, exit_codes = report.get(timeout=180)
    launcher.join(timeout=60)
    assert launcher.exitcode == 0 and exit_codes == [0] * 8
    assert sorted(job for job, _ in outcomes) == [f"job-{i}" for i in range(8)]
    assert sum(1 for _, status in outcomes if status == "reserved") == fits
    budget = Ledger(path).budget("ds")
    reserved = [e for e in budget.entries if e.status == RESERVED]
    assert len(reserved) == fits and budget.spent_epsilon <= 1.0
    independent = epsilon_for([event for e in reserved for event in e.events], delta=1e-6)
    assert budget.spent_epsilon == pytest.approx(independent, abs=2e-4)  # the ledger's grid rounds up, at most one step
    assert budget.spent_epsilon >= independent - 1e-9
