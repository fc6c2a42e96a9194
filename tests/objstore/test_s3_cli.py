"""The command line on a store in object storage, configured only by the standard AWS variables (the issue's
"done when"): ingest --out s3://, info --check, pca --executor cluster, append, and the errors that name what is
missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # command-line processes, each importing the package

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _svmlight(path, rng, n_rows=400, n_cols=20):
    lines = []
    for _ in range(n_rows):
        cols = np.sort(rng.choice(n_cols, size=4, replace=False)) + 1
        lines.append("+1 " + " ".join(f"{c}:{rng.uniform(0.1, 1):.4f}" for c in cols))
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _cli(*args, env=None, timeout=300):
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FSSPEC_S3"))}
    environment.update(env if env is not None else {k: v for k, v in os.environ.items() if k.startswith("AWS_")})
    environment["PYTHONPATH"] = ROOT + os.pathsep + environment.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "dppca_dask", *args], capture_output=True, text=True,
                          env=environment, timeout=timeout)


def test_ingest_info_pca_on_a_cluster_append(s3, rng, tmp_path):
    src = _svmlight(tmp_path / "a.svm", rng)
    url = s3.url("x.zarr")
    done = _cli("ingest", src, "--out", url, "--n-features", "20", "--rows-per-partition", "100")
    assert done.returncode == 0, done.stderr
    assert s3.filesystem().exists(s3.url("x.zarr/zarr.json"))
    done = _cli("info", url, "--check", "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["path"] == url and info["n_partitions"] == 4 and info["check"].startswith("ok")
    done = _cli("pca", url, "--epsilon", "1", "--delta", "1e-6", "--executor", "cluster", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["provenance"]["executor"] == "cluster" and len(result["components"][0]) == 20
    secret = os.environ["AWS_SECRET_ACCESS_KEY"]
    assert secret not in done.stdout and secret not in done.stderr
    day = _svmlight(tmp_path / "b.svm", rng, n_rows=50)
    done = _cli("append", url, day, "--timestamp", "2026-11-02", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n_partitions"] == 5


def test_storage_option_on_the_command_line(s3, rng, tmp_path):
    src = _svmlight(tmp_path / "a.svm", rng, n_rows=50)
    url = s3.url("opt.zarr")
    opts = [f"--storage-option=endpoint_url={s3.server.endpoint}", f"--storage-option=key={s3.options()['key']}",
            f"--storage-option=secret={s3.options()['secret']}"]
    done = _cli("ingest", src, "--out", url, "--n-features", "20", *opts, env={})
    assert done.returncode == 0, done.stderr
    done = _cli("info", url, *opts, "--json", env={})
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["n_rows"] == 50


@pytest.mark.parametrize("case", ["endpoint", "credentials", "bucket"])
def test_what_is_missing_is_named_exit_2(s3, rng, tmp_path, case):
    src = _svmlight(tmp_path / "a.svm", rng, n_rows=20)
    env = s3.server.environment()
    url = s3.url("x.zarr")
    if case == "endpoint":
        env.update(AWS_ENDPOINT_URL="http://127.0.0.1:9", AWS_MAX_ATTEMPTS="1")  # nothing listens there
        expected = "cannot reach the object store"
    elif case == "credentials":
        del env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"]
        env.update(AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
                   AWS_EC2_METADATA_DISABLED="true")
        expected = "no credentials"
    else:
        url = "s3://no-such-bucket/x.zarr"
        expected = "bucket 'no-such-bucket'"
    done = _cli("ingest", src, "--out", url, "--n-features", "20", env=env)
    assert done.returncode == 2 and expected in done.stderr, done.stderr
    done = _cli("pca", url, "--epsilon", "1", "--delta", "1e-6", env=env)
    assert done.returncode == 2 and expected in done.stderr, done.stderr
