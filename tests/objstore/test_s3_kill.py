"""A writer killed (SIGKILL) in the middle of an append or an ingest in object storage leaves the store as it was:
a reader sees the old store (or, for a new store, none), never a half-written one; the next writer cleans up. A
replacement (``--overwrite``) killed midway leaves no store until the next one.

The stores are written with small chunks (2**16 entries): what is tested does not depend on the chunk size, and the
object-storage default (2**21 entries, at least one 16 MiB object per float64 array) made each of these tests
upload tens of megabytes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.ingest import ingest
from dppca_dask.storage import append_partition, open_matrix

pytestmark = pytest.mark.slow  # command-line processes, each importing the package

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WRITER = """
import sys
import numpy as np, scipy.sparse as sp
from dppca_dask.ingest import ingest
from dppca_dask.storage import append_partition
rng = np.random.default_rng(int(sys.argv[3]))
block = sp.csr_array(sp.random(4000, 12, density=0.3, random_state=rng, format="csr"))
if sys.argv[1] == "append":
    print("writing", flush=True)
    append_partition(sys.argv[2], block, timestamp=2.0e9)
else:
    print("writing", flush=True)
    ingest(block, sys.argv[2], rows_per_partition=10, n_features=12, overwrite=sys.argv[1] == "overwrite",
           nnz_chunk=2**16)
print("done", flush=True)
"""


def _start(kind: str, url: str, seed: int) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-c", WRITER, kind, url, str(seed)], stdout=subprocess.PIPE, text=True,
                            env=env)


def _kill_when(process: subprocess.Popen[str], written, timeout: float = 120.0) -> bool:
    """SIGKILL ``process`` as soon as ``written()`` is true; whether it was killed before it finished."""
    assert process.stdout is not None and process.stdout.readline().strip() == "writing"
    deadline = time.monotonic() + timeout
    while process.poll() is None and time.monotonic() < deadline:
        if written():
            process.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    process.wait(30)
    process.stdout.close()
    return process.returncode == -signal.SIGKILL


def test_an_append_killed_midway_leaves_the_old_store(s3, rng, seed):
    url = s3.url("x.zarr")
    old = sp.csr_array(sp.random(100, 12, density=0.3, random_state=rng, format="csr"))
    ingest(old, url, rows_per_partition=10, n_features=12, nnz_chunk=2**16)
    fs = s3.filesystem()
    before = set(fs.find(s3.url("x.zarr")))

    def new_chunks() -> bool:  # the append is under way: chunks beyond the committed ones exist
        return len(set(fs.find(s3.url("x.zarr"))) - before) >= 3

    killed = _kill_when(_start("append", url, seed), new_chunks)
    assert killed, "the append finished before it could be killed: give it more rows"
    store = open_matrix(url)
    assert store.n_rows == 100 and store.generation == 0
    for part in store.partitions:
        store.verify_partition(part.index)
    assert (store.to_scipy() != old).nnz == 0
    assert fs.exists(s3.url(".x.zarr.append.lock"))  # left by the killed process ...
    more = sp.csr_array(sp.random(7, 12, density=0.3, random_state=rng, format="csr"))
    after = append_partition(url, more, timestamp=2.0e9)  # ... and taken over: its process is gone
    assert after.n_rows == 107 and after.generation == 1
    assert (after.to_scipy() != sp.vstack([old, more], format="csr")).nnz == 0
    for part in after.partitions:
        after.verify_partition(part.index)


def test_an_ingest_killed_while_uploading_leaves_no_store(s3, seed):
    url = s3.url("new.zarr")
    fs = s3.filesystem()

    def uploading() -> bool:
        return len(fs.find(s3.url("new.zarr"))) >= 3

    killed = _kill_when(_start("ingest", url, seed), uploading)
    assert killed, "the ingest finished before it could be killed: give it more partitions"
    assert fs.find(s3.url("new.zarr"))  # objects were written ...
    assert not fs.exists(s3.url("new.zarr/zarr.json"))  # ... but not the commit point: no store
    from dppca_dask.errors import InvalidParameterError, StoreNotFoundError
    import pytest

    with pytest.raises(StoreNotFoundError):
        open_matrix(url)
    with pytest.raises(InvalidParameterError, match="holds objects but no store"):
        ingest(np.ones((3, 12)), url)
    assert ingest(np.ones((3, 12)), url, overwrite=True).n_rows == 3


def test_a_replacement_killed_midway_leaves_no_store_until_the_next(s3, rng, seed):
    """``ingest --overwrite`` killed after it removed the old root metadata: neither store is there (readers are
    told it does not exist, never given a mix); the next ``--overwrite`` uploads the whole new store."""
    from dppca_dask.errors import StoreNotFoundError

    url = s3.url("x.zarr")
    old = sp.csr_array(sp.random(100, 12, density=0.3, random_state=rng, format="csr"))
    ingest(old, url, rows_per_partition=10, n_features=12, nnz_chunk=2**16)
    fs = s3.filesystem()

    def replacing() -> bool:  # the old root is gone and the new store's objects are on their way
        fs.invalidate_cache()
        return not fs.exists(s3.url("x.zarr/zarr.json")) and len(fs.find(s3.url("x.zarr"))) >= 3

    killed = _kill_when(_start("overwrite", url, seed), replacing)
    assert killed, "the replacement finished before it could be killed: give it more partitions"
    assert not fs.exists(s3.url("x.zarr/zarr.json"))
    with pytest.raises(StoreNotFoundError):
        open_matrix(url)
    new = sp.csr_array(sp.random(30, 12, density=0.3, random_state=rng, format="csr"))
    store = ingest(new, url, rows_per_partition=10, n_features=12, overwrite=True)
    assert (open_matrix(url).to_scipy() != new).nnz == 0 and store.n_partitions == 3
