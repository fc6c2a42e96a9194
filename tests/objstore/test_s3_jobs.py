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


def test_an_output_url_is_refused(s3, rng, tmp_path):
    with pytest.raises(JobSpecError, match=r"written to a local or mounted directory.*aws s3 cp --recursive"):
        load_job(_spec(tmp_path, s3.url("x.zarr"), _svmlight(tmp_path / "a.svm", rng), output=s3.url("out")))


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
