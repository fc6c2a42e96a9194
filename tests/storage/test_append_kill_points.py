"""An append killed (SIGKILL) before any one of its writes leaves one store that dppca_dask and AnnData read alike:
the old one until the commit, the grown one after it, never a mix (issue 36: "Length of values does not match length
of index" from ``anndata.read_zarr``, or uncommitted rows shown); the next append finishes what the killed one
left.

A driver process forks one child per kill point: the child counts the files zarr writes and kills itself with
SIGKILL just before write number K, for every K up to one past the last (the append that was not killed)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import anndata
import numpy as np
import pytest
import scipy.sparse as sp
import zarr

from dppca_dask.storage import append_partition, open_matrix, write_matrix

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DRIVER = r"""
import json, os, shutil, signal, sys
import numpy as np
import zarr.storage._local as local
from dppca_dask.storage import append_partition

base, work, rows_file = sys.argv[1], sys.argv[2], sys.argv[3]
block = np.load(rows_file)
ids = np.arange(1000, 1000 + block.shape[0]) if sys.argv[4] == "ids" else None
real_put = local._put
statuses = {}
kill_at = 1
while True:
    path = os.path.join(work, f"k{kill_at}.zarr")
    shutil.copytree(base, path)
    pid = os.fork()
    if pid == 0:  # the killed appender
        writes = 0
        def put(target, value, exclusive=False):
            global writes
            writes += 1
            if writes == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return real_put(target, value, exclusive=exclusive)
        local._put = put
        append_partition(path, block, timestamp=1.8e9, row_ids=ids)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    statuses[kill_at] = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    if statuses[kill_at] != -signal.SIGKILL:
        break
    kill_at += 1
print(json.dumps(statuses))
"""


def _base_store(tmp_path: Path, kind: str, rng: np.random.Generator) -> tuple[str, sp.csr_array]:
    old = sp.csr_array(sp.random(45, 6, density=0.4, random_state=rng, format="csr"))
    if kind == "plain":
        return write_matrix(tmp_path / "base.zarr", old, rows_per_partition=10).path, old
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from dppca_dask.ingest import ingest

    coo = old.tocoo()
    pq.write_table(pa.table({"row_id": coo.row.astype(np.int64) + 100, "col_id": coo.col.astype(np.int64),
                             "value": coo.data}), tmp_path / "day.parquet")
    store = ingest(tmp_path / "day.parquet", tmp_path / "base.zarr", column_ids=list(range(6)),
                   rows_per_partition=10)
    return store.path, sp.csr_array(store.to_scipy())


def _check_reads_as(path: Path, expected: sp.csr_array) -> None:
    """dppca_dask and AnnData both read ``expected`` at ``path``."""
    store = open_matrix(path)
    assert store.n_rows == expected.shape[0]
    for part in store.partitions:
        store.verify_partition(part.index)
    assert (store.to_scipy() != expected).nnz == 0
    adata = anndata.read_zarr(path)
    assert adata.shape == expected.shape and len(adata.obs_names) == expected.shape[0]
    assert (sp.csr_array(adata.X) != expected).nnz == 0
    np.testing.assert_allclose(adata.obs["row_norms"].to_numpy(), sp.linalg.norm(expected, axis=1))


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["plain", "ids"])
def test_an_append_killed_before_any_write_leaves_one_store_for_both_readers(
        tmp_path: Path, rng: np.random.Generator, kind: str) -> None:
    base, old = _base_store(tmp_path, kind, rng)
    new = sp.csr_array(sp.random(23, 6, density=0.4, random_state=rng, format="csr"))  # 3 partitions
    np.save(tmp_path / "rows.npy", new.toarray())
    work = tmp_path / "killed"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", DRIVER, base, str(work), str(tmp_path / "rows.npy"), kind],
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    statuses = {int(k): v for k, v in json.loads(done.stdout).items()}
    last = max(statuses)
    assert statuses[last] == 0 and all(statuses[k] == -signal.SIGKILL for k in range(1, last))
    assert last > 8  # chunks of four arrays, the commit, then the nodes' own metadata
    grown = sp.csr_array(sp.vstack([old, new], format="csr"))
    committed = []
    for kill_at in range(1, last + 1):
        path = work / f"k{kill_at}.zarr"
        after = open_matrix(path).n_rows == grown.shape[0]
        committed.append(after)
        _check_reads_as(path, grown if after else old)
        # The next append finishes what the killed one left (the nodes' own metadata files) and adds its rows.
        ids = np.arange(5000, 5002) if kind == "ids" else None
        extra = sp.csr_array(new[:2])
        append_partition(path, extra, timestamp=1.9e9, row_ids=ids)
        _check_reads_as(path, sp.csr_array(sp.vstack([grown if after else old, extra], format="csr")))
        own = zarr.open_group(path, mode="r", use_consolidated=False)
        assert own["X/indptr"].shape == (open_matrix(path).n_rows + 1,)
        assert own["obs/row_norms"].shape == (open_matrix(path).n_rows,)
    # One commit point: every kill before it leaves the old store, every kill after it the grown one.
    flip = committed.index(True)
    assert not any(committed[:flip]) and all(committed[flip:]) and 0 < flip < last - 1
    shutil.rmtree(work)
