"""A ``sliding-window`` job's dry run reserves, in its snapshot of the ledger, what the run reserves.

Two cases the dry run used to leave to the run: a spectral histogram's release is charged to the window's partitions
and to those before it that its saved structure covers (one function, ``plan_charges``, decides the set for both,
with the run's parameter rules and the saved structure's checks); and a day's ``[data.append]`` file not appended
yet: the window is planned on the partition table as the append would leave it (the day's partition stamped with
the date; the file is not read) and the reservations are tried on the window's keys, the day's included. Every dry
run leaves the ledger file byte for byte as it was.
"""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from jobs_helpers import base_doc, daily_store

from dppca_dask.cli import main
from dppca_dask.errors import BudgetExceededError, InvalidParameterError
from dppca_dask.jobs import parse_job, run_job
from dppca_dask.ledger import CHARGED, Ledger
from dppca_dask.methods.window.budget import partition_key
from dppca_dask.storage import append_partition, open_matrix


def _window_doc(tmp_path: Path, store: str, name: str, epsilon: float, **mechanism: Any) -> dict[str, Any]:
    doc = base_doc(tmp_path, store)
    doc["job"] = {"name": name}
    doc["mechanism"] = {"name": "sliding-window", "last": "2D", "release": "gaussian", **mechanism}
    doc["privacy"]["epsilon"] = epsilon
    return doc


def _dry_run(spec_path: Path, date: str, ledger: str, capsys: Any) -> tuple[int, Any, str]:
    """``run --dry-run --json``: exit code, the printed report (``None`` on a refusal) and standard error; the
    ledger file is byte for byte the same afterwards (nothing reserved)."""
    before = Path(ledger).read_bytes()
    code = main(["run", str(spec_path), "--dry-run", "--date", date, "--json"])
    captured = capsys.readouterr()
    assert Path(ledger).read_bytes() == before
    return code, (json.loads(captured.out) if code == 0 else None), captured.err


def _spent_minimum(ledger: str, store: str, partitions: Any) -> float:
    """The least remaining ε among the partitions ``partitions`` of ``store`` in the dataset ``ds``'s books."""
    handle = open_matrix(store)
    names = {partition_key("ds", handle, i) for i in partitions}
    budget = Ledger(ledger).budget("ds")
    return min(budget.total_epsilon - p.spent_epsilon for p in budget.partitions if p.partition in names)


def _charged(ledger: str, store: str, job_id: str) -> list[int]:
    """The indices of ``store``'s partitions that ``job_id``'s charged entry of ``ds`` is charged to."""
    entry = Ledger(ledger).entry("ds", job_id)
    names = set(entry.partitions) if entry is not None and entry.status == CHARGED else set()
    handle = open_matrix(store)
    return [i for i in range(handle.n_partitions) if partition_key("ds", handle, i) in names]


