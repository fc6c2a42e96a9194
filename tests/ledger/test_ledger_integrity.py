"""The ledger's integrity: created only by `budget init`, foreign and damaged files refused (and never written),
read-only `show`, stale reservations resolved only when nothing was released, store ids per dataset key, relations
converted by group privacy, and reservations with a tiny pure ε that stay fast and never under-report."""

from __future__ import annotations

import hashlib
import math
import os
import sqlite3
import stat
import time
from pathlib import Path

import pytest
from dp_accounting import dp_event

from dppca_dask.accounting import EpsilonDeltaDpEvent, epsilon_for, group_events
from dppca_dask.api import plan_release
from dppca_dask.cli import main
from dppca_dask.errors import BudgetExceededError, InvalidParameterError, LedgerError
from dppca_dask.ledger import CHARGED, RELEASED, RESERVED, Ledger, compose_epsilon, group_size_for

ROW = "add/remove one row"
REPLACE = "replace one row"
ENTRY1 = "one entry changes by at most 1"
ROWCHANGE1 = "one row changes by a vector of L2 norm at most 1"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _init(path: Path, *extra: str, dataset: str = "ds", eps: str = "1", delta: str = "1e-6") -> int:
    return main(["budget", "init", "--ledger", str(path), "--dataset", dataset, "--total-epsilon", eps,
                 "--total-delta", delta, *extra])


# -- budget init ----------------------------------------------------------------------------------------------


def test_budget_init_creates_an_owner_only_ledger_once_and_keeps_totals_fixed(tmp_path: Path, capsys) -> None:
    path = tmp_path / "new-dir" / "ledger.sqlite"
    assert _init(path, "--relation", "entry:1") == 0
    assert "created" in capsys.readouterr().out
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    budget = Ledger(path).budget("ds")
    assert (budget.total_epsilon, budget.total_delta, budget.neighbouring) == (1.0, 1e-6, ENTRY1)
    assert _init(path, "--relation", "entry:1") == 0  # the same values again: nothing to do
    assert "already recorded" in capsys.readouterr().out
    assert _init(path, eps="2") == 2  # a total is fixed once recorded
    assert "records a total of (epsilon=1" in capsys.readouterr().err
    assert _init(path, dataset="other", eps="0.5") == 0 and Ledger(path).datasets() == ["ds", "other"]


@pytest.mark.parametrize("args, message", [
    (["--relation", "rows"], "--relation must be one of"),
    (["--relation", "entry:-1"], "bound after 'entry:' must be a finite number > 0"),
])
def test_budget_init_refuses_bad_input_before_creating_anything(tmp_path: Path, capsys, args, message) -> None:
    path = tmp_path / "ledger.sqlite"
    assert _init(path, *args) == 2
    assert message in capsys.readouterr().err
    assert not path.exists()


def test_budget_init_refuses_a_bad_total_before_creating_anything(tmp_path: Path, capsys) -> None:
    path = tmp_path / "ledger.sqlite"
    assert _init(path, eps="0") == 2
    assert "total_epsilon must be finite and > 0" in capsys.readouterr().err
    assert not path.exists()
    with pytest.raises(LedgerError, match="already exists; a ledger is created once"):
        path.write_bytes(b"")
        Ledger.create(path)


# -- foreign, empty and damaged files ----------------------------------------------------------------------


def test_an_empty_file_is_not_a_ledger_and_is_left_untouched(tmp_path: Path, capsys) -> None:
    path = tmp_path / "ledger.sqlite"
    path.write_bytes(b"")
    with pytest.raises(LedgerError, match="empty file, not a ledger"):
        Ledger(path)
    assert main(["budget", "show", "--ledger", str(path)]) == 2
    err = capsys.readouterr().err
    assert "empty file" in err and "Traceback" not in err
    assert path.stat().st_size == 0


def test_another_sqlite_database_is_refused_and_never_written(tmp_path: Path, capsys) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (name TEXT)")
        db.execute("INSERT INTO users VALUES ('a')")
    db.close()
    before = _digest(path)
    for read_only in (False, True):
        with pytest.raises(LedgerError, match="not a privacy-budget ledger.*nothing was written"):
            Ledger(path, read_only=read_only)
    assert main(["budget", "show", "--ledger", str(path)]) == 2
    assert "not a privacy-budget ledger" in capsys.readouterr().err
    assert _init(path) == 2  # init never writes its schema into another database either
    assert _digest(path) == before


