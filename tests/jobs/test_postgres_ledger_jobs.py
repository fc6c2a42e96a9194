"""Jobs on a PostgreSQL ledger: eight `dppca-dask run` processes of (0.5, 1e-7) started at once against a total of
(1, 1e-6) succeed exactly as many times as the same jobs run one after another on a SQLite ledger; the others exit 3,
and the ledger's books agree with an independent recomputation."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from jobs_helpers import base_doc, daily_store, render

from dppca_dask.accounting import epsilon_for
from dppca_dask.cli import main
from dppca_dask.ledger import CHARGED, Ledger

DATE = "2026-11-03"
REPO = Path(__file__).resolve().parents[2]
JOBS = 8


def _spec(tmp_path: Path, store: str, ledger: str, name: str) -> Path:
    doc = base_doc(tmp_path, store)
    doc["mechanism"] = {"name": "analyze-gauss", "n_components": 2, "center": "none"}
    doc["privacy"] = {"epsilon": 0.5, "delta": 1e-7}
    doc["budget"] = {"ledger": ledger, "dataset": "ds", "total_epsilon": 1.0, "total_delta": 1e-6}
    doc["cluster"] = {"executor": "local"}
    doc["output"] = {"path": str(tmp_path / name / "{id}" / "{date}")}  # one directory per job id
    path = tmp_path / f"{name}.toml"
    path.write_text(render(doc))
    return path


def _init(ledger: str) -> None:
    assert main(["budget", "init", "--ledger", ledger, "--dataset", "ds", "--total-epsilon", "1",
                 "--total-delta", "1e-6"]) == 0


@pytest.mark.slow
def test_concurrent_jobs_on_postgres_succeed_as_often_as_sequential_ones_on_sqlite(tmp_path: Path, postgres_url: str,
                                                                                   capsys: Any) -> None:
    store = daily_store(tmp_path / "days.zarr", days=3)
    sqlite = str(tmp_path / "ledger.sqlite")
    _init(sqlite)
    spec = _spec(tmp_path, store, sqlite, "sequential")
    sequential = [main(["run", str(spec), "--date", DATE, "--job-id", f"job-{i}"]) for i in range(JOBS)]
    assert set(sequential) <= {0, 3} and 0 < sequential.count(0) < JOBS

    _init(postgres_url)
    capsys.readouterr()
    spec = _spec(tmp_path, store, postgres_url, "concurrent")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "dppca_dask", "run", str(spec), "--date", DATE, "--job-id",
                               f"job-{i}"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(JOBS)]
    results = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    assert sorted(codes) == sorted(sequential), [err[-2000:] for c, (_, err) in zip(codes, results) if c not in (0, 3)]
    for code, (_, err) in zip(codes, results):
        assert code == 0 or "budget exceeded for dataset 'ds'" in err

    budget = Ledger(postgres_url).budget("ds")
    charged = [e for e in budget.entries if e.status == CHARGED]
    assert len(charged) == sequential.count(0)
    assert all(len(e.partitions) == 3 for e in charged)  # every partition of the store
    independent = epsilon_for([event for e in charged for event in e.events], delta=1e-6)
    assert budget.spent_epsilon == pytest.approx(independent, abs=2e-4) and budget.spent_epsilon <= 1.0
    assert budget.spent_epsilon == pytest.approx(Ledger(sqlite).budget("ds").spent_epsilon)
