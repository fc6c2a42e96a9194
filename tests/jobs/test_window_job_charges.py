"""A ``sliding-window`` job's outcome names every partition key it is charged to (text and ``--json``, as the ledger
records them), and a release refused under a job id already charged counts as no attempt of that job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from jobs_helpers import base_doc, daily_store

from dppca_dask.cli import main
from dppca_dask.ledger import CHARGED, Ledger

DATE = "2026-11-04"


def _window_doc(tmp_path: Path, store: str, *, name: str, last: str) -> dict[str, dict[str, Any]]:
    doc = base_doc(tmp_path, store)
    doc["job"] = {"name": name}
    doc["mechanism"] = {"name": "sliding-window", "last": last, "release": "gaussian"}
    doc["privacy"]["epsilon"] = 0.3  # two releases on the same partitions fit the total of 1
    doc["cluster"] = {"executor": "local"}
    return doc


def _charged_keys(ledger: Ledger, job_id: str) -> list[str]:
    """The partitions the job id's entry of dataset ``ds`` is charged to (none unless it is charged)."""
    entry = ledger.entry("ds", job_id)
    return list(entry.partitions) if entry is not None and entry.status == CHARGED else []


def _shown_keys(shown: dict[str, Any], job_id: str) -> list[str]:
    """The partitions `budget show --json` lists for ``job_id``'s entry of dataset ``ds``."""
    return [p for d in shown["datasets"] if d["dataset"] == "ds"
            for e in d["history"] if e["job_id"] == job_id for p in e["partitions"]]


def test_a_window_jobs_summary_names_every_partition_key_it_charged(tmp_path: Path, write_spec: Any,
                                                                    capsys: Any) -> None:
    """Each day of the window is charged on its own partition key: the run's text and JSON name each key with its
    partition's day (public: the partition table), the same keys `budget show` lists; a long window is summed up
    in the text by its count, first and last key (the JSON lists each)."""
    from dppca_dask.methods.window.budget import partition_key
    from dppca_dask.storage import open_matrix

    store = daily_store(tmp_path / "days.zarr", days=12)
    ledger_path = str(tmp_path / "ledger.sqlite")
    spec = write_spec(_window_doc(tmp_path, store, name="win", last="3D"))
    assert main(["run", str(spec), "--date", DATE]) == 0
    text = capsys.readouterr().out
    opened = open_matrix(store)
    keys = [partition_key("ds", opened, i) for i in (1, 2, 3)]  # stamped 2026-11-02 .. 2026-11-04
    ledger = Ledger(ledger_path)
    assert sorted(_charged_keys(ledger, f"win@{DATE}")) == sorted(keys)
    assert (f"dataset 'ds': charged (succeeded) on 3 partition key(s) (epsilon=0.3, delta=1e-07 on each)"
            in text)
    for key, day in zip(keys, ("2026-11-02", "2026-11-03", "2026-11-04")):
        assert f"  {key} ({day})\n" in text
    assert all(f"{partition_key('ds', opened, i)} (" not in text for i in (0, 4))

    assert main(["run", str(spec), "--date", DATE, "--json"]) == 0  # already completed: the same keys
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["status"] == "already-completed"
    charged = outcome["partition_keys"]
    assert (charged["dataset"], charged["count"]) == ("ds", 3)
    assert [k["key"] for k in charged["keys"]] == keys
    assert [k["timestamp"] for k in charged["keys"]] == ["2026-11-02", "2026-11-03", "2026-11-04"]
    assert charged["first"] == charged["keys"][0] and charged["last"] == charged["keys"][-1]
    assert all(set(k) == {"key", "partition", "timestamp", "status", "outcome", "epsilon", "delta", "attempts"}
               and (k["status"], k["outcome"], k["epsilon"], k["attempts"]) == (CHARGED, "succeeded", 0.3, 1)
               for k in charged["keys"])  # ledger figures and public partition metadata, nothing about the rows

    assert main(["budget", "show", "--ledger", ledger_path, "--json"]) == 0
    assert sorted(_shown_keys(json.loads(capsys.readouterr().out), f"win@{DATE}")) == sorted(keys)

    # Twelve days: the text gives the count, the first and the last key; the JSON still lists each one.
    spec = write_spec(_window_doc(tmp_path, store, name="fortnight", last="12D"))
    assert main(["run", str(spec), "--date", "2026-11-12"]) == 0
    text = capsys.readouterr().out
    every = [partition_key("ds", opened, i) for i in range(12)]
    assert sorted(_charged_keys(ledger, "fortnight@2026-11-12")) == sorted(every)
    assert "on 12 partition key(s)" in text
    assert f"  {every[0]} (2026-11-01)\n  ... (10 more; --json lists each)\n  {every[-1]} (2026-11-12)\n" in text
    assert not any(f"{key} (" in text for key in every[1:-1])
    assert main(["run", str(spec), "--date", "2026-11-12", "--json"]) == 0
    charged = json.loads(capsys.readouterr().out)["partition_keys"]
    assert charged["count"] == 12 and [k["key"] for k in charged["keys"]] == every
    assert (charged["first"]["timestamp"], charged["last"]["timestamp"]) == ("2026-11-01", "2026-11-12")