def test_budget_show_is_read_only(tmp_path: Path, capsys) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger.create(path)
    ledger.init_dataset("ds", total_epsilon=1.0, total_delta=1e-6)
    ledger.reserve("ds", "a", epsilon=0.2, delta=0.0, events=[EpsilonDeltaDpEvent(0.2)], mechanism="m",
                   neighbouring=ROW)
    before = _digest(path)
    os.chmod(path, 0o400)  # a read-only handle would fail to write even where permissions are not enforced
    try:
        assert main(["budget", "show", "--ledger", str(path), "--json"]) == 0
    finally:
        os.chmod(path, 0o600)
    assert '"job_id": "a"' in capsys.readouterr().out
    assert _digest(path) == before
    with pytest.raises(LedgerError, match="opened read-only"):
        Ledger(path, read_only=True).charge("ds", "a")


def test_garbage_events_json_is_a_clear_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger.create(path)
    ledger.init_dataset("ds", total_epsilon=1.0, total_delta=1e-6)
    ledger.reserve("ds", "a", epsilon=0.2, delta=0.0, events=[EpsilonDeltaDpEvent(0.2)], mechanism="m",
                   neighbouring=ROW)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE entries SET events = '{not json'")
    db.close()
    assert main(["budget", "show", "--ledger", str(path)]) == 2
    err = capsys.readouterr().err
    assert "is damaged: the events of job 'a'" in err and "Traceback" not in err
    with pytest.raises(LedgerError, match="damaged"):  # and no reservation is checked against unreadable events
        ledger.reserve("ds", "b", epsilon=0.1, delta=0.0, events=[EpsilonDeltaDpEvent(0.1)], mechanism="m",
                       neighbouring=ROW)


@pytest.mark.skipif(os.geteuid() == 0, reason="permissions are not enforced for root")
def test_an_unwritable_ledger_directory_is_a_clear_error(tmp_path: Path) -> None:  # pragma: no cover - root CI
    directory = tmp_path / "ro"
    directory.mkdir()
    ledger = Ledger.create(directory / "ledger.sqlite")
    ledger.init_dataset("ds", total_epsilon=1.0, total_delta=1e-6)
    os.chmod(directory, 0o500)
    try:
        with pytest.raises(LedgerError, match="writable by this user"):
            ledger.reserve("ds", "a", epsilon=0.2, delta=0.0, events=[EpsilonDeltaDpEvent(0.2)], mechanism="m",
                           neighbouring=ROW)
    finally:
        os.chmod(directory, 0o700)


