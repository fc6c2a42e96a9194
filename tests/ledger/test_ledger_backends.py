"""The two ledger backends behave alike: `budget init/show/resolve` on a SQLite file and on a PostgreSQL database
(started by the tests) give the same output for the same history; a PostgreSQL ledger is created once and never by a
run, fails closed on any error (nothing reserved), keeps job locks in the database and never prints a password."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from dppca_dask.accounting import EpsilonDeltaDpEvent
from dppca_dask.cli import main
from dppca_dask.errors import BudgetExceededError, LedgerError
from dppca_dask.ledger import CHARGED, RELEASED, RESERVED, Ledger

ROW = "add/remove one row"


def _history(ledger: str) -> None:
    """One history, written through the API: a window release on two days, a whole-store release, a refusal and a
    stale reservation."""
    assert main(["budget", "init", "--ledger", ledger, "--dataset", "ds", "--total-epsilon", "1",
                 "--total-delta", "1e-6"]) == 0
    book = Ledger(ledger)
    event = [EpsilonDeltaDpEvent(0.3)]
    book.reserve("ds", "night", epsilon=0.3, delta=0.0, events=event, mechanism="sliding-window", neighbouring=ROW,
                 partitions=["t:2026-11-01", "t:2026-11-02"])
    book.charge("ds", "night")
    book.reserve("ds", "whole", epsilon=0.3, delta=0.0, events=event, mechanism="analyze-gauss", neighbouring=ROW,
                 partitions=["t:2026-11-01", "t:2026-11-02", "t:2026-11-03"])
    book.charge("ds", "whole")
    with pytest.raises(BudgetExceededError):
        book.reserve("ds", "big", epsilon=0.6, delta=0.0, events=[EpsilonDeltaDpEvent(0.6)], mechanism="m",
                     neighbouring=ROW, partitions=["t:2026-11-02"])
    book.reserve("ds", "stale", epsilon=0.1, delta=0.0, events=[EpsilonDeltaDpEvent(0.1)], mechanism="m",
                 neighbouring=ROW, partitions=["t:2026-11-03"])


def _normalised(text: str, ledger: str) -> str:
    """``budget show`` output with the ledger's name and the times taken out (they differ by backend and run)."""
    text = text.replace(Ledger(ledger).path, "LEDGER")
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", "TIME", text)


def test_budget_show_and_resolve_are_the_same_on_both_backends(tmp_path: Path, postgres_url: str,
                                                               capsys: Any) -> None:
    shown = []
    for ledger in (str(tmp_path / "ledger.sqlite"), postgres_url):
        _history(ledger)
        capsys.readouterr()
        assert main(["budget", "show", "--ledger", ledger]) == 0
        shown.append(_normalised(capsys.readouterr().out, ledger))
        assert main(["budget", "resolve", "--ledger", ledger, "--job-id", "stale"]) == 0
        assert main(["budget", "resolve", "--ledger", ledger, "--job-id", "night"]) == 2  # charged: never returned
        assert Ledger(ledger).entry("ds", "stale").status == RELEASED
        assert Ledger(ledger).entry("ds", "night").status == CHARGED
    assert shown[0] == shown[1]
    assert "worst-off partition epsilon=0.6 of 1 (2026-11-01)" in shown[1]  # days 1 and 2 hold both releases


def test_a_postgres_ledger_is_created_once_and_never_by_a_run(postgres_url: str, capsys: Any) -> None:
    with pytest.raises(LedgerError, match="no ledger in .*budget init"):
        Ledger(postgres_url)
    assert not Ledger.exists(postgres_url)
    Ledger.create(postgres_url)
    assert Ledger.exists(postgres_url)
    with pytest.raises(LedgerError, match="already holds a ledger"):
        Ledger.create(postgres_url)
    assert main(["budget", "migrate", "--ledger", postgres_url]) == 0  # nothing to do: it starts at this version
    assert "nothing to do" in capsys.readouterr().out


