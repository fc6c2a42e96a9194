"""The table of releases and the ``latest`` pointer of a job whose output is in object storage live in the bucket,
beside the dated outputs (``s3://bucket/results/NAME/releases.parquet`` and ``.../latest``): written after the
dated output's COMPLETE marker, rebuilt from one row object per job id under a lock object (two machines publishing
dates of one job lose no row), read back by :func:`~dppca_dask.jobs.outputs.read_releases` and
:func:`~dppca_dask.jobs.outputs.latest_output`; the job file in the bucket names the URL, never the machine's
mirror."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dppca_dask.jobs.outputs import latest_output, load_latest, load_output, read_releases
from dppca_dask.jobs.runner import run_job
from dppca_dask.jobs.spec import load_job

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    """This process's environment (the test's AWS variables and cache directory) for a child process."""
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _store(path: Path) -> str:
    import scipy.sparse as sp

    from dppca_dask.ingest import ingest

    rng = np.random.default_rng(5)
    ingest(sp.csr_array(rng.standard_normal((60, 6)) * (rng.random((60, 6)) < 0.5)), path, n_features=6,
           rows_per_partition=30)
    return str(path)


def _job_file(tmp_path: Path, output: str, *, name: str, store: Path, make_store: Any, mechanism: list[str],
              epsilon: float, delta: float, file: str) -> str:
    """A job spec over ``store`` (made by ``make_store`` when missing) charged to the test's SQLite ledger (dataset
    ``ds``, a total of (1, 1e-6), created when missing), released in process into ``output``."""
    from dppca_dask.ledger import Ledger

    ledger = tmp_path / "ledger.sqlite"
    if not ledger.exists():
        Ledger.create(ledger).init_dataset("ds", total_epsilon=1.0, total_delta=1e-6)
    if not store.exists():
        make_store(store)
    path = tmp_path / file
    path.write_text("\n".join([
        '[job]', f'name = "{name}"', '[data]', f'store = "{store}"', '[mechanism]', *mechanism,
        '[privacy]', f'epsilon = {epsilon}', f'delta = {delta}',
        '[budget]', f'ledger = "{ledger}"', 'dataset = "ds"', 'total_epsilon = 1.0', 'total_delta = 1e-6',
        '[output]', f'path = "{output}"', '[cluster]', 'executor = "local"',
    ]) + "\n")
    return str(path)


def _spec(tmp_path: Path, output: str, *, epsilon: float = 0.1) -> str:
    return _job_file(tmp_path, output, name="s3-job", store=tmp_path / "x.zarr", make_store=_store,
                     mechanism=['name = "adaptive-power"', 'n_iter = 2', 'center = "none"'], epsilon=epsilon,
                     delta=1e-8, file=f"job-{epsilon}.toml")


def _objects(s3, prefix: str) -> dict[str, bytes]:
    fs = s3.filesystem()
    root = f"{s3.name}/{prefix}"
    return {path[len(root) + 1:]: fs.cat_file(path) for path in fs.find(root)}


def _machine(monkeypatch, tmp_path: Path, name: str) -> Path:
    """Where this "machine" keeps its mirrors (its own cache directory)."""
    cache = tmp_path / name
    monkeypatch.setenv("DPPCA_DASK_CACHE_DIR", str(cache))
    return cache


def test_the_table_and_latest_live_in_the_bucket_and_a_second_machine_sees_them(s3, tmp_path, monkeypatch, capsys):
    """Two dates from machine A, a backfilled day and a new one from machine B (a fresh mirror): the bucket's table
    holds the four rows naming URLs, ``latest`` the newest date whatever the run order; B's mirror starts from the
    bucket's table; no object in the bucket names either machine's mirror."""
    root = s3.url("results/s3-job")
    spec = load_job(_spec(tmp_path, s3.url("results/{name}/{date}")))
    a = _machine(monkeypatch, tmp_path, "machine-a")
    for date in ("2026-11-02", "2026-11-03"):
        assert run_job(spec, date=date).status == "completed"
    rows = read_releases(root)
    assert [r["date"] for r in rows] == ["2026-11-02", "2026-11-03"]
    assert [r["output"] for r in rows] == [f"{root}/2026-11-02", f"{root}/2026-11-03"]
    assert [r["components"] for r in rows] == [f"{root}/2026-11-02/components.zarr",
                                               f"{root}/2026-11-03/components.zarr"]
    assert latest_output(root) == f"{root}/2026-11-03"

    b = _machine(monkeypatch, tmp_path, "machine-b")
    assert run_job(spec, date="2026-11-01").status == "completed"  # a backfill does not move latest back
    assert latest_output(root) == f"{root}/2026-11-03"
    newest = run_job(spec, date="2026-11-04")
    assert newest.status == "completed"
    np.testing.assert_array_equal(load_latest(root).components, newest.result.components)  # read from the bucket
    assert [r["date"] for r in read_releases(root)] == ["2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"]
    assert latest_output(root) == f"{root}/2026-11-04"
    assert {r["job_id"] for r in read_releases(root)} == {f"s3-job@2026-11-0{d}" for d in (1, 2, 3, 4)}
    from dppca_dask.cli import main

    capsys.readouterr()
    assert main(["releases", root]) == 0  # the command line reads the bucket's table
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]] == [
        "2026-11-01", "2026-11-02", "2026-11-03", "2026-11-04"]
    assert main(["releases", root, "--latest", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["output"] == f"{root}/2026-11-04"
    mirrors = [p for p in b.rglob("releases.parquet")]  # B's mirror holds the bucket's table (all four rows)
    assert len(mirrors) == 1
    import pyarrow.parquet as pq

    assert [r["date"] for r in pq.read_table(mirrors[0]).to_pylist()] == [r["date"] for r in read_releases(root)]

    objects = _objects(s3, "results/s3-job")
    assert {"releases.parquet", "latest", ".releases/s3-job@2026-11-04.json"} <= set(objects)
    assert not [o for o in objects if o.endswith(".lock")]
    for name, data in objects.items():
        assert str(a).encode() not in data and str(b).encode() not in data, name
    job = json.loads(objects["2026-11-04/job.json"])
    assert job["spec"]["output"]["path"] == s3.url("results/{name}/{date}")


KILLED = """
import os, sys
from dppca_dask.jobs import steps
from dppca_dask.jobs.runner import run_job
from dppca_dask.jobs.spec import load_job