def _day(store: str, day: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    append_partition(store, sp.csr_array(rng.standard_normal((20, 6)) * 0.1),
                     timestamp=_dt.datetime(2026, 11, day, tzinfo=_dt.timezone.utc).timestamp())


def _histogram_store(tmp_path: Path, write_spec: Any) -> tuple[str, dict[str, Any]]:
    """Four days, partition 2 charged ε 0.8 by an exact job of its own day, a spectral histogram (η = 0.5) of a
    4-day window built on day 4 (ε 0.1; it starts at the window, partition 0), then days 5 to 7 appended. On day 7
    the histogram's first checkpoint is partition 2 (the count rule, from the partition table: checkpoints [0, 2, 3]
    on day 4, [2, 4, 5, 6] on day 7); the window of day 7 is partitions 3..6, so the next release is charged to
    2..6."""
    store = daily_store(tmp_path / "days.zarr", days=4)
    exact = _window_doc(tmp_path, store, "day-three", 0.8, last="1D")
    write_spec(exact)
    assert run_job(parse_job(exact, source="job.toml", base_dir=str(tmp_path)), date="2026-11-03").status == \
        "completed"
    hist = _window_doc(tmp_path, store, "hist", 0.1, last="4D", structure="spectral-histogram", eta=0.5)
    assert run_job(parse_job(hist, source="job.toml", base_dir=str(tmp_path)), date="2026-11-04").status == \
        "completed"
    for day in (5, 6, 7):
        _day(store, day, seed=day)
    return store, hist


def test_a_spectral_histogram_dry_run_tries_the_partitions_before_the_window(tmp_path: Path, write_spec: Any,
                                                                            capsys: Any) -> None:
    """The histogram covers partition 2, before the window (3..6): the run reserves on it, so a job that
    would take it over its total is refused by the dry run with the run's own message, and one that fits is
    reported with the remaining ε the run leaves."""
    store, doc = _histogram_store(tmp_path, write_spec)
    ledger = doc["budget"]["ledger"]
    doc["job"] = {"name": "big"}
    doc["privacy"]["epsilon"] = 0.9  # partition 2 (0.8 and 0.1 spent) would exceed 1; the window's (0.1 spent) fit
    code, _, err = _dry_run(write_spec(doc), "2026-11-07", ledger, capsys)
    assert code == 3
    with pytest.raises(BudgetExceededError) as raised:
        run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-07")
    assert str(raised.value) in err  # the same refusal, naming the ledger the run uses
    assert partition_key("ds", open_matrix(store), 2) in str(raised.value)

    doc["job"] = {"name": "small"}
    doc["privacy"]["epsilon"] = 0.05
    from dppca_dask.methods.window.histogram import histogram_path

    saved = Path(histogram_path(store, "345600s-features"))
    state = {name: (saved / name).read_bytes() for name in ("state.json", "state.npz")}
    code, checked, _ = _dry_run(write_spec(doc), "2026-11-07", ledger, capsys)
    assert code == 0 and checked["status"] == "would-run"
    assert {name: (saved / name).read_bytes() for name in state} == state  # the saved structure only read
    assert "the window's 4 partition(s): 3, 4, 5, 6" in checked["releases"][0]
    assert "saved histogram: 1 partition(s): 2" in checked["releases"][0]
    assert not any("checked by the run" in note for note in checked["notes"])
    outcome = run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-07")
    assert outcome.status == "completed"
    charged = _charged(ledger, store, "small@2026-11-07")
    assert charged == list(range(2, 7))  # what the dry run tried: the window's keys and the one before it
    assert checked["remaining_epsilon_after"] == pytest.approx(_spent_minimum(ledger, store, charged))


def test_a_new_spectral_histogram_starts_at_the_window(tmp_path: Path, write_spec: Any) -> None:
    """A structure built from nothing starts at the window's first partition (no later window of its length
    reaches back before it): its first release covers the window, and is charged to the window only, as its dry run
    says; the partitions before the window are neither read nor charged."""
    store = daily_store(tmp_path / "days.zarr", days=6)
    doc = _window_doc(tmp_path, store, "hist", 0.1, last="4D", structure="spectral-histogram", regularizer=100.0)
    spec_path = write_spec(doc)
    code = main(["run", str(spec_path), "--dry-run", "--date", "2026-11-06", "--json"])
    assert code == 0
    outcome = run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-06")
    released = set(outcome.result.window.partitions)
    assert released == {2, 3, 4, 5}
    charged = set(_charged(doc["budget"]["ledger"], store, "hist@2026-11-06"))
    assert charged == released


@pytest.mark.parametrize("case", ["eta", "row-window", "past-date", "saved-with-other-eta", "structure"])
def test_the_dry_run_refuses_a_spectral_histograms_parameters_as_the_run_does(tmp_path: Path, write_spec: Any,
                                                                             case: str, capsys: Any) -> None:
    """The run's rules for a spectral histogram (η in (0, 1), a time window ending at the newest partition, a
    saved structure built with the same parameters, a known structure) refuse the dry run with the same message."""
    store = daily_store(tmp_path / "days.zarr")
    doc = _window_doc(tmp_path, store, "hist", 0.1, structure="spectral-histogram")
    date = "2026-11-03"
    if case == "eta":
        doc["mechanism"]["eta"] = 1.5
    elif case == "row-window":
        del doc["mechanism"]["last"]
        doc["mechanism"]["last_rows"] = 10
    elif case == "past-date":
        date = "2026-11-02"  # the window would end before the newest partition (2026-11-03)
    elif case == "saved-with-other-eta":
        write_spec(doc)
        assert run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date=date).status == "completed"
        doc["job"] = {"name": "hist-other"}
        doc["mechanism"]["eta"] = 0.3
    else:
        doc["mechanism"]["structure"] = "spectral"
    spec_path = write_spec(doc)
    code, _, err = _dry_run(spec_path, date, doc["budget"]["ledger"], capsys)
    with pytest.raises(InvalidParameterError) as raised:
        run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date=date)
    assert code == 2 and str(raised.value) in err
    assert {"eta": "eta must be in (0, 1); got 1.5", "row-window": "serves time windows",
            "past-date": "releases the current window only", "saved-with-other-eta": "was built with eta=0.2, not 0.3",
            "structure": "structure must be one of exact, spectral-histogram"}[case] in err