def test_a_postgres_ledger_fails_closed_and_hides_its_password(postgres_url: str, capsys: Any) -> None:
    head, _, query = postgres_url.partition("?")
    missing = f"{head.rsplit('/', 1)[0]}/no_such_database?{query}"
    assert main(["budget", "show", "--ledger", missing]) == 2
    assert "cannot connect to ledger" in capsys.readouterr().err
    ledger = Ledger.create(postgres_url)
    ledger.init_dataset("ds", total_epsilon=1.0, total_delta=1e-6)
    # A failure inside a transaction, after the entry's row was written (the database refuses its partition row),
    # rolls everything back: nothing is reserved, no entry is left, and the error is the ledger's (exit 2).
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as raw:
        raw.execute("ALTER TABLE dppca_ledger.charges ADD CONSTRAINT refuse_one CHECK (partition <> 't:bad')")
    with pytest.raises(LedgerError, match="refuse_one"):
        ledger.reserve("ds", "bad", epsilon=0.1, delta=0.0, events=[EpsilonDeltaDpEvent(0.1)], mechanism="m",
                       neighbouring=ROW, partitions=["t:good", "t:bad"])
    assert ledger.entry("ds", "bad") is None and ledger.budget("ds").spent_epsilon == 0.0
    secret = postgres_url.replace("postgres:@", "postgres:s3cret@")
    with pytest.raises(LedgerError) as raised:
        Ledger(secret.replace("/ledger_", "/missing_"))
    assert "s3cret" not in str(raised.value) and "***" in str(raised.value)


def test_a_postgres_ledgers_job_lock_is_held_in_the_database(postgres_url: str) -> None:
    from dppca_dask.jobs.steps import job_lock

    ledger = Ledger.create(postgres_url)
    with job_lock(ledger, "ds", "job@2026-11-01"):
        with pytest.raises(LedgerError, match="already running in another process"):
            with job_lock(Ledger(postgres_url), "ds", "job@2026-11-01"):
                pass
        with job_lock(ledger, "ds", "other@2026-11-01"):  # another job: its own lock
            pass
    with job_lock(ledger, "ds", "job@2026-11-01"):  # released with the context
        pass


def test_a_dry_run_tries_its_reservation_on_a_copy_of_either_backend(ledger_location: str) -> None:
    Ledger.create(ledger_location).init_dataset("ds", total_epsilon=1.0, total_delta=1e-6)
    book = Ledger(ledger_location)
    book.reserve("ds", "a", epsilon=0.7, delta=0.0, events=[EpsilonDeltaDpEvent(0.7)], mechanism="m",
                 neighbouring=ROW, partitions=["#0"])
    from dppca_dask.jobs.dry_run import _ledger_snapshot

    with _ledger_snapshot(ledger_location) as copy:
        trial = Ledger(copy)
        assert trial.id == book.id and trial.entry("ds", "a").status == RESERVED
        with pytest.raises(BudgetExceededError):
            trial.reserve("ds", "b", epsilon=0.7, delta=0.0, events=[EpsilonDeltaDpEvent(0.7)], mechanism="m",
                          neighbouring=ROW)
    assert book.entry("ds", "b") is None  # the ledger itself only read


def _sqlite_columns(path: str) -> dict[str, list[tuple[str, bool]]]:
    import sqlite3

    with sqlite3.connect(path) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                               "AND name NOT LIKE 'sqlite_%' ORDER BY name")]
        # (name, not null): a primary-key column is never null, which PostgreSQL reports and SQLite's pragma does not
        return {t: [(row[1], bool(row[3] or row[5])) for row in db.execute(f"PRAGMA table_info({t})")]
                for t in tables}


def _postgres_columns(url: str) -> dict[str, list[tuple[str, bool]]]:
    import psycopg

    from dppca_dask.ledger._postgres import NAMESPACE

    with psycopg.connect(url) as db:
        rows = db.execute("SELECT table_name, column_name, is_nullable FROM information_schema.columns "
                          "WHERE table_schema = %s ORDER BY table_name, ordinal_position", (NAMESPACE,)).fetchall()
    columns: dict[str, list[tuple[str, bool]]] = {}
    for table, column, nullable in rows:
        columns.setdefault(table, []).append((column, nullable == "NO"))
    return columns


def test_both_backends_create_the_same_tables_and_columns(tmp_path: Path, postgres_url: str) -> None:
    """The schema is written once per SQL dialect: the two must not drift apart (the same tables, the same columns
    in the same order, the same ones required; types, checks and defaults are each dialect's own and not compared
    here: the shared tests above run the same history on both)."""
    path = str(tmp_path / "ledger.sqlite")
    for ledger in (path, postgres_url):
        assert main(["budget", "init", "--ledger", ledger, "--dataset", "ds", "--total-epsilon", "1",
                     "--total-delta", "1e-6"]) == 0
    sqlite, postgres = _sqlite_columns(path), _postgres_columns(postgres_url)
    assert set(sqlite) == {"meta", "datasets", "entries", "charges"}
    assert sqlite == postgres
