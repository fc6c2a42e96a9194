"""Jobs whose store is in object storage: ``[data] store = "s3://..."``, refreshed by ``[data.ingest]``, configured by
``[data.storage_options]`` (or the environment); the options never show in the spec's description."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dppca_dask.jobs.runner import run_job
from dppca_dask.jobs.spec import load_job
from dppca_dask.errors import JobSpecError
from dppca_dask.storage import open_matrix


def _svmlight(path, rng, n_rows=200, n_cols=10):
    rows = []
    for _ in range(n_rows):
        cols = np.sort(rng.choice(n_cols, size=3, replace=False)) + 1
        rows.append("1 " + " ".join(f"{c}:{rng.uniform(0.1, 1):.3f}" for c in cols))
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def _spec(tmp_path, url, src, options=None, output=None):
    lines = [
        '[job]', 'name = "s3-job"',
        '[data]', f'store = "{url}"',
        '[data.ingest]', f'source = "{src}"', 'n_features = 10', 'rows_per_partition = 100',
    ]
    if options:
        lines += ['[data.storage_options]'] + [f'{k} = "{v}"' for k, v in options.items()]
    lines += [
        '[mechanism]', 'name = "adaptive-power"', 'n_iter = 3', 'center = "none"',
        '[privacy]', 'epsilon = 0.5', 'delta = 1e-7',
        '[budget]', f'ledger = "{tmp_path / "ledger.sqlite"}"', 'dataset = "ds"', 'total_epsilon = 1.0',
        'total_delta = 1e-6',
        '[output]', f'path = "{output or tmp_path / "out" / "{date}"}"', '[cluster]', 'executor = "local"',
    ]
    path = tmp_path / "job.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_job_ingests_into_and_reads_from_a_bucket(s3, rng, tmp_path, monkeypatch):
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)  # only the spec's storage options reach the bucket
    options = s3.options()
    url = s3.url("job.zarr")
    spec = load_job(_spec(tmp_path, url, _svmlight(tmp_path / "a.svm", rng), options))
    from dppca_dask.ledger import Ledger

    Ledger.create(tmp_path / "ledger.sqlite").init_dataset("ds", total_epsilon=1.0, total_delta=1e-6)
    assert options["secret"] not in json.dumps(spec.to_dict()) and options["secret"] not in repr(spec)
    outcome = run_job(spec, date="2026-11-02")
    assert outcome.status == "completed"
    assert open_matrix(url, storage_options=options).n_rows == 200
    written = "".join(p.read_text() for p in (tmp_path / "out").rglob("*.json"))
    assert options["secret"] not in written and options["key"] not in written


def _objects(s3, prefix):
    fs = s3.filesystem()
    fs.invalidate_cache()
    root = f"{s3.name}/{prefix}"
    return {path[len(root) + 1:] for path in fs.find(root)}


def _ledger(tmp_path):
    from dppca_dask.ledger import Ledger

    Ledger.create(tmp_path / "ledger.sqlite").init_dataset("ds", total_epsilon=1.0, total_delta=1e-6)
    return Ledger(str(tmp_path / "ledger.sqlite"))


def test_a_job_publishes_its_output_into_a_bucket(s3, rng, tmp_path):
    """``[output] path`` as a URL: the result, the job file and, last, the COMPLETE marker in the bucket; no pending
    result, checkpoint or lock object left; a second run finds it published and releases nothing."""
    spec = load_job(_spec(tmp_path, s3.url("x.zarr"), _svmlight(tmp_path / "a.svm", rng),
                          output=s3.url("results/{name}/{date}")))
    ledger = _ledger(tmp_path)
    outcome = run_job(spec, date="2026-11-02")
    assert outcome.status == "completed" and outcome.output == s3.url("results/s3-job/2026-11-02")
    objects = _objects(s3, "results")
    assert {"s3-job/2026-11-02/result.json", "s3-job/2026-11-02/job.json", "s3-job/2026-11-02/COMPLETE"} <= objects
    assert not [o for o in objects if ".pending" in o or "checkpoint" in o or o.endswith(".lock")]
    marker = json.loads(s3.filesystem().cat_file(s3.url("results/s3-job/2026-11-02/COMPLETE")))
    assert marker == {"job_id": outcome.job_id}
    again = run_job(spec, date="2026-11-02")
    assert again.status == "already-completed" and again.output == outcome.output
    assert ledger.entry("ds", outcome.job_id).epsilon == 0.5


KILLED_RUN = """
import os, sys
from dppca_dask.jobs import steps
from dppca_dask.jobs.runner import run_job
from dppca_dask.jobs.spec import load_job

def kill(name):
    if name == sys.argv[2]:
        os._exit(77)

steps._kill_point = kill  # the job's kill points, the upload's among them
run_job(load_job(sys.argv[1]), date="2026-11-02")
"""


def test_a_run_killed_before_the_marker_is_finished_by_the_next_without_a_second_release(s3, rng, tmp_path):
    import os
    import subprocess
    import sys

    from dppca_dask.ledger import CHARGED

    path = _spec(tmp_path, s3.url("x.zarr"), _svmlight(tmp_path / "a.svm", rng), output=s3.url("out/{date}"))
    ledger = _ledger(tmp_path)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    killed = subprocess.run([sys.executable, "-c", KILLED_RUN, path, "before-marker"], env=env, capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == 77, killed.stderr[-2000:]
    objects = _objects(s3, "out")
    assert "2026-11-02/result.json" in objects and "2026-11-02/COMPLETE" not in objects  # not published
    assert ".2026-11-02.job.lock" in objects  # left by the killed run
    entry = ledger.entry("ds", "s3-job@2026-11-02")
    assert entry.status == CHARGED
    outcome = run_job(load_job(path), date="2026-11-02")  # the killed run's lock is taken over (its process is gone)
    assert outcome.status == "already-completed"
    objects = _objects(s3, "out")
    assert "2026-11-02/COMPLETE" in objects and ".2026-11-02.job.lock" not in objects
    assert ledger.entry("ds", "s3-job@2026-11-02").epsilon == 0.5  # charged once


def test_the_dataset_identity_of_a_bucket_store_does_not_follow_the_working_directory(s3, rng, tmp_path,
                                                                                      monkeypatch):
    from dppca_dask.jobs.runner import _job_store_id

    spec = load_job(_spec(tmp_path, s3.url("x.zarr"), _svmlight(tmp_path / "a.svm", rng)))
    ids = set()
    for directory in (tmp_path, tmp_path / "out"):
        directory.mkdir(exist_ok=True)
        monkeypatch.chdir(directory)
        ids.add(_job_store_id(spec, None))
    assert len(ids) == 1


def test_a_second_run_of_an_output_in_a_bucket_is_refused_while_one_runs(s3, rng, tmp_path):
    """The output's lock object, held by a run on another machine: refused before anything is reserved, naming it."""
    from dppca_dask.errors import LedgerError

    spec = load_job(_spec(tmp_path, s3.url("x.zarr"), _svmlight(tmp_path / "a.svm", rng), output=s3.url("out/{date}")))
    ledger = _ledger(tmp_path)
    s3.filesystem().pipe_file(s3.url("out/.2026-11-02.job.lock"),
                              json.dumps({"host": "another-machine", "pid": 1, "time": 0}).encode())
    with pytest.raises(LedgerError, match=r"being written by another run .*\.2026-11-02\.job\.lock"):
        run_job(spec, date="2026-11-02")
    assert ledger.entry("ds", "s3-job@2026-11-02") is None