def kill(name):
    if name == sys.argv[2]:
        os._exit(77)

steps._kill_point = kill
run_job(load_job(sys.argv[1]), date=sys.argv[3])
"""


def _killed(path: str, point: str, date: str) -> None:
    done = subprocess.run([sys.executable, "-c", KILLED, path, point, date], env=_env(), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 77, done.stderr[-2000:]


def test_a_run_killed_after_its_marker_records_its_release_at_the_next_run_without_releasing_again(
        s3, tmp_path, monkeypatch):
    """Killed between the COMPLETE marker and the table: the output is published but no table or latest names it
    yet; the next run of the job records it (the ledger charged once)."""
    _machine(monkeypatch, tmp_path, "machine")
    root = s3.url("out")
    path = _spec(tmp_path, s3.url("out/{date}"))
    _killed(path, "published", "2026-11-02")
    objects = _objects(s3, "out")
    assert "2026-11-02/COMPLETE" in objects
    assert not {"releases.parquet", "latest"} & set(objects) and not [o for o in objects if o.startswith(".releases/")]
    assert read_releases(root) == [] and latest_output(root) is None
    from dppca_dask.errors import StoreNotFoundError

    with pytest.raises(StoreNotFoundError, match="no release is recorded"):
        load_latest(root)
    load_output(f"{root}/2026-11-02")  # published (its marker written): readable by its URL
    s3.filesystem().rm_file(s3.url("out/2026-11-02/COMPLETE"))
    with pytest.raises(StoreNotFoundError, match="not a published job output"):
        load_output(f"{root}/2026-11-02")
    outcome = run_job(load_job(path), date="2026-11-02")
    assert outcome.status == "already-completed"
    assert [r["job_id"] for r in read_releases(root)] == ["s3-job@2026-11-02"]
    assert latest_output(root) == f"{root}/2026-11-02"
    from dppca_dask.ledger import Ledger

    assert Ledger(str(tmp_path / "ledger.sqlite")).entry("ds", "s3-job@2026-11-02").epsilon == pytest.approx(0.1)


def test_a_row_whose_table_update_was_killed_is_in_the_next_table(s3, tmp_path, monkeypatch):
    """Killed between its row object and the table: the next publication in the same place (another date) rebuilds
    the table from every row object, the killed run's among them."""
    _machine(monkeypatch, tmp_path, "machine")
    root = s3.url("out")
    path = _spec(tmp_path, s3.url("out/{date}"))
    _killed(path, "row-written", "2026-11-03")
    assert ".releases/s3-job@2026-11-03.json" in _objects(s3, "out") and read_releases(root) == []
    assert run_job(load_job(path), date="2026-11-02").status == "completed"
    assert [r["date"] for r in read_releases(root)] == ["2026-11-02", "2026-11-03"]
    assert latest_output(root) == f"{root}/2026-11-03"  # the newest published date