def test_a_ledger_in_a_path_that_cannot_be_a_directory_is_a_clear_error(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert _init(blocker / "ledger.sqlite") == 2
    err = capsys.readouterr().err
    assert "cannot create ledger" in err and "writable" in err and "Traceback" not in err


def test_a_version_1_ledger_is_refused_until_migrated_by_the_one_command(tmp_path: Path, capsys) -> None:
    path = tmp_path / "v1.sqlite"
    with sqlite3.connect(path) as db:
        db.executescript("""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE datasets (dataset TEXT PRIMARY KEY, total_epsilon REAL NOT NULL, total_delta REAL NOT NULL,
                                   neighbouring TEXT, created TEXT NOT NULL);
            CREATE TABLE entries (id INTEGER PRIMARY KEY AUTOINCREMENT, dataset TEXT NOT NULL, job_id TEXT NOT NULL,
                job_name TEXT NOT NULL, mechanism TEXT NOT NULL, epsilon REAL NOT NULL, delta REAL NOT NULL,
                neighbouring TEXT NOT NULL, events TEXT NOT NULL, status TEXT NOT NULL, outcome TEXT NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 1, first_release TEXT, created TEXT NOT NULL,
                updated TEXT NOT NULL, UNIQUE (dataset, job_id));
            INSERT INTO meta VALUES ('schema_version', '1');
            INSERT INTO datasets VALUES ('ds', 1.0, 1e-6, 'add/remove one row', '2026-01-01');
            INSERT INTO entries VALUES (1, 'ds', 'old', 'old', 'm', 0.7, 0.0, 'add/remove one row',
                '[{"epsilon": 0.7, "delta": 0.0, "type": "EpsilonDeltaDpEvent"}]', 'charged', 'succeeded', 1, NULL,
                '2026-01-01', '2026-01-01');
        """)
    db.close()
    for read_only in (True, False):
        with pytest.raises(LedgerError, match="budget migrate --ledger"):
            Ledger(path, read_only=read_only)
    assert main(["budget", "show", "--ledger", str(path)]) == 2
    assert "budget migrate" in capsys.readouterr().err
    assert main(["budget", "migrate", "--ledger", str(path)]) == 0
    assert "schema version 1 -> 3" in capsys.readouterr().out
    ledger = Ledger(path)
    assert ledger.entry("ds", "old").partitions == ("*",)  # a whole-store release: every partition
    with pytest.raises(BudgetExceededError):  # the old charge still counts, on every partition
        ledger.reserve("ds", "a", epsilon=0.5, delta=0.0, events=[EpsilonDeltaDpEvent(0.5)], mechanism="m",
                       neighbouring=ROW, partitions=["t:2026-01-01"])
    assert main(["budget", "migrate", "--ledger", str(path)]) == 0  # again: nothing to do
    assert "nothing to do" in capsys.readouterr().out


# -- stale reservations ----------------------------------------------------------------------------------


def test_budget_resolve_returns_only_a_reservation_without_a_release(tmp_path: Path, capsys) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger.create(path)
    ledger.init_dataset("ds", total_epsilon=1.0, total_delta=1e-6)
    for job in ("stale", "released", "charged"):
        ledger.reserve("ds", job, epsilon=0.2, delta=0.0, events=[EpsilonDeltaDpEvent(0.2)], mechanism="m",
                       neighbouring=ROW)
    ledger.note_first_release("ds", "released")
    ledger.charge("ds", "charged")

    assert main(["budget", "resolve", "--ledger", str(path), "--job-id", "stale"]) == 0
    assert "returned (no release was recorded)" in capsys.readouterr().out
    entry = ledger.entry("ds", "stale")
    assert (entry.status, entry.outcome) == (RELEASED, "resolved")
    assert main(["budget", "resolve", "--ledger", str(path), "--job-id", "released"]) == 2
    assert "has released values" in capsys.readouterr().err
    assert ledger.entry("ds", "released").status == RESERVED
    assert main(["budget", "resolve", "--ledger", str(path), "--job-id", "charged"]) == 2
    assert "is charged (succeeded), not a stale reservation" in capsys.readouterr().err
    assert main(["budget", "resolve", "--ledger", str(path), "--job-id", "stale"]) == 2  # nothing left to resolve
    assert main(["budget", "resolve", "--ledger", str(path), "--job-id", "nope"]) == 2
    assert "has no entry" in capsys.readouterr().err


# -- store ids ---------------------------------------------------------------------------------------------


def test_a_dataset_key_keeps_its_store_unless_told(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path / "ledger.sqlite")
    ledger.init_dataset("ds", total_epsilon=1.0, total_delta=1e-6)
    ledger.check_store("ds", "store-a")
    ledger.check_store("ds", "store-a")
    assert ledger.budget("ds").store_id == "store-a"
    with pytest.raises(LedgerError, match="budgeted on store store-a; this store is store-b.*--allow-new-store"):
        ledger.check_store("ds", "store-b")
    ledger.check_store("ds", "store-b", allow_new_store=True)
    assert ledger.budget("ds").store_id == "store-b"
    with pytest.raises(InvalidParameterError, match="store_id must be a non-empty string"):
        ledger.check_store("ds", "")
    with pytest.raises(LedgerError, match="has no budget"):
        ledger.check_store("nope", "store-a")


# -- relations ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key, job, k", [
    (ROW, ROW, 1),
    (REPLACE, ROW, 2),            # a replacement is a removal and an addition
    (ROWCHANGE1, ROW, 2),         # a row change is a replacement
    (ENTRY1, ROW, 2),
    (ENTRY1, ROWCHANGE1, 1),      # an entry change of at most s is a row change of L2 norm at most s
    (ENTRY1, REPLACE, 1),
    (ROWCHANGE1, REPLACE, 1),
    ("one entry changes by at most 2", ROWCHANGE1, 2),
    ("one entry changes by at most 0.5", ROWCHANGE1, 1),
    ("one row changes by a vector of L2 norm at most 3", "one row changes by a vector of L2 norm at most 1", 3),
    (ROW, REPLACE, None),         # an addition is not a replacement
    (ROWCHANGE1, ENTRY1, None),   # a row change is not an entry change
    (REPLACE, ROWCHANGE1, None),  # an unclipped replacement is no bounded row change
    (ROW, ENTRY1, None),
    ("some other relation", ROW, None),
])
def test_group_size_rules(key: str, job: str, k: int | None) -> None:
    assert group_size_for(key, job) == k


