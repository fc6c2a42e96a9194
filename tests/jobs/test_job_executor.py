"""Where a job runs and which matrix it reads: ``[cluster] executor`` and ``[data.ingest] layer``.

Both used to be ``[mechanism]`` parameters passed through to ``pca()``. The executor is an execution choice (the
``[cluster]`` table's), decided as every release decides it, from the store's declared width and partition count;
the layer says which matrix of an AnnData source the job's store holds (the ``[data.ingest]`` table's). Either one
in ``[mechanism]`` is refused with the table it belongs in; the dry run prints both.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from jobs_helpers import base_doc, daily_store

from dppca_dask.cli import main
from dppca_dask.coordinator.client import EXECUTORS
from dppca_dask.errors import JobSpecError
from dppca_dask.jobs import parse_job, run_job
from dppca_dask.jobs.spec import CLUSTER_EXECUTORS

DATE = "2026-11-20"

CASES = [
    (lambda d: d["mechanism"].update(executor="local"),
     r'\[mechanism\] executor does not belong in \[mechanism\]: where the run executes is set in \[cluster\]: '
     r'executor = "auto", "local" or "cluster"'),
    (lambda d: d["mechanism"].update(layer="counts"),
     r"\[mechanism\] layer does not belong in \[mechanism\]: .*\[data.ingest\] source = \"FILE.h5ad\", "
     r"layer = \"NAME\""),
    (lambda d: d.update(mechanism={"name": "private-low-rank", "rank": 2, "executor": "cluster"}),
     r"\[mechanism\] executor does not belong in \[mechanism\].*\[cluster\]"),
    (lambda d: d.update(mechanism={"name": "topics", "n_topics": 2, "layer": "x"}),
     r"\[mechanism\] layer does not belong in \[mechanism\].*\[data.ingest\]"),
    (lambda d: d["data"].update(layer="counts"),
     r"\[data\] layer: a job reads its store's matrix; .*\[data.ingest\] source = \"FILE.h5ad\", layer"),
    (lambda d: d.update(cluster={"executor": "threads"}),
     r"\[cluster\] executor must be one of 'auto', 'local', 'cluster'; got 'threads'"),
    (lambda d: d.update(cluster={"executor": 1}), r"\[cluster\] executor must be one of .*; got 1"),
    (lambda d: d.update(cluster={"executor": "local", "address": "tcp://h:1"}),
     r"\[cluster\] executor = \"local\" runs in this process, but \[cluster\] address = 'tcp://h:1' names a "
     r"scheduler; drop one of them"),
    (lambda d: d.update(cluster={"executor": "local", "n_workers": 2}),
     r"\[cluster\]: n_workers and memory_limit shape the embedded cluster, and executor = \"local\" runs in this "
     r"process"),
    (lambda d: d["data"].update(ingest={"source": "cells.h5ad", "layer": ""}),
     r"\[data.ingest\] layer must be the name of an AnnData layer .*got ''"),
    (lambda d: d["data"].update(ingest={"source": "cells.h5ad", "layer": "a/b"}),
     r"\[data.ingest\] layer must be the name of an AnnData layer"),
    (lambda d: d["data"].update(ingest={"source": "x.svm", "format": "svmlight", "layer": "counts"}),
     r"\[data.ingest\] layer applies to AnnData sources \(.h5ad, .zarr\); got format = 'svmlight'"),
]


@pytest.mark.parametrize(("mutate", "message"), CASES)
def test_misplaced_and_bad_settings_are_refused_naming_the_table(tmp_path: Path, mutate: Any,
                                                                  message: str) -> None:
    doc = copy.deepcopy(base_doc(tmp_path, "store.zarr"))
    mutate(doc)
    with pytest.raises(JobSpecError, match=message):
        parse_job(doc, source="job.toml", base_dir=str(tmp_path))


def test_the_settings_parse_where_they_belong(tmp_path: Path) -> None:
    assert CLUSTER_EXECUTORS == EXECUTORS  # the job's values are the library's
    doc = base_doc(tmp_path, "store.zarr")
    spec = parse_job(doc, source="job.toml", base_dir=str(tmp_path))
    assert spec.cluster.executor == "auto" and "executor" not in spec.to_dict()["cluster"]
    doc["cluster"] = {"executor": "local"}
    doc["data"]["ingest"] = {"source": "cells.h5ad", "layer": "counts", "n_features": 20}
    spec = parse_job(doc, source="job.toml", base_dir=str(tmp_path))
    assert spec.cluster.executor == "local" and spec.to_dict()["cluster"] == {"executor": "local"}
    assert spec.data.ingest is not None and spec.data.ingest["layer"] == "counts"
    assert "executor" not in spec.parameters and "layer" not in spec.parameters
    doc["cluster"] = {"executor": "cluster", "n_workers": 2, "memory_limit": "1GiB"}
    assert parse_job(doc, source="job.toml", base_dir=str(tmp_path)).cluster.n_workers == 2


def test_a_job_runs_where_cluster_executor_says(tmp_path: Path, small_store: str, write_spec: Any,
                                                local_client: Any) -> None:
    # "local" runs in this process even with a Dask client active; "auto" then uses the active client.
    outcomes = {}
    for executor in ("local", "auto"):
        doc = base_doc(tmp_path / executor, small_store, n_iter=2)
        doc["cluster"] = {"executor": executor}
        spec = parse_job(doc, source="job.toml", base_dir=str(tmp_path))
        write_spec(doc)
        outcomes[executor] = run_job(spec, date=DATE)
    assert outcomes["local"].result.provenance["executor"] == "in-process"
    assert outcomes["auto"].result.provenance["executor"] == "cluster"
    assert json.loads(Path(outcomes["local"].output, "job.json").read_text())["spec"]["cluster"] == \
        {"executor": "local"}


def test_a_client_given_with_executor_local_fails_before_anything_is_reserved(
        tmp_path: Path, small_store: str, write_spec: Any, local_client: Any) -> None:
    from dppca_dask.errors import InvalidParameterError
    from dppca_dask.ledger import Ledger

    doc = base_doc(tmp_path, small_store)
    doc["cluster"] = {"executor": "local"}
    write_spec(doc)
    with pytest.raises(InvalidParameterError, match="executor='local' runs in this process, but a Dask client"):
        run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date=DATE, client=local_client)
    assert Ledger(tmp_path / "ledger.sqlite").budget("ds").entries == ()


def _anndata(path: Path, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    import anndata

    x = rng.poisson(0.3, size=(300, 20)).astype(np.float32)
    counts = rng.poisson(2.0, size=(300, 20)).astype(np.float32)
    anndata.AnnData(X=sp.csr_matrix(x), layers={"counts": sp.csr_matrix(counts)}).write_h5ad(path)
    return x, counts


def test_a_job_ingests_the_layer_and_the_dry_run_says_where_it_runs(tmp_path: Path, write_spec: Any,
                                                                    rng: np.random.Generator, capsys: Any) -> None:
    from dppca_dask.storage import open_matrix

    source = tmp_path / "cells.h5ad"
    _, counts = _anndata(source, rng)
    store = tmp_path / "cells.zarr"
    doc = base_doc(tmp_path, str(store), n_iter=2)
    doc["privacy"]["epsilon"] = 0.3  # the dry run of a second date below must fit the budget
    doc["data"]["ingest"] = {"source": str(source), "layer": "counts", "n_features": 20}
    doc["cluster"] = {"executor": "local"}
    spec_path = write_spec(doc)
    outcome = run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date=DATE)
    assert outcome.status == "completed" and outcome.result.provenance["executor"] == "in-process"
    np.testing.assert_array_equal(open_matrix(store).to_scipy().toarray(), counts)  # the layer, not X

    assert main(["run", str(spec_path), "--dry-run", "--date", "2026-11-21", "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["layer"] == "counts"
    assert checked["executor"]["asked"] == "local" and checked["executor"]["executor"] == "in-process"
    assert main(["run", str(spec_path), "--dry-run", "--date", "2026-11-21"]) == 0
    out = capsys.readouterr().out
    assert 'executor: in-process ([cluster] executor = "local": executor=\'local\' was asked for)' in out
    assert f"data: layer 'counts' of {source} ([data.ingest] layer)" in out
    assert f"the run would first ingest layer 'counts' of '{source}'" in out


def test_run_executor_overrides_the_spec(tmp_path: Path, small_store: str, write_spec: Any, capsys: Any) -> None:
    import dask.config

    doc = base_doc(tmp_path, small_store)
    spec_path = write_spec(doc)
    with dask.config.set({"dppca_dask.cluster.use-active-client": False}):
        assert main(["run", str(spec_path), "--dry-run", "--date", DATE, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["executor"] == {
            "asked": "auto", "executor": "in-process",
            "reason": "4 partition(s) (limit 16) and 300 columns (limit 100000; dppca_dask.executor.in-process-max-*)"}
        assert main(["run", str(spec_path), "--dry-run", "--date", DATE, "--json", "--executor", "cluster"]) == 0
        assert json.loads(capsys.readouterr().out)["executor"]["executor"] == "cluster"
    assert main(["run", str(spec_path), "--date", DATE, "--executor", "local", "--scheduler", "tcp://h:1"]) == 2
    assert 'executor = "local" runs in this process' in capsys.readouterr().err


def test_a_window_jobs_dry_run_decides_the_executor_from_the_window(tmp_path: Path, write_spec: Any,
                                                                    capsys: Any) -> None:
    """The window's partition count (public: the partition table and the requested window) decides where a
    sliding-window release runs; the dry run prints the decision the run makes, not the whole store's."""
    import dask.config

    doc = base_doc(tmp_path, daily_store(tmp_path / "days.zarr", days=5))
    doc["job"] = {"name": "win"}
    doc["mechanism"] = {"name": "sliding-window", "last": "2D", "release": "gaussian"}
    spec_path = write_spec(doc)
    with dask.config.set({"dppca_dask.executor.in-process-max-partitions": 3,
                          "dppca_dask.cluster.use-active-client": False}):
        assert main(["run", str(spec_path), "--dry-run", "--date", "2026-11-05", "--json"]) == 0
        checked = json.loads(capsys.readouterr().out)
        assert checked["status"] == "would-run" and checked["executor"]["executor"] == "in-process"
        assert "2 partition(s) (limit 3)" in checked["executor"]["reason"]  # the window's, not the store's 5
        assert checked["remaining_epsilon_after"] is not None
        outcome = run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-05")
        assert outcome.status == "completed"
        assert outcome.result.provenance["executor"] == checked["executor"]["executor"]
        assert main(["run", str(spec_path), "--dry-run", "--date", "2026-11-05", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["status"] == "already-completed"
    # a day's file still to be appended: the dry run checks it exists, and plans the window with the day's
    # partition (5) stamped with the date, from the partition table
    doc["data"]["append"] = {"source": str(tmp_path / "{date}.parquet"), "row_column": "r", "col_column": "c"}
    assert main(["run", str(write_spec(doc)), "--dry-run", "--date", "2026-11-06"]) == 2
    assert "[data.append] source" in capsys.readouterr().err
    (tmp_path / "2026-11-06.parquet").write_bytes(b"")  # not read: the append reads and checks it
    doc["job"] = {"name": "win-next"}
    doc["privacy"]["epsilon"] = 0.1  # partition 4 has spent 0.8 of its 1 (above)
    with dask.config.set({"dppca_dask.executor.in-process-max-partitions": 1,
                          "dppca_dask.cluster.use-active-client": False}):
        assert main(["run", str(write_spec(doc)), "--dry-run", "--date", "2026-11-06", "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["status"] == "would-run" and checked["executor"]["executor"] == "cluster"
    assert checked["executor"]["reason"].startswith("2 partition(s)")  # partitions 4 and the day's 5
    assert any("would append" in note and "partition 5" in note for note in checked["notes"])


def test_a_window_jobs_dry_run_says_a_run_would_resume_an_interrupted_attempt(tmp_path: Path, write_spec: Any,
                                                                             capsys: Any) -> None:
    """An attempt stopped after its reservation and before its charge leaves the window's partition keys reserved;
    the run reserves them again unchanged and releases once, and the dry run says so (not "would-run")."""
    from dppca_dask.ledger import CHARGED, Ledger
    from dppca_dask.methods.window.budget import partition_key, reserve_partitions
    from dppca_dask.methods.window.job import plan_window_job
    from dppca_dask.storage import open_matrix

    doc = base_doc(tmp_path, daily_store(tmp_path / "days.zarr"))
    doc["job"] = {"name": "win"}
    doc["mechanism"] = {"name": "sliding-window", "last": "2D", "release": "gaussian"}
    spec_path = write_spec(doc)
    spec = parse_job(doc, source="job.toml", base_dir=str(tmp_path))
    date = "2026-11-03"
    plan = plan_window_job(spec, date, open_matrix(spec.data.store))
    ledger = Ledger(spec.budget.ledger)
    reserve_partitions(ledger, "ds", spec.job_id(date), store=plan.store, partitions=plan.selection.partitions,
                       epsilon=plan.epsilon, delta=plan.delta, events=plan.planned_events)  # then the attempt stops
    assert main(["run", str(spec_path), "--dry-run", "--date", date, "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["status"] == "would-resume"
    assert any("earlier attempt" in note for note in checked["notes"])
    reserved = ledger.budget("ds").remaining_epsilon  # the window's partitions hold this reservation only
    assert checked["remaining_epsilon_after"] == pytest.approx(reserved)  # the reservation counted once, not twice
    assert run_job(spec, date=date).status == "completed"
    (entry,) = ledger.find(spec.job_id(date))  # one entry of the dataset key, on the window's partitions
    names = tuple(partition_key("ds", plan.store, i) for i in plan.selection.partitions)
    assert entry.partitions == names and len(names) == 2 and entry.status == CHARGED
    assert main(["run", str(spec_path), "--dry-run", "--date", date, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "already-completed"


def test_the_dry_run_checks_the_anndata_layer_as_the_ingest_does(tmp_path: Path, write_spec: Any,
                                                                  rng: np.random.Generator, capsys: Any) -> None:
    from dppca_dask.errors import InvalidInputError
    from dppca_dask.ingest import ingest
    from dppca_dask.ledger import Ledger

    source = tmp_path / "cells.h5ad"
    _anndata(source, rng)
    store = tmp_path / "cells.zarr"
    ingest(str(source), str(store), n_features=20, layer="counts")
    doc = base_doc(tmp_path, str(store), n_iter=2)
    doc["data"]["ingest"] = {"source": str(source), "layer": "counts", "n_features": 20}
    assert main(["run", str(write_spec(doc)), "--dry-run", "--date", DATE, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["layer"] == "counts"

    with pytest.raises(InvalidInputError) as raised:  # what the run's ingest would say
        ingest(str(source), str(tmp_path / "other.zarr"), n_features=20, layer="missing")
    doc["data"]["ingest"]["layer"] = "missing"
    code = main(["run", str(write_spec(doc)), "--dry-run", "--date", DATE])
    err = capsys.readouterr().err
    assert code != 0 and str(raised.value) in err and "its layers: counts" in err
    assert Ledger(tmp_path / "ledger.sqlite").budget("ds").entries == ()


@pytest.mark.parametrize("pending", ["append", "spectral-histogram", None])
def test_a_window_jobs_dry_run_checks_the_budget_key_as_the_run_does_first(tmp_path: Path, write_spec: Any,
                                                                           pending: str | None,
                                                                           capsys: Any) -> None:
    """The run's first check is the spec's ``[budget]`` totals against the ledger's key; the dry run makes it
    whatever it leaves to the run (a day's file still to be appended, a spectral histogram's partitions)."""
    from dppca_dask.errors import LedgerError

    doc = base_doc(tmp_path, daily_store(tmp_path / "days.zarr"))
    doc["job"] = {"name": "win"}
    doc["mechanism"] = {"name": "sliding-window", "last": "2D", "release": "gaussian"}
    date = "2026-11-03"
    if pending == "append":
        date = "2026-11-04"
        doc["data"]["append"] = {"source": str(tmp_path / "{date}.parquet"), "row_column": "r", "col_column": "c"}
        (tmp_path / "2026-11-04.parquet").write_bytes(b"")
    elif pending == "spectral-histogram":
        doc["mechanism"]["structure"] = "spectral-histogram"
    write_spec(doc)  # the ledger's key: total ε = 1
    doc["budget"]["total_epsilon"] = 2.0
    spec = parse_job(doc, source="job.toml", base_dir=str(tmp_path))
    with pytest.raises(LedgerError, match="records a total") as raised:
        run_job(spec, date=date)
    assert main(["run", str(write_spec(doc)), "--dry-run", "--date", date]) == 2
    assert str(raised.value) in capsys.readouterr().err  # the same message, naming the ledger itself


def test_a_spectral_histogram_window_over_its_budget_is_refused_by_the_dry_run(tmp_path: Path, write_spec: Any,
                                                                                capsys: Any) -> None:
    """A spectral histogram's run charges the window's partitions and those before it that the structure may
    cover: the dry run tries the same keys, so a window over its budget is refused as the run refuses it."""
    from dppca_dask.errors import BudgetExceededError

    doc = base_doc(tmp_path, daily_store(tmp_path / "days.zarr"))
    doc["job"] = {"name": "win"}
    doc["mechanism"] = {"name": "sliding-window", "last": "2D", "release": "gaussian"}
    write_spec(doc)
    assert run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-03").status == "completed"
    doc["job"] = {"name": "hist"}  # ε 0.8 again on the window's two partitions, of a total of 1
    doc["mechanism"]["structure"] = "spectral-histogram"
    assert main(["run", str(write_spec(doc)), "--dry-run", "--date", "2026-11-03"]) == 3  # budget exceeded
    refusal = capsys.readouterr().err
    assert "budget exceeded" in refusal
    # it names the ledger the run uses, not the dry run's private copy of it
    assert f"ledger '{doc['budget']['ledger']}'" in refusal and "dppca-dry-run-" not in refusal
    with pytest.raises(BudgetExceededError):
        run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-03")
    doc["job"] = {"name": "hist-small"}  # ε 0.1 fits: the dry run says so, with the ε it leaves
    doc["privacy"]["epsilon"] = 0.1
    assert main(["run", str(write_spec(doc)), "--dry-run", "--date", "2026-11-03", "--json"]) == 0
    checked = json.loads(capsys.readouterr().out)
    assert checked["status"] == "would-run" and checked["remaining_epsilon_after"] is not None
    assert "spectral histogram" in checked["releases"][0]


def test_a_window_job_checks_a_scheduler_given_by_the_caller_before_it_appends(tmp_path: Path,
                                                                                write_spec: Any) -> None:
    """A scheduler address handed to the run is checked, as ``[cluster] address`` is, before the day's file is
    appended: an unreachable scheduler leaves the store as it was."""
    import socket

    from dppca_dask.storage import open_matrix

    store = daily_store(tmp_path / "days.zarr")
    doc = base_doc(tmp_path, store)
    doc["job"] = {"name": "win"}
    doc["mechanism"] = {"name": "sliding-window", "last": "2D", "release": "gaussian"}
    doc["data"]["append"] = {"source": str(tmp_path / "{date}.svm")}
    (tmp_path / "2026-11-04.svm").write_text("0 1:0.1 3:0.2\n1 2:0.3\n")
    write_spec(doc)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(Exception) as raised:
        run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-11-04", client=address)
    assert "127.0.0.1" in str(raised.value)
    assert open_matrix(store).n_partitions == 3  # nothing appended