def _append_doc(tmp_path: Path, store: str, name: str, epsilon: float) -> dict[str, Any]:
    doc = _window_doc(tmp_path, store, name, epsilon)
    doc["data"]["append"] = {"source": str(tmp_path / "{date}.svm")}
    (tmp_path / "2026-11-04.svm").write_text("0 1:0.1 3:0.2\n1 2:0.3 6:0.1\n")
    return doc


def test_a_not_yet_appended_days_dry_run_reports_its_window(tmp_path: Path, write_spec: Any, capsys: Any) -> None:
    """The day's file is not appended yet: the dry run plans the window with the day's partition stamped with the
    date (partition 3, from the partition table; the file is not read), says where the release runs and what ε
    is left, and the run, which appends the file first, does what it said."""
    import dask.config

    store = daily_store(tmp_path / "days.zarr")
    doc = _append_doc(tmp_path, store, "win", 0.8)
    ledger = doc["budget"]["ledger"]
    with dask.config.set({"dppca_dask.executor.in-process-max-partitions": 2,
                          "dppca_dask.cluster.use-active-client": False}):
        code, checked, _ = _dry_run(write_spec(doc), "2026-11-04", ledger, capsys)
        assert code == 0 and checked["status"] == "would-run"
        assert open_matrix(store).n_partitions == 3  # nothing appended
        assert "2 partition(s): 2, 3" in checked["releases"][0]
        assert checked["executor"]["executor"] == "in-process"
        assert "2 partition(s) (limit 2)" in checked["executor"]["reason"]
        key = "t:2026-11-04"  # the day to be appended: its identity is its day
        assert any(f"partition 3 ('{key}' in the ledger)" in note and "not here" in note for note in checked["notes"])
        outcome = run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-04")
    assert outcome.status == "completed"
    assert outcome.result.window.partitions == (2, 3)
    assert outcome.result.provenance["executor"] == checked["executor"]["executor"]
    assert checked["remaining_epsilon_after"] == pytest.approx(_spent_minimum(ledger, store, (2, 3)))


def test_a_not_yet_appended_days_dry_run_is_refused_on_the_windows_budget(tmp_path: Path, write_spec: Any,
                                                                         capsys: Any) -> None:
    """An existing partition of the window (2) has spent its budget: the dry run refuses the day as the run
    refuses it once it has appended the file, with the same message; the dry run appends nothing."""
    store = daily_store(tmp_path / "days.zarr")
    exact = _window_doc(tmp_path, store, "day-three", 0.8, last="1D")
    write_spec(exact)
    assert run_job(parse_job(exact, source="job.toml", base_dir=str(tmp_path)), date="2026-11-03").status == \
        "completed"
    doc = _append_doc(tmp_path, store, "win", 0.8)
    code, _, err = _dry_run(write_spec(doc), "2026-11-04", doc["budget"]["ledger"], capsys)
    assert code == 3 and open_matrix(store).n_partitions == 3
    with pytest.raises(BudgetExceededError) as raised:
        run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-04")
    assert str(raised.value) in err and partition_key("ds", open_matrix(store), 2) in str(raised.value)