def test_events_count_against_the_keys_relation_with_group_privacy(tmp_path: Path) -> None:
    """A replace-one key charged by an add/remove job counts the job's events with sensitivities doubled:
    ε doubled and δ' = (1 + e^ε)·δ for (ε, δ) events, Gaussian multipliers halved."""
    ledger = Ledger.create(tmp_path / "ledger.sqlite")
    ledger.init_dataset("ds", total_epsilon=2.0, total_delta=1e-5, neighbouring=REPLACE)
    events = [EpsilonDeltaDpEvent(0.1, 1e-7), dp_event.GaussianDpEvent(8.0)]
    entry = ledger.reserve("ds", "a", epsilon=0.5, delta=1e-7, events=events, mechanism="m", neighbouring=ROW)
    assert entry.group_size == 2 and entry.events == tuple(events)
    grouped = entry.counted_events
    assert grouped[0] == EpsilonDeltaDpEvent(0.2, (1 + math.exp(0.1)) * 1e-7)
    assert grouped[1] == dp_event.GaussianDpEvent(4.0)
    spent = ledger.budget("ds").spent_epsilon
    fine = epsilon_for(group_events(events, group_size=2), delta=1e-5)
    assert fine <= spent <= fine * 1.01
    assert spent > epsilon_for(events, delta=1e-5) * 1.5  # counted for the key, not for the job's own relation
    with pytest.raises(LedgerError, match="implies nothing about the key's relation"):
        ledger.reserve("ds", "b", epsilon=0.1, delta=0.0, events=[EpsilonDeltaDpEvent(0.1)], mechanism="m",
                       neighbouring="some other relation")
    ledger.charge("ds", "a")
    assert ledger.budget("ds").entries[0].status == CHARGED


def test_a_key_without_a_relation_takes_the_first_jobs(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path / "ledger.sqlite")
    ledger.init_dataset("ds", total_epsilon=1.0, total_delta=1e-6)
    ledger.reserve("ds", "a", epsilon=0.1, delta=0.0, events=[EpsilonDeltaDpEvent(0.1)], mechanism="m",
                   neighbouring=ENTRY1)
    assert ledger.budget("ds").neighbouring == ENTRY1
    entry = ledger.reserve("ds", "b", epsilon=0.1, delta=0.0, events=[EpsilonDeltaDpEvent(0.1)], mechanism="m",
                           neighbouring=ROWCHANGE1)  # an entry change is a row change: counts as it is
    assert entry.group_size == 1


# -- tiny pure epsilon -------------------------------------------------------------------------------------


def test_a_tiny_pure_epsilon_reserves_in_under_a_second_and_never_under_reports(tmp_path: Path) -> None:
    """A reservation composing a pure ε of 1e-5 with Gaussians took minutes on the accountant's ε/100 grid; the
    ledger's bounded grid rounds pessimistically, so its ε is at least the one a 10x finer grid gives."""
    ledger = Ledger.create(tmp_path / "ledger.sqlite")
    ledger.init_dataset("ds", total_epsilon=10.0, total_delta=1e-6)
    tiny = [EpsilonDeltaDpEvent(1e-5), dp_event.GaussianDpEvent(6.0)]
    plan = list(plan_release(300, epsilon=0.5, delta=1e-7, n_iter=3, mechanism="adaptive-power").events)
    ledger.reserve("ds", "first", epsilon=0.5, delta=1e-7, events=plan, mechanism="m", neighbouring=ROW)
    started = time.perf_counter()
    ledger.reserve("ds", "tiny", epsilon=1.0, delta=0.0, events=tiny, mechanism="m", neighbouring=ROW)
    elapsed = time.perf_counter() - started
    assert elapsed < 3.0  # < 1 s alone; loose for a shared machine (it was ~240 s)
    spent = ledger.budget("ds").spent_epsilon
    finer = epsilon_for(plan + tiny, delta=1e-6, value_discretization_interval=1e-5)
    assert finer <= spent <= finer + 0.01
    pure = [EpsilonDeltaDpEvent(1e-5)] * 3  # exactly 3e-5 at delta 0: rounded up to the grid, never below
    assert 3e-5 <= compose_epsilon(pure, 0.0) <= 3e-4 + 1e-12


def test_the_delta_counted_for_the_key_must_stay_below_its_total(tmp_path: Path) -> None:
    ledger = Ledger.create(tmp_path / "ledger.sqlite")
    ledger.init_dataset("ds", total_epsilon=5.0, total_delta=1e-6, neighbouring=REPLACE)
    with pytest.raises(BudgetExceededError, match="requested delta=.*for the key's relation"):
        ledger.reserve("ds", "a", epsilon=1.0, delta=4e-7, events=[EpsilonDeltaDpEvent(1.0, 4e-7)], mechanism="m",
                       neighbouring=ROW)  # (1 + e) * 4e-7 > 1e-6


