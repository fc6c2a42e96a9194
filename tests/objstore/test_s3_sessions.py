"""The HTTP sessions that reading and writing stores in object storage open are closed, not left to the garbage
collector (which warns ``ResourceWarning: Unclosed client session`` and drops the connections unclosed)."""

from __future__ import annotations

import gc
import sys
import warnings

import numpy as np
import scipy.sparse as sp

from dppca_dask.ingest import ingest
from dppca_dask.storage import append_partition, open_matrix
from dppca_dask.storage._sessions import close_filesystem, close_filesystems


def test_no_session_is_left_to_the_garbage_collector(s3, rng, monkeypatch):
    import aiohttp

    caught: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda raised: caught.append(repr(raised.exc_value)))
    matrix = sp.csr_array(sp.random(300, 12, density=0.3, random_state=rng, format="csr"))
    url = s3.url("x.zarr")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        ingest(matrix, url, rows_per_partition=100, n_features=12)
        store = open_matrix(url)
        for index in (0, 1, 2, 0):  # and the read-ahead's fetches
            store.read_partition_with_norms(index)
        store.verify_partition(1)
        append_partition(url, matrix[:50], timestamp=1.0e9)
        assert open_matrix(url).n_rows == 350
        del store
        for fs in s3.opened:
            close_filesystem(fs)
        close_filesystems()
        gc.collect()
    assert caught == []
    # (type(), not isinstance(): the collector's objects include weak proxies, whose isinstance() raises
    # ReferenceError once their referent is gone)
    left = [o for o in gc.get_objects() if type(o) is aiohttp.ClientSession and not o.closed]
    assert left == []
    assert (open_matrix(url).read_partition(0) != matrix[:100]).nnz == 0  # reads open new sessions afterwards
    np.testing.assert_array_equal(open_matrix(url).to_scipy()[300:].toarray(), matrix[:50].toarray())


def test_a_process_that_read_a_bucket_ends_without_unclosed_sessions(s3, rng):
    """At the end of a process (a command-line run), the sessions are closed before zarr stops its event loop."""
    import os
    import subprocess

    url = s3.url("x.zarr")
    ingest(sp.csr_array(sp.random(300, 12, density=0.3, random_state=rng, format="csr")), url, rows_per_partition=100)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    script = ("import sys; from dppca_dask.storage import open_matrix; s = open_matrix(sys.argv[1]); "
              "[s.read_partition_with_norms(i) for i in (0, 1, 2)]; print('read')")
    done = subprocess.run([sys.executable, "-W", "always::ResourceWarning", "-c", script, url], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "read", done.stderr[-2000:]
    assert "Unclosed" not in done.stderr, done.stderr[-2000:]