def test_a_day_older_than_the_newest_partition_is_appended_late_and_windowed_by_its_time(
        tmp_path: Path, write_spec: Any, capsys: Any) -> None:
    """A backfill: the day's file arrives after a later day. The dry run plans the window with the late day (by
    its timestamp, not its position), and the run appends it and releases the window the dry run listed."""
    store = daily_store(tmp_path / "days.zarr")
    _day(store, 5, seed=7)  # a day after the date the job runs for
    doc = _append_doc(tmp_path, store, "win", 0.1)
    code, report, err = _dry_run(write_spec(doc), "2026-11-04", doc["budget"]["ledger"], capsys)
    assert code == 0, err
    outcome = run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-04")
    assert outcome.status == "completed"
    m = open_matrix(store)
    assert m.n_partitions == 5 and m.partitions[4].timestamp < m.partitions[3].timestamp
    assert tuple(outcome.result.window.partitions) == (2, 4)  # (11-02, 11-04]: days 3 and the late 4


def test_a_window_job_for_a_day_that_has_not_arrived_is_refused(tmp_path: Path, write_spec: Any,
                                                                capsys: Any) -> None:
    """Without [data.append], a window job for a date whose day is not in the store exits 2 (dry run and run)
    rather than releasing the window without it; nothing is reserved."""
    store = daily_store(tmp_path / "days.zarr")
    doc = _window_doc(tmp_path, store, "win", 0.1)
    path = write_spec(doc)
    code, _, err = _dry_run(path, "2026-11-05", doc["budget"]["ledger"], capsys)
    assert code == 2 and "is stamped 2026-11-05: the day has not arrived" in err
    assert main(["run", str(path), "--date", "2026-11-05", "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out["exit_code"] == 2 and "has not arrived" in out["error"]
    assert not [e for e in Ledger(doc["budget"]["ledger"]).find("win@2026-11-05")]


def test_a_not_yet_appended_days_spectral_dry_run_tries_the_keys_its_run_charges(tmp_path: Path, write_spec: Any,
                                                                                 capsys: Any) -> None:
    """Both cases at once: the day's partition still to be appended and a spectral histogram whose first checkpoint
    is before the window. The keys the run charges are the ones the dry run listed and tried."""
    store = daily_store(tmp_path / "days.zarr", days=4)
    doc = _window_doc(tmp_path, store, "hist", 0.1, last="4D", structure="spectral-histogram", eta=0.5)
    write_spec(doc)
    assert run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-04").status == \
        "completed"
    doc = _append_doc(tmp_path, store, "hist-next", 0.1)
    (tmp_path / "2026-11-05.svm").write_text("0 1:0.1 3:0.2\n1 2:0.3 6:0.1\n")
    doc["mechanism"].update(last="4D", structure="spectral-histogram", eta=0.5)
    ledger = doc["budget"]["ledger"]
    code, checked, _ = _dry_run(write_spec(doc), "2026-11-05", ledger, capsys)
    assert code == 0 and open_matrix(store).n_partitions == 4
    outcome = run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-05")
    assert outcome.status == "completed"
    charged = _charged(ledger, store, "hist-next@2026-11-05")
    window = outcome.result.window.partitions  # the released checkpoint's partitions, the charged ones
    assert list(window) == charged and charged[-1] == 4
    before = [i for i in charged if i < 1]
    assert before == [0]  # the first checkpoint (checkpoints [0, 2, 3] on day 4, [0, 2, 3, 4] on day 5)
    assert "the window's 4 partition(s): 1, 2, 3, 4" in checked["releases"][0]
    assert f"saved histogram: {len(before)} partition(s): {', '.join(map(str, before))}" in checked["releases"][0]
    assert checked["remaining_epsilon_after"] == pytest.approx(_spent_minimum(ledger, store, charged))


@pytest.mark.parametrize("case", ["row-window-spectral", "cache-spectral", "cache-not-bool", "cache-row-window"])
def test_a_not_yet_appended_days_dry_run_refuses_what_the_run_refuses_after_its_append(tmp_path: Path,
                                                                                      write_spec: Any, case: str,
                                                                                      capsys: Any) -> None:
    """Parameters the release refuses are refused by the dry run of a day still to be appended, with the run's
    message, before anything is appended."""
    store = daily_store(tmp_path / "days.zarr")
    doc = _append_doc(tmp_path, store, "win", 0.1)
    del doc["mechanism"]["last"]
    doc["mechanism"]["last_rows"] = 10
    if case == "row-window-spectral":
        doc["mechanism"]["structure"] = "spectral-histogram"
    elif case == "cache-spectral":
        doc["mechanism"].update(last="2D", structure="spectral-histogram", cache=True)
        del doc["mechanism"]["last_rows"]
    elif case == "cache-row-window":
        doc["mechanism"]["cache"] = True
    else:
        doc["mechanism"]["cache"] = "yes"
    code, _, err = _dry_run(write_spec(doc), "2026-11-04", doc["budget"]["ledger"], capsys)
    assert code == 2 and open_matrix(store).n_partitions == 3
    message = {"row-window-spectral": "serves time windows", "cache-spectral": "cache=True serves structure='exact'",
               "cache-not-bool": "cache must be True or False; got 'yes'",
               "cache-row-window": "cache=True serves time windows"}[case]
    assert message in err
    with pytest.raises(InvalidParameterError) as raised:
        run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-04")
    assert str(raised.value) in err


def test_the_dry_run_checks_where_the_release_runs_before_its_charges_as_the_run_does(tmp_path: Path,
                                                                                      write_spec: Any,
                                                                                      capsys: Any) -> None:
    """A spec that the run refuses twice over (a configured executor it does not know, and η outside (0, 1)) is
    refused by the dry run with the run's first message: the run decides where it executes before its charges."""
    import dask

    store = daily_store(tmp_path / "days.zarr")
    doc = _window_doc(tmp_path, store, "hist", 0.1, structure="spectral-histogram", eta=1.5)
    spec_path = write_spec(doc)
    with dask.config.set({"dppca_dask.executor.default": "elsewhere"}):
        code, _, err = _dry_run(spec_path, "2026-11-03", doc["budget"]["ledger"], capsys)
        with pytest.raises(InvalidParameterError, match="executor must be one of") as raised:
            run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-03")
    assert code == 2 and str(raised.value) in err and "eta" not in err


def test_a_not_yet_appended_days_row_window_dry_run_reports_what_the_run_does(tmp_path: Path, write_spec: Any,
                                                                             capsys: Any) -> None:
    """A row window reads and is charged to every partition up to its end (which of them hold its rows follows
    their private row counts), so the dry run of a day still to be appended plans it from the partition table as it
    does a time window: the run, after appending the file, releases and charges what the dry run said."""
    store = daily_store(tmp_path / "days.zarr")
    doc = _append_doc(tmp_path, store, "rows", 0.3)
    del doc["mechanism"]["last"]
    doc["mechanism"]["last_rows"] = 3
    ledger = doc["budget"]["ledger"]
    code, checked, _ = _dry_run(write_spec(doc), "2026-11-04", ledger, capsys)
    assert code == 0 and checked["status"] == "would-run"
    assert open_matrix(store).n_partitions == 3  # nothing appended
    assert "4 partition(s): 0, 1, 2, 3" in checked["releases"][0]
    outcome = run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-04")
    assert outcome.status == "completed" and outcome.result.window.partitions == (0, 1, 2, 3)
    assert outcome.result.provenance["executor"] == checked["executor"]["executor"]
    assert checked["remaining_epsilon_after"] == pytest.approx(_spent_minimum(ledger, store, (0, 1, 2, 3)))


def test_a_row_window_with_a_horizon_is_planned_and_charged_on_the_horizon_only(tmp_path: Path, write_spec: Any,
                                                                                capsys: Any) -> None:
    """``last_rows`` with ``last`` in a job: the dry run of a day still to be appended plans the time window's
    partitions (the day's included), and the run releases and charges those, not the whole store."""
    store = daily_store(tmp_path / "days.zarr")
    doc = _append_doc(tmp_path, store, "rows", 0.3)
    doc["mechanism"].update(last="2D", last_rows=3)
    ledger = doc["budget"]["ledger"]
    code, checked, _ = _dry_run(write_spec(doc), "2026-11-04", ledger, capsys)
    assert code == 0 and checked["status"] == "would-run"
    assert "2 partition(s): 2, 3" in checked["releases"][0]
    outcome = run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-04")
    assert outcome.status == "completed" and outcome.result.window.partitions == (2, 3)
    assert outcome.result.window.last_rows == 3
    assert checked["remaining_epsilon_after"] == pytest.approx(_spent_minimum(ledger, store, (2, 3)))