def test_a_table_lock_left_by_a_killed_process_of_this_machine_is_taken_over(s3, tmp_path, monkeypatch):
    _machine(monkeypatch, tmp_path, "machine")
    root = s3.url("out")
    path = _spec(tmp_path, s3.url("out/{date}"))
    _killed(path, "rows-listed", "2026-11-02")
    assert ".releases.lock" in _objects(s3, "out")
    assert run_job(load_job(path), date="2026-11-02").status == "already-completed"
    assert [r["date"] for r in read_releases(root)] == ["2026-11-02"] and ".releases.lock" not in _objects(s3, "out")


RACER = """
import sys, time
import pyarrow.parquet, s3fs  # loaded before the start, so that the racers' pauses alone set their order
from dppca_dask.jobs import bucket_output, steps

root, options, index, count = sys.argv[1], dict(zip(("endpoint_url", "key", "secret"), sys.argv[2:5])), \\
    int(sys.argv[5]), int(sys.argv[6])

def pause(name):
    if name == "rows-listed":  # the first to list writes its table last: a lost update without the lock
        time.sleep(0.5 * (count - index))

steps._kill_point = pause
print("ready", flush=True)
sys.stdin.readline()  # every racer has started: go
time.sleep(0.3 * index)
date = f"2026-11-{index + 1:02d}"
row = {"job": "s3-job", "job_id": f"s3-job@{date}", "date": date, "status": "completed", "mechanism": "m",
       "epsilon": 0.1, "delta": 1e-8, "relation": "add-remove", "private": True, "diagnostics": None,
       "variance_ratios": None, "components": None, "output": f"{root}/{date}", "recorded_at": date}
bucket_output.publish_rows(root, row, options)
"""


