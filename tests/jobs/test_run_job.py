"""``dppca-dask run``: the examples end to end, idempotence per job id and date, refusals, what failures do to the
ledger, and a coordinator killed mid-job and resumed from its released checkpoint."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jobs_helpers import JOBS, REPO, W8A, base_doc, declare_schema

from dppca_dask.cli import main
from dppca_dask.ledger import CHARGED, REFUSED, RESERVED, Ledger

needs_w8a = pytest.mark.skipif(not W8A.exists(), reason="shared/data/w8a.svm is not beside the project")


def _overrides(tmp_path: Path, **paths: str) -> list[str]:
    out = []
    for key, value in paths.items():
        out += ["--set", f"{key}={json.dumps(value)}"]
    return out


@needs_w8a
def test_example_job_twice_then_refused_and_budget_show(tmp_path: Path, local_client, capsys) -> None:
    address = local_client.scheduler.address
    assert main(["budget", "init", "--ledger", str(tmp_path / "ledger.sqlite"), "--dataset", "w8a",
                 "--total-epsilon", "1", "--total-delta", "1e-6"]) == 0
    args = ["run", str(JOBS / "example.toml"), "--scheduler", address, *_overrides(
        tmp_path, **{"data.store": str(tmp_path / "w8a.zarr"), "budget.ledger": str(tmp_path / "ledger.sqlite"),
                     "output.path": str(tmp_path / "out" / "{date}")})]
    assert main([*args, "--date", "2026-01-01"]) == 0
    first = capsys.readouterr().out
    assert "job w8a-pca@2026-01-01: completed" in first and "add/remove one row" in first
    out = tmp_path / "out" / "2026-01-01"
    assert sorted(os.listdir(out)) == ["components.zarr", "job.json", "result.json"]  # no checkpoint, no .pending
    result = json.loads((out / "result.json").read_text())
    assert result["privacy"]["epsilon"] == pytest.approx(0.8, rel=1e-3) and result["private"] is True

    assert main([*args, "--date", "2026-01-01"]) == 0  # idempotent per job id and date
    assert "already completed; nothing released or charged again" in capsys.readouterr().out
    # the same job id with another epsilon is refused: the saved result is not what this spec asks for
    assert main([*args, "--date", "2026-01-01", "--set", "privacy.epsilon=0.5"]) == 2
    err = capsys.readouterr().err
    assert "already has an entry for dataset 'w8a' with other parameters" in err and "epsilon=0.8" in err

    assert main([*args, "--date", "2026-01-02"]) == 3  # the next day's run does not fit the budget
    err = capsys.readouterr().err.strip()
    assert "budget exceeded for dataset 'w8a'" in err and "requested (epsilon=0.8" in err and "\n" not in err

    assert main(["budget", "show", "--ledger", str(tmp_path / "ledger.sqlite")]) == 0
    shown = capsys.readouterr().out
    assert "w8a-pca@2026-01-01" in shown and "charged (succeeded)" in shown
    assert "w8a-pca@2026-01-02" in shown and "refused (over budget)" in shown
    assert main(["budget", "show", "--ledger", str(tmp_path / "ledger.sqlite"), "--dataset", "w8a", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["datasets"][0]
    assert data["sum_epsilon"] == pytest.approx(0.8) and data["spent_epsilon"] < 0.8
    assert [h["status"] for h in data["history"]] == [CHARGED, REFUSED]
    assert main(["budget", "show", "--ledger", str(tmp_path / "none.sqlite")]) == 2


@needs_w8a
def test_warehouse_example_ingests_parquet_and_runs(tmp_path: Path, local_client, capsys) -> None:
    warehouse = tmp_path / "warehouse"
    subprocess.run([sys.executable, str(JOBS / "sample_warehouse.py"), str(warehouse), "--files", "3"], check=True,
                   capture_output=True)
    assert len(list(warehouse.glob("*.parquet"))) == 3
    assert main(["budget", "init", "--ledger", str(tmp_path / "ledger.sqlite"), "--dataset", "warehouse-w8a",
                 "--total-epsilon", "2", "--total-delta", "1e-6"]) == 0
    capsys.readouterr()
    args = ["run", str(JOBS / "warehouse-nightly.toml"), "--scheduler", local_client.scheduler.address,
            "--json", "--date", "2026-02-01", *_overrides(
                tmp_path, **{"data.ingest.source": str(warehouse), "data.store": str(tmp_path / "wh.zarr"),
                             "data.ingest.column_ids": str(tmp_path / "warehouse-columns.txt"),
                             "budget.ledger": str(tmp_path / "ledger.sqlite"),
                             "output.path": str(tmp_path / "out" / "{date}")})]
    assert main(args) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["status"] == "completed" and outcome["ledger"]["status"] == CHARGED
    from dppca_dask.results import load_result
    from dppca_dask.storage import open_matrix

    from sklearn.datasets import load_svmlight_file

    matrix = load_svmlight_file(str(W8A))[0]
    non_empty = int((matrix.getnnz(axis=1) > 0).sum())  # a triplet table has no trace of an all-zero row
    store = open_matrix(tmp_path / "wh.zarr")
    assert store.shape == (non_empty, 300) and store.nnz == matrix.nnz
    assert store.schema == "declared"  # the spec's n_features and column ids reached the ingest
    result = load_result(outcome["output"])
    assert result.components.shape == (2, 300)
    assert list(result.privacy.caveats) == [] and result.provenance["input"]["schema"] == "declared"


def test_failure_before_noise_returns_the_reservation(tmp_path: Path, small_store: str, local_client,
                                                      write_spec, capsys) -> None:
    broken = tmp_path / "broken.zarr"
    shutil.copytree(small_store, broken)
    chunks = sorted(p for p in (broken / "X" / "data").rglob("*") if p.is_file() and p.name != "zarr.json")
    chunks[-1].unlink()  # a lost chunk of the last partition: found only when the data is read
    spec = write_spec(base_doc(tmp_path, str(broken)))
    assert main(["run", str(spec), "--scheduler", local_client.scheduler.address, "--date", "2026-01-01"]) == 2
    assert "missing" in capsys.readouterr().err.lower()
    # The preflight reads every partition before the reservation: nothing was reserved, nothing to return.
    ledger = Ledger(tmp_path / "ledger.sqlite")
    assert ledger.entry("ds", "test-job@2026-01-01") is None


def test_failure_after_noise_keeps_the_charge_and_is_not_run_again(tmp_path: Path, small_store: str, local_client,
                                                                   write_spec, capsys) -> None:
    doc = base_doc(tmp_path, small_store)
    doc["mechanism"] = {"name": "private-power", "coherence": 1.0, "n_iter": 3}  # C = 1 fails its check
    spec = write_spec(doc)
    args = ["run", str(spec), "--scheduler", local_client.scheduler.address, "--date", "2026-01-01"]
    assert main(args) == 4
    assert "coherence" in capsys.readouterr().err
    entry = Ledger(tmp_path / "ledger.sqlite").entry("ds", "test-job@2026-01-01")
    assert (entry.status, entry.outcome) == (CHARGED, "failed")
    assert main(args) == 3  # a second release under the same job id would spend twice
    assert "failed after reading its data" in capsys.readouterr().err


def test_crash_between_charge_and_result_is_finished_by_a_rerun(tmp_path: Path, small_store: str, local_client,
                                                               write_spec, capsys) -> None:
    spec = write_spec(base_doc(tmp_path, small_store))
    args = ["run", str(spec), "--scheduler", local_client.scheduler.address, "--date", "2026-01-01"]
    assert main(args) == 0
    out = tmp_path / "out" / "test-job" / "2026-01-01"
    before = json.loads((out / "result.json").read_text())
    (out / ".pending").mkdir()  # the state a crash right after the charge leaves behind
    for name in ("result.json", "components.zarr"):
        os.replace(out / name, out / ".pending" / name)
    capsys.readouterr()
    assert main(args) == 0
    assert "already completed" in capsys.readouterr().out
    assert json.loads((out / "result.json").read_text()) == before and not (out / ".pending").exists()


@pytest.fixture(scope="module")
def medium_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """120,000 x 400, 10 partitions: a pass takes long enough to kill a job between two releases (read only)."""
    from dppca_dask.datasets import PlantedSpec, write_low_coherence

    store = tmp_path_factory.mktemp("killed-mid-job") / "medium.zarr"
    write_low_coherence(store, PlantedSpec(n_rows=120_000, n_cols=400, nnz_per_row=25, support=60,
                                           signal_share=0.02, seed=3), rows_per_partition=12_000, progress=False)
    declare_schema(store)
    return store


@pytest.mark.parametrize("mechanism", [
    pytest.param({"name": "adaptive-power"}, id="sequential"),
    pytest.param({"name": "adaptive-power-block", "n_components": 2}, id="block", marks=pytest.mark.slow),
])
def test_coordinator_killed_mid_job_resumes_from_its_last_release(tmp_path: Path, medium_store: Path, local_client,
                                                                 write_spec, mechanism: dict) -> None:
    """SIGKILL the job process after some releases; the re-run continues under the same reservation from the
    checkpoint, keeps the released iterations (same thresholds) and is charged once."""
    store = medium_store
    n_iter = 20  # killed after 3 releases: 17 passes (seconds) are left to kill it in
    spec = write_spec(base_doc(tmp_path, str(store), **{**mechanism, "n_iter": n_iter, "persist": False}))
    args = [sys.executable, "-m", "dppca_dask", "run", str(spec), "--scheduler", local_client.scheduler.address,
            "--date", "2026-01-01"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    checkpoint = tmp_path / "out" / "test-job" / "2026-01-01" / "checkpoint.json"
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        saved = None
        while time.monotonic() < deadline and proc.poll() is None:
            if checkpoint.exists():
                try:
                    saved = json.loads(checkpoint.read_text())
                except json.JSONDecodeError:  # pragma: no cover - os.replace makes this atomic
                    saved = None
                if saved and saved["releases"] >= 3:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
            time.sleep(0.01)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode() if proc.stderr else ""
    saved = json.loads(checkpoint.read_text())  # the last checkpoint written before the kill
    done = saved["releases"]
    assert 3 <= done < n_iter
    ledger = Ledger(tmp_path / "ledger.sqlite")
    assert ledger.entry("ds", "test-job@2026-01-01").status == RESERVED

    rerun = subprocess.run([*args, "--json"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    outcome = json.loads(rerun.stdout)
    assert outcome["status"] == "resumed-and-completed" and outcome["resumed_from"] == done
    entry = ledger.entry("ds", "test-job@2026-01-01")
    assert (entry.status, entry.outcome, entry.attempts) == (CHARGED, "succeeded", 2)
    assert ledger.budget("ds").sum_epsilon == pytest.approx(0.8)  # charged once
    out = tmp_path / "out" / "test-job" / "2026-01-01"
    result = json.loads((out / "result.json").read_text())
    thresholds = result["thresholds"][0]
    assert len(thresholds) == n_iter
    assert thresholds[:done] == saved["state"]["thresholds"][0]  # released values reused, not redrawn
    # as private as an uninterrupted run: the report composes the events the plan reserved
    from dppca_dask.accounting import event_to_json, summarise_events
    from dppca_dask.api import plan_release

    plan = plan_release(400, epsilon=0.8, delta=1e-7, mechanism=mechanism["name"], n_iter=n_iter,
                        n_components=mechanism.get("n_components", 1))
    assert result["privacy"]["events"] == json.loads(json.dumps([event_to_json(e)
                                                                 for e in summarise_events(plan.events)]))
    assert result["privacy"]["epsilon"] <= 0.8 + 1e-9
    if mechanism["name"] == "adaptive-power":
        assert result["privacy"]["epsilon"] == pytest.approx(0.8, rel=1e-3)
    assert not checkpoint.exists()


def test_a_lost_checkpoint_after_a_release_is_never_restarted_with_fresh_noise(tmp_path: Path, small_store: str,
                                                                                write_spec, capsys) -> None:
    """The state a crash leaves when the job had written a released iterate, and the checkpoint then went missing
    (deleted, or the output path edited): running the job id again must not start over."""
    from dppca_dask.jobs import load_job
    from dppca_dask.jobs.runner import _plan
    from dppca_dask.storage import open_matrix

    path = write_spec(base_doc(tmp_path, small_store))
    spec = load_job(path)
    neighbouring, events = _plan(spec, open_matrix(small_store))
    ledger = Ledger(spec.budget.ledger)
    ledger.reserve("ds", "test-job@2026-01-01", epsilon=0.8, delta=1e-7, events=events, mechanism="adaptive-power",
                   neighbouring=neighbouring, total_epsilon=1.0, total_delta=1e-6)
    ledger.note_first_release("ds", "test-job@2026-01-01")
    assert main(["run", str(path), "--scheduler", "tcp://127.0.0.1:1", "--date", "2026-01-01"]) == 3
    assert "no checkpoint or complete result of it was found" in capsys.readouterr().err
    entry = ledger.entry("ds", "test-job@2026-01-01")
    assert (entry.status, entry.outcome) == (CHARGED, "failed")  # it released: the ledger now says spent
    with pytest.raises(Exception, match="never refunded"):
        ledger.release("ds", "test-job@2026-01-01")


def test_a_failure_that_kept_the_charge_resumes_from_its_checkpoint_as_a_second_attempt(
        tmp_path: Path, small_store: str, write_spec, capsys, monkeypatch) -> None:
    """A failure after the first released iterate keeps the charge and the checkpoint; running the job id again
    continues from that checkpoint under the charge, and the history counts it as the job's second attempt."""
    from dppca_dask.jobs import steps

    def fail_after_the_first_release(name: str) -> None:
        if name == "checkpoint":
            raise RuntimeError("injected failure after a released iterate")

    path = write_spec(base_doc(tmp_path, small_store))
    args = ["run", str(path), "--date", "2026-01-01"]
    with monkeypatch.context() as patched:
        patched.setattr(steps, "_kill_point", fail_after_the_first_release)
        assert main(args) == 1
    assert "RuntimeError" in capsys.readouterr().err
    ledger = Ledger(tmp_path / "ledger.sqlite")
    entry = ledger.entry("ds", "test-job@2026-01-01")
    assert (entry.status, entry.outcome, entry.attempts) == (CHARGED, "failed", 1)
    assert main([*args, "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["status"] == "resumed-and-completed"  # from the checkpoint, under the charge
    entry = ledger.entry("ds", "test-job@2026-01-01")
    assert (entry.status, entry.outcome, entry.attempts) == (CHARGED, "succeeded", 2)
    assert outcome["ledger"]["attempts"] == 2 and outcome["partition_keys"] is None
    assert ledger.budget("ds").sum_epsilon == pytest.approx(0.8)  # charged once


def test_two_runs_of_one_job_at_once_are_refused(tmp_path: Path, small_store: str, write_spec, capsys) -> None:
    from dppca_dask.jobs import load_job
    from dppca_dask.jobs.steps import job_lock

    path = write_spec(base_doc(tmp_path, small_store))
    spec = load_job(path)
    with job_lock(Ledger(spec.budget.ledger), "ds", "test-job@2026-01-01"):  # as if another process were running it
        assert main(["run", str(path), "--date", "2026-01-01"]) == 2
    assert "already running in another process" in capsys.readouterr().err
    assert Ledger(spec.budget.ledger).entry("ds", "test-job@2026-01-01") is None
