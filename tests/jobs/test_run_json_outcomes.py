"""``dppca-dask run --json``: exactly one JSON object on standard output on every outcome (completed, already
completed, refused over budget, invalid), with the exit code in it; a reader that goes away early (``| head -1``)
does not turn a completed job into a failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jobs_helpers import REPO, base_doc, daily_store

from dppca_dask.cli import main


def _objects(out: str) -> list[dict[str, object]]:
    lines = [line for line in out.splitlines() if line.strip()]
    return [json.loads(line) for line in lines]


@pytest.fixture
def spec(tmp_path: Path, write_spec) -> Path:
    store = daily_store(tmp_path / "days.zarr")
    doc = base_doc(tmp_path, store, n_iter=2)
    doc["cluster"] = {"executor": "local"}
    return write_spec(doc)


def test_every_outcome_prints_one_json_object_with_its_exit_code(spec: Path, tmp_path: Path, capsys) -> None:
    args = ["run", str(spec), "--json"]
    assert main([*args, "--date", "2026-01-01"]) == 0
    out, err = capsys.readouterr()
    (done,) = _objects(out)
    assert done["exit_code"] == 0 and done["status"] == "completed" and done["job_id"] == "test-job@2026-01-01"

    assert main([*args, "--date", "2026-01-01"]) == 0
    (again,) = _objects(capsys.readouterr().out)
    assert again["exit_code"] == 0 and again["status"] == "already-completed"

    assert main([*args, "--date", "2026-01-02"]) == 3  # 0.8 + 0.8 > 1.0
    out, err = capsys.readouterr()
    (refused,) = _objects(out)
    assert refused["exit_code"] == 3 and refused["status"] == "refused"
    assert refused["job_id"] == "test-job@2026-01-02" and "budget exceeded" in str(refused["error"])
    assert len(err.strip().splitlines()) == 1 and str(refused["error"]) in err

    assert main([*args, "--date", "2026-13-40"]) == 2
    (invalid,) = _objects(capsys.readouterr().out)
    assert invalid["exit_code"] == 2 and invalid["status"] == "invalid" and "YYYY-MM-DD" in str(invalid["error"])

    assert main(["run", str(tmp_path / "missing.toml"), "--json"]) == 2  # before the spec is even read
    (missing,) = _objects(capsys.readouterr().out)
    assert missing["exit_code"] == 2 and missing["job_id"] is None


def test_a_reader_that_goes_away_early_leaves_the_exit_code_of_the_job(spec: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    for extra in ([], ["--json"]):
        proc = subprocess.Popen([sys.executable, "-m", "dppca_dask", "run", str(spec), "--date", "2026-01-01",
                                 *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env=env)
        assert proc.stdout is not None
        proc.stdout.close()  # `| head -0`: every write to standard output fails
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
        assert b"Traceback" not in err and b"Exception ignored" not in err, err.decode()