def test_a_release_refused_under_a_charged_job_id_is_no_attempt_of_that_job(tmp_path: Path, write_spec: Any,
                                                                           capsys: Any) -> None:
    """A window job charged its days under ``win@DATE``; a later release under that job id (here a wider window,
    by `dppca-dask window`) is refused before it reserves anything: the history keeps one attempt on each key the
    job charged and gains no entry on the key only the refused release would have read."""
    from dppca_dask.methods.window.budget import partition_key
    from dppca_dask.storage import open_matrix

    store = daily_store(tmp_path / "days.zarr", days=4)
    ledger_path = str(tmp_path / "ledger.sqlite")
    spec = write_spec(_window_doc(tmp_path, store, name="win", last="3D"))
    assert main(["run", str(spec), "--date", DATE]) == 0
    capsys.readouterr()
    job_id = f"win@{DATE}"
    release = ["window", store, "--end", DATE, "--epsilon", "0.3", "--delta", "1e-7", "--executor", "local",
               "--ledger", ledger_path, "--dataset", "ds", "--job-id", job_id]
    for last in ("4D", "3D"):  # a wider window (its first day is a new key), then the job's own window
        assert main([*release, "--last", last]) == 2
        assert "is already charged to the partitions of 'ds'" in capsys.readouterr().err

    ledger = Ledger(ledger_path)
    opened = open_matrix(store)
    (entry,) = ledger.find(job_id)  # one entry of the dataset key, on the three days it read
    assert list(entry.partitions) == [partition_key("ds", opened, i) for i in (1, 2, 3)]
    assert (entry.status, entry.outcome, entry.attempts) == (CHARGED, "succeeded", 1)
    assert main(["budget", "show", "--ledger", ledger_path]) == 0
    shown = capsys.readouterr().out
    assert "attempts" not in shown and "released" not in shown and shown.count(job_id) == 1

    assert main(["run", str(spec), "--date", DATE]) == 0  # the job itself: already completed, no new attempt
    assert "already completed" in capsys.readouterr().out
    assert all(e.attempts == 1 for e in ledger.find(job_id))


def test_a_charge_of_another_dataset_key_under_the_job_id_is_not_the_window_jobs(tmp_path: Path, write_spec: Any,
                                                                               capsys: Any) -> None:
    """A window job of dataset ``ds`` looks for its earlier charge among its own partition keys only: a charge of
    another dataset key whose name starts with ``ds/`` (here ``ds/x``), under the same job id, is not it (the run
    took it for its own and refused, its release missing)."""
    from dppca_dask.accounting import EpsilonDeltaDpEvent
    from dppca_dask.accounting.report import ADD_REMOVE_ROW

    store = daily_store(tmp_path / "days.zarr", days=4)
    spec = write_spec(_window_doc(tmp_path, store, name="win", last="2D"))
    ledger = Ledger(str(tmp_path / "ledger.sqlite"))
    ledger.init_dataset("ds/x", total_epsilon=1.0, total_delta=1e-6, neighbouring=ADD_REMOVE_ROW)
    ledger.reserve("ds/x", f"win@{DATE}", epsilon=0.1, delta=0.0, events=[EpsilonDeltaDpEvent(0.1)],
                   mechanism="test", neighbouring=ADD_REMOVE_ROW)
    ledger.charge("ds/x", f"win@{DATE}")
    assert main(["run", str(spec), "--date", DATE, "--dry-run"]) == 0
    assert "already" not in capsys.readouterr().out
    assert main(["run", str(spec), "--date", DATE]) == 0
    assert "job win@2026-11-04: completed" in capsys.readouterr().out
    assert len(_charged_keys(ledger, f"win@{DATE}")) == 2
