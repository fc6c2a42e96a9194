"""One budget per population: a sliding-window job and a whole-store job about the same people keep the same books,
per partition, in either order; a re-ingested copy of the same rows under the same key gets no fresh budget."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jobs_helpers import base_doc, daily_store

from dppca_dask.cli import main
from dppca_dask.ledger import CHARGED, Ledger

DATE = "2026-11-04"


def _docs(tmp_path: Path, store: str) -> dict[str, dict[str, Any]]:
    """A whole-store analyze-gauss job and a 7-day sliding-window job, (0.9, 1e-6) each, on the dataset key 'ds'
    with a total of (1, 1e-5), over the same four stamped days."""
    whole = base_doc(tmp_path, store)
    whole["job"] = {"name": "whole"}
    whole["mechanism"] = {"name": "analyze-gauss", "n_components": 2, "center": "none"}
    window = base_doc(tmp_path, store)
    window["job"] = {"name": "window"}
    window["mechanism"] = {"name": "sliding-window", "last": "7D", "release": "gaussian"}
    window["cluster"] = {"executor": "local"}
    for doc in (whole, window):
        doc["privacy"] = {"epsilon": 0.9, "delta": 1e-6}
        doc["budget"].update(total_epsilon=1.0, total_delta=1e-5)
    return {"whole": whole, "window": window}


@pytest.mark.parametrize("first", ["whole", "window"])
def test_a_window_job_and_a_whole_store_job_share_the_books_in_either_order(tmp_path: Path, write_spec: Any,
                                                                            capsys: Any, first: str) -> None:
    store = daily_store(tmp_path / "days.zarr", days=4)
    docs = _docs(tmp_path, store)
    second = "window" if first == "whole" else "whole"
    specs = {name: write_spec(doc) for name, doc in docs.items()}
    assert main(["run", str(specs[first]), "--date", DATE]) == 0
    capsys.readouterr()
    assert main(["run", str(specs[second]), "--date", DATE]) == 3
    err = capsys.readouterr().err
    assert "budget exceeded for dataset 'ds'" in err and "on partition 't:2026-11-0" in err

    ledger = Ledger(tmp_path / "ledger.sqlite")
    (charged,) = [e for e in ledger.entries(["ds"]) if e.status == CHARGED]
    days = ("t:2026-11-01", "t:2026-11-02", "t:2026-11-03", "t:2026-11-04")
    assert charged.job_id == f"{first}@{DATE}" and charged.partitions == days
    budget = ledger.budget("ds")
    assert budget.spent_epsilon <= 1.0 and budget.worst_partition in days
    assert main(["budget", "show", "--ledger", str(tmp_path / "ledger.sqlite")]) == 0
    shown = capsys.readouterr().out
    assert f"dataset 'ds': worst-off partition epsilon={budget.spent_epsilon:.4g} of 1" in shown


def test_a_reingested_copy_of_the_same_rows_gets_no_fresh_budget_for_a_window_job(tmp_path: Path, write_spec: Any,
                                                                                  capsys: Any) -> None:
    store = daily_store(tmp_path / "days.zarr", days=4)
    docs = _docs(tmp_path, store)
    assert main(["run", str(write_spec(docs["window"])), "--date", DATE]) == 0
    copy = daily_store(tmp_path / "copy.zarr", days=4)  # the same rows, ingested again: a new store id
    doc = json.loads(json.dumps(docs["window"]))
    doc["job"] = {"name": "again"}
    doc["data"]["store"] = copy
    capsys.readouterr()
    assert main(["run", str(write_spec(doc)), "--date", DATE]) == 2  # another store under the key: refused
    assert "was budgeted on store" in capsys.readouterr().err
    assert main(["run", str(write_spec(doc)), "--date", DATE, "--allow-new-store"]) == 3  # allowed: the same days
    assert "on partition 't:2026-11-0" in capsys.readouterr().err
    entries = Ledger(tmp_path / "ledger.sqlite").entries(["ds"])
    assert [(e.job_id, e.status) for e in entries] == [(f"window@{DATE}", CHARGED), (f"again@{DATE}", "refused")]


def test_a_dry_run_tries_the_partitions_the_run_reserves(tmp_path: Path, write_spec: Any, capsys: Any) -> None:
    """A whole-store job's dry run tries its reservation on the store's partitions, as the run makes it: an attempt
    that stopped after its reservation is one the run resumes (the same partitions), and a day that other releases
    spent is refused by the dry run as by the run."""
    from dppca_dask.accounting import EpsilonDeltaDpEvent
    from dppca_dask.jobs import load_job
    from dppca_dask.jobs.plan import plan_job
    from dppca_dask.ledger import partition_identities
    from dppca_dask.storage import open_matrix

    store = daily_store(tmp_path / "days.zarr", days=4)
    doc = _docs(tmp_path, store)["whole"]
    path = write_spec(doc)
    spec = load_job(str(path))
    opened = open_matrix(store)
    plan = plan_job(spec, opened)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.reserve("ds", f"whole@{DATE}", epsilon=0.9, delta=1e-6, events=plan.events, mechanism=spec.mechanism,
                   neighbouring=plan.neighbouring, job_name=spec.name, partitions=partition_identities(opened))
    capsys.readouterr()
    assert main(["run", str(path), "--date", DATE, "--dry-run", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "would-resume"
    ledger.release("ds", f"whole@{DATE}")
    ledger.reserve("ds", "other", epsilon=0.9, delta=0.0, events=[EpsilonDeltaDpEvent(0.9)], mechanism="m",
                   neighbouring=plan.neighbouring, partitions=["t:2026-11-03"])
    assert main(["run", str(path), "--date", DATE, "--dry-run"]) == 3
    assert "on partition 't:2026-11-03'" in capsys.readouterr().err