def _version_2(path: Path, store_id: str) -> None:
    """A ledger as version 2 wrote it: a whole-store job on the dataset key, and a window release on the partition
    keys of its own (killed between its keys: day 0 charged, day 1 still reserved)."""
    event = '[{"epsilon": 0.4, "delta": 0.0, "type": "EpsilonDeltaDpEvent"}]'
    with sqlite3.connect(path) as db:
        db.executescript(f"""
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
            CREATE TABLE datasets (dataset TEXT PRIMARY KEY, total_epsilon REAL NOT NULL, total_delta REAL NOT NULL,
                                   neighbouring TEXT, created TEXT NOT NULL, store_id TEXT);
            CREATE TABLE entries (id INTEGER PRIMARY KEY AUTOINCREMENT, dataset TEXT NOT NULL, job_id TEXT NOT NULL,
                job_name TEXT NOT NULL, mechanism TEXT NOT NULL, epsilon REAL NOT NULL, delta REAL NOT NULL,
                neighbouring TEXT NOT NULL, events TEXT NOT NULL, status TEXT NOT NULL, outcome TEXT NOT NULL,
                attempts INTEGER NOT NULL DEFAULT 1, first_release TEXT, created TEXT NOT NULL,
                updated TEXT NOT NULL, group_size INTEGER NOT NULL DEFAULT 1, UNIQUE (dataset, job_id));
            INSERT INTO meta VALUES ('schema_version', '2');
            INSERT INTO meta VALUES ('ledger_id', 'abc');
            INSERT INTO datasets VALUES ('ds', 1.0, 1e-6, 'add/remove one row', '2026-01-01', '{store_id}');
            INSERT INTO datasets VALUES ('ds/partition/{store_id}:0', 1.0, 1e-6, 'add/remove one row', '2026-01-01',
                                         NULL);
            INSERT INTO datasets VALUES ('ds/partition/{store_id}:1', 1.0, 1e-6, 'add/remove one row', '2026-01-01',
                                         NULL);
            INSERT INTO entries VALUES (1, 'ds', 'pca', 'pca', 'm', 0.4, 0.0, 'add/remove one row', '{event}',
                'charged', 'succeeded', 1, NULL, '2026-01-01', '2026-01-01', 1);
            INSERT INTO entries VALUES (2, 'ds/partition/{store_id}:0', 'w', 'w', 'sliding-window', 0.4, 0.0,
                'add/remove one row', '{event}', 'charged', 'succeeded', 1, NULL, '2026-01-02', '2026-01-02', 1);
            INSERT INTO entries VALUES (3, 'ds/partition/{store_id}:1', 'w', 'w', 'sliding-window', 0.4, 0.0,
                'add/remove one row', '{event}', 'reserved', 'running', 1, NULL, '2026-01-02', '2026-01-02', 1);
        """)
    db.close()


@pytest.mark.parametrize("with_store", [True, False], ids=["store-given", "no-store"])
def test_budget_migrate_folds_window_partition_keys_into_the_datasets_books(tmp_path: Path, capsys,
                                                                           with_store: bool) -> None:
    import datetime as _dt

    import numpy as np

    from dppca_dask.ingest import ingest
    from dppca_dask.storage import append_partition

    rng = np.random.default_rng(1)
    store = ingest(rng.random((4, 3)), tmp_path / "days.zarr", n_features=3, timestamp="2026-11-01")
    append_partition(store.path, rng.random((4, 3)), timestamp=_dt.datetime(2026, 11, 2, tzinfo=_dt.timezone.utc))
    path = tmp_path / "v2.sqlite"
    _version_2(path, store.store_id)
    args = ["budget", "migrate", "--ledger", str(path)] + (["--store", store.path] if with_store else [])
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "window release 'w' of 'ds': 2 partition key(s) -> one entry (charged" in out
    ledger = Ledger(path)
    assert ledger.datasets() == ["ds"]  # the partition keys are gone, their entries folded into the dataset's
    window = ledger.entry("ds", "w")
    assert window.status == CHARGED and window.store_id == store.store_id  # charged on a key: stays charged
    assert window.partitions == (("t:2026-11-01", "t:2026-11-02") if with_store else ("*",))
    assert ledger.entry("ds", "pca").partitions == ("*",)
    budget = ledger.budget("ds")  # both releases on every day: composed
    assert budget.spent_epsilon == pytest.approx(0.8, rel=1e-3) and ledger.id == "abc"