def test_machines_publishing_dates_of_one_job_at_once_lose_no_row(s3):
    """Four processes (as on four machines) publish four dates concurrently, each pausing between listing the rows
    and writing the table, the first to list the longest: the table holds the four rows, latest the newest."""
    root = s3.url("results/s3-job")
    options = s3.options()
    racers = [subprocess.Popen([sys.executable, "-c", RACER, root, options["endpoint_url"], options["key"],
                                options["secret"], str(i), "4"], env=_env(), stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(4)]
    try:
        ready = [racer.stdout.readline().strip() if racer.stdout else "" for racer in racers]
        if ready != ["ready"] * 4:  # one ended before the start: its error, once it is over
            for racer in racers:
                racer.kill()
            raise AssertionError([racer.communicate()[1][-2000:] for racer in racers])
        for racer in racers:  # each has imported what it uses: they start together
            assert racer.stdin is not None
            racer.stdin.write("go\n")
            racer.stdin.flush()
        for racer in racers:
            _, err = racer.communicate(timeout=300)
            assert racer.returncode == 0, err[-2000:]
    finally:
        for racer in racers:
            if racer.poll() is None:
                racer.kill()
                racer.communicate()
    assert [r["date"] for r in read_releases(root, s3.options())] == [f"2026-11-0{d}" for d in (1, 2, 3, 4)]
    assert latest_output(root, s3.options()) == f"{root}/2026-11-04"


def _daily_store(path: Path, days: int) -> str:
    """A store of ``days`` daily partitions stamped 2026-11-01.. (declared width)."""
    import datetime as _dt

    import scipy.sparse as sp

    from dppca_dask.ingest import ingest
    from dppca_dask.storage import append_partition

    rng = np.random.default_rng(3)
    blocks = [sp.csr_array(rng.standard_normal((20, 6)) * (rng.random((20, 6)) < 0.5) * 0.3) for _ in range(days)]
    ingest(blocks[0], path, n_features=6, timestamp="2026-11-01")
    for n, block in enumerate(blocks[1:], start=2):
        append_partition(str(path), block, timestamp=_dt.datetime(2026, 11, n, tzinfo=_dt.timezone.utc).timestamp())
    return str(path)


def _window_spec(tmp_path: Path, output: str, *, epsilon: float) -> str:
    return _job_file(tmp_path, output, name="win", store=tmp_path / "days.zarr",
                     make_store=lambda path: _daily_store(path, days=3),
                     mechanism=['name = "sliding-window"', 'last = "2D"', 'release = "gaussian"'], epsilon=epsilon,
                     delta=1e-7, file=f"window-{epsilon}.toml")


def test_a_window_job_publishes_into_a_bucket_once(s3, tmp_path, monkeypatch):
    """A sliding-window job with an s3:// output: its release, job file and, last, the COMPLETE marker in the bucket,
    nothing pending or locked left; its row in the bucket's table and latest; a second run of the date releases
    nothing (the same charge), and one asking another release under the job id is refused."""
    from dppca_dask.errors import LedgerError
    from dppca_dask.ledger import CHARGED, Ledger

    cache = _machine(monkeypatch, tmp_path, "machine")
    root = s3.url("windows/win")
    spec = load_job(_window_spec(tmp_path, s3.url("windows/{name}/{date}"), epsilon=0.3))
    outcome = run_job(spec, date="2026-11-03")
    assert outcome.status == "completed" and outcome.output == f"{root}/2026-11-03"
    objects = _objects(s3, "windows/win")
    assert {"2026-11-03/job.json", "2026-11-03/release.json", "2026-11-03/COMPLETE", ".releases/win@2026-11-03.json",
            "releases.parquet", "latest"} == set(objects)
    assert json.loads(objects["2026-11-03/COMPLETE"]) == {"job_id": "win@2026-11-03"}
    assert not [o for o in objects if ".pending" in o or o.endswith(".lock")]
    assert all(str(cache).encode() not in data for data in objects.values())
    ledger = Ledger(str(tmp_path / "ledger.sqlite"))
    entry = ledger.entry("ds", "win@2026-11-03")
    assert entry.status == CHARGED and len(entry.partitions) == 2  # the window's two days
    rows = read_releases(root)
    assert [(r["job_id"], r["output"], r["components"], r["mechanism"]) for r in rows] == [
        ("win@2026-11-03", f"{root}/2026-11-03", f"{root}/2026-11-03/release.json", outcome.result.mechanism)]
    assert latest_output(root) == f"{root}/2026-11-03"
    np.testing.assert_array_equal(load_latest(root).released, outcome.result.released)

    again = run_job(spec, date="2026-11-03")
    assert again.status == "already-completed" and again.output == outcome.output
    assert ledger.entry("ds", "win@2026-11-03") == entry  # no second charge
    assert len(read_releases(root)) == 1

    other = load_job(_window_spec(tmp_path, s3.url("windows/{name}/{date}"), epsilon=0.2))
    with pytest.raises(LedgerError, match="other parameters"):
        run_job(other, date="2026-11-03")
    assert ledger.entry("ds", "win@2026-11-03") == entry
    assert _objects(s3, "windows/win")["2026-11-03/COMPLETE"] == objects["2026-11-03/COMPLETE"]


def test_a_table_lock_of_another_machine_is_named_and_the_release_recorded_once_it_is_removed(s3, tmp_path,
                                                                                             monkeypatch):
    """The table's lock object held by a run on another machine (killed there): the run publishes its output, waits
    for the lock, then fails naming it (exit 2); once it is deleted, the next run records the release without
    releasing again."""
    from dppca_dask.errors import InvalidParameterError
    from dppca_dask.ledger import Ledger
    from dppca_dask.storage import _remote

    _machine(monkeypatch, tmp_path, "machine")
    monkeypatch.setattr(_remote, "LOCK_TIMEOUT", 1.0)
    root = s3.url("out")
    path = _spec(tmp_path, s3.url("out/{date}"))
    s3.filesystem().pipe_file(s3.url("out/.releases.lock"),
                              json.dumps({"host": "another-machine", "pid": 1, "time": 0}).encode())
    with pytest.raises(InvalidParameterError, match=r"aws s3 rm s3://.*/out/\.releases\.lock") as raised:
        run_job(load_job(path), date="2026-11-02")
    assert raised.value.exit_code == 2
    objects = _objects(s3, "out")
    assert "2026-11-02/COMPLETE" in objects and "releases.parquet" not in objects and "latest" not in objects
    s3.filesystem().rm_file(s3.url("out/.releases.lock"))
    assert run_job(load_job(path), date="2026-11-02").status == "already-completed"
    assert [r["job_id"] for r in read_releases(root)] == ["s3-job@2026-11-02"]
    assert Ledger(str(tmp_path / "ledger.sqlite")).entry("ds", "s3-job@2026-11-02").epsilon == pytest.approx(0.1)
