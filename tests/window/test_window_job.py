"""The example nightly job ``jobs/window-nightly.toml`` run on two dates: appends the day, releases the window,
charges the partitions it read; a re-run of a date spends nothing."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.cli import main
from dppca_dask.errors import BudgetExceededError, JobSpecError
from dppca_dask.jobs import load_job, run_job
from dppca_dask.ledger import CHARGED, Ledger
from dppca_dask.methods.window.budget import partition_key
from dppca_dask.storage import open_matrix

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.InferredSchemaWarning")


def _sample_days():
    spec = importlib.util.spec_from_file_location("sample_days", REPO / "jobs" / "sample_days.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def nightly(tmp_path):
    (tmp_path / "jobs").mkdir()
    shutil.copy(REPO / "jobs" / "window-nightly.toml", tmp_path / "jobs")
    matrix = sp.random(90, 300, density=0.03, random_state=np.random.default_rng(5), format="csr")
    _sample_days().write_days(str(tmp_path / "build" / "days"), matrix, days=3, rows_per_day=30)
    build = tmp_path / "build"
    assert main(["ingest", str(build / "days" / "2026-11-01.parquet"), "--out", str(build / "days.zarr"),
                 "--timestamp", "2026-11-01", "--column-ids", str(build / "days" / "columns.txt"),
                 "--row-column", "user_id", "--col-column", "feature_id"]) == 0
    assert main(["budget", "init", "--ledger", str(build / "days-ledger.sqlite"), "--dataset", "web-days",
                 "--total-epsilon", "3", "--total-delta", "1e-5"]) == 0
    return tmp_path / "jobs" / "window-nightly.toml"


def _run(nightly: Path, date: str):
    # in this process (client "local"); `dppca-dask run` would start the spec's embedded LocalCluster
    return run_job(load_job(nightly), date=date, client="local")


def test_nightly_job_on_two_dates(nightly):
    build = nightly.parent.parent / "build"
    first = _run(nightly, "2026-11-02").to_dict()
    assert first["status"] == "completed" and first["mechanism"] == "sliding-window"
    assert first["privacy"]["neighbouring"] == "add/remove one row"
    assert _run(nightly, "2026-11-03").status == "completed"
    store = open_matrix(build / "days.zarr")
    assert store.n_partitions == 3
    ledger = Ledger(build / "days-ledger.sqlite")
    for index, jobs in ((0, 2), (1, 2), (2, 1)):  # the 7-day window read every day so far
        name = partition_key("web-days", store, index)
        charged = [e for e in ledger.budget("web-days").entries if e.status == CHARGED and name in e.partitions]
        assert len(charged) == jobs and all(e.mechanism == "sliding-window" for e in charged)
        assert len(ledger.counted_on("web-days", name)) == jobs
    saved = json.loads((build / "window-out" / "2026-11-03" / "release.json").read_text())
    assert saved["window"]["n_partitions"] == 3 and saved["window"]["end"] == "2026-11-03T00:00:00+00:00"
    # a re-run of a completed date appends nothing and spends nothing
    assert _run(nightly, "2026-11-03").status == "already-completed"
    assert open_matrix(build / "days.zarr").n_partitions == 3
    assert [e.partitions for e in ledger.find("window-nightly@2026-11-03")] == [
        ("t:2026-11-01", "t:2026-11-02", "t:2026-11-03")]  # one entry, on the three days it read


def test_result_missing_after_the_charge_is_refused(nightly):
    build = nightly.parent.parent / "build"
    _run(nightly, "2026-11-02")
    shutil.rmtree(build / "window-out" / "2026-11-02")
    with pytest.raises(BudgetExceededError, match="second release"):
        _run(nightly, "2026-11-02")


def test_window_job_spec_checks(nightly):
    spec = load_job(nightly)
    assert spec.kind == "window" and spec.data.append["source"].endswith("{date}.parquet")
    with pytest.raises(JobSpecError, match="unknown parameter"):
        load_job(nightly, overrides=['mechanism.ledger="x"'])
    with pytest.raises(JobSpecError, match="unknown key"):
        load_job(nightly, overrides=['data.append.sheet="x"'])
