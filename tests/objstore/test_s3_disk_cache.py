"""Partitions of a bucket store kept on the local disk for the rest of a run (``object-cache-partitions``): the first
ones fetched, never chosen by size, read from disk without a request, owner-only, refetched when damaged, removed
when the run ends, and an error that names the setting when they cannot be written."""

from __future__ import annotations

import ast
import os
import re
import stat
import warnings

import dask
import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.api import pca
from dppca_dask.errors import InvalidParameterError, StoreCorruptError
from dppca_dask.ingest import ingest
from dppca_dask.storage import open_matrix
from dppca_dask.errors import LocalCacheError
from dppca_dask.storage._disk_cache import DISK_CACHE
from dppca_dask.storage.store import READ_AHEAD, drop_read_ahead

SETTING = "dppca_dask.storage.object-cache-partitions"


@pytest.fixture(autouse=True)
def _fresh():
    drop_read_ahead()
    yield
    drop_read_ahead()


def _store(s3, rng: np.random.Generator, name: str = "kept.zarr", *, heavy_row: bool = False) -> str:
    """400 x 12, 8 partitions of 50 rows; ``heavy_row``: row 60 (partition 1) full, else as drawn."""
    matrix = sp.lil_array(sp.random(400, 12, density=0.3, random_state=rng, format="csr"))
    if heavy_row:
        matrix[60, :] = 0.5
    url = s3.url(name)
    ingest(sp.csr_array(matrix), url, rows_per_partition=50, n_features=12)
    return url


def _key(store) -> tuple[str, str, str]:
    return (store.path, store.fingerprint, store._options)


def _same(a, b) -> bool:
    return (a[0] != b[0]).nnz == 0 and np.array_equal(a[1], b[1])


def test_the_first_partitions_fetched_are_read_from_disk_without_a_request(s3, rng, requests, monkeypatch):
    url = _store(s3, rng)
    monkeypatch.setattr(READ_AHEAD, "depth", 0)  # one partition fetched at a time: counts and requests are exact
    with dask.config.set({SETTING: 3}):
        store = open_matrix(url)
        first = [store.read_partition_with_norms(i) for i in range(8)]
        assert DISK_CACHE.kept(_key(store)) == [0, 1, 2]
        directory = DISK_CACHE._directory
        assert directory is not None and stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        files = os.listdir(directory)
        assert len(files) == 9  # three arrays of three partitions, named by numbers only
        assert all(stat.S_IMODE(os.stat(os.path.join(directory, f)).st_mode) == 0o600 for f in files)
        assert not any("kept" in f or s3.name in f for f in files)
        requests.clear()
        hits = DISK_CACHE.hits
        again = [store.read_partition_with_norms(i) for i in range(3)]
        assert DISK_CACHE.hits == hits + 3
        assert all(_same(a, b) for a, b in zip(first, again))
        assert [r for r in requests if "/X/" in r[1] or r[1].endswith(("data", "indices", "indptr"))] == []
        # The bucket's values go away: the kept partitions still read, the others are damaged
        fs = s3.filesystem()
        chunks = [k for k in fs.find(f"{s3.name}/kept.zarr/X/data") if not k.endswith(".json")]
        assert chunks
        fs.rm(chunks)
        READ_AHEAD.clear()
        assert all(_same(first[i], store.read_partition_with_norms(i)) for i in range(3))
        READ_AHEAD.clear()
        with pytest.raises(StoreCorruptError):
            store.read_partition_with_norms(5)
    drop_read_ahead()  # the run's end: the files and their directory go
    assert not os.path.exists(directory) and DISK_CACHE.kept(_key(store)) == []


def test_off_by_default_and_the_setting_is_checked(s3, rng):
    url = _store(s3, rng)
    store = open_matrix(url)
    store.read_partition_with_norms(0)
    assert DISK_CACHE._directory is None and DISK_CACHE.kept(_key(store)) == []
    for bad in (-1, "many", True, 1.5):
        with dask.config.set({SETTING: bad}), pytest.raises(InvalidParameterError, match="object-cache-partitions"):
            store.read_partition_with_norms(1)


def test_a_damaged_file_is_dropped_and_the_partition_fetched_again(s3, rng, monkeypatch):
    url = _store(s3, rng)
    monkeypatch.setattr(READ_AHEAD, "depth", 0)
    with dask.config.set({SETTING: 8}):
        store = open_matrix(url)
        first = store.read_partition_with_norms(0)
        directory = DISK_CACHE._directory
        for name in os.listdir(directory):
            if name.startswith("0-0-"):
                with open(os.path.join(directory, name), "r+b") as f:
                    f.truncate(max(os.path.getsize(f.name) - 4, 0))
        READ_AHEAD.clear()
        hits = DISK_CACHE.hits
        assert _same(first, store.read_partition_with_norms(0))
        assert DISK_CACHE.hits == hits and DISK_CACHE.kept(_key(store))[0] == 0  # fetched again, kept anew
        READ_AHEAD.clear()
        assert _same(first, store.read_partition_with_norms(0)) and DISK_CACHE.hits == hits + 1


def test_a_cache_that_cannot_be_written_stops_the_read_naming_the_settings(s3, rng, tmp_path):
    url = _store(s3, rng)
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("")
    with dask.config.set({SETTING: 2, "dppca_dask.storage.object-cache-directory": str(not_a_directory)}):
        store = open_matrix(url)
        with pytest.raises(LocalCacheError, match="object-cache-directory.*object-cache-partitions to 0") as error:
            store.read_partition_with_norms(0)
        assert error.value.exit_code == 1 and isinstance(error.value, OSError)
    READ_AHEAD.clear()
    store.read_partition_with_norms(0)  # with the setting back to 0, the same read succeeds


_FULL_DISK = """
import os, resource, signal, sys
import dask
from dppca_dask.errors import LocalCacheError
from dppca_dask.storage import open_matrix
from dppca_dask.storage._disk_cache import DISK_CACHE
from dppca_dask.storage.store import READ_AHEAD

url, directory, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, as on a full disk
READ_AHEAD.depth = 0
with dask.config.set({"dppca_dask.storage.object-cache-partitions": 2,
                      "dppca_dask.storage.object-cache-directory": directory}):
    store = open_matrix(url)
    key = (store.path, store.fingerprint, store._options)
    store.read_partition_with_norms(0)
    print("sizes:", [os.path.getsize(os.path.join(DISK_CACHE._directory, f"0-0-{i}.bin")) for i in range(3)])
    hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        store.read_partition_with_norms(1)
    except LocalCacheError as error:
        print("error:", error)
    else:
        print("no error")
    print("files after the failure:", sorted(os.listdir(DISK_CACHE._directory)))
    print("reserved:", DISK_CACHE.reserved(key), "kept:", DISK_CACHE.kept(key))
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    READ_AHEAD.clear()
    store.read_partition_with_norms(2)  # no place left: the failed partition's is still its own
    READ_AHEAD.clear()
    store.read_partition_with_norms(1)  # this fetch writes it
    print("kept:", DISK_CACHE.kept(key), "files:", len(os.listdir(DISK_CACHE._directory)))
"""


def test_a_disk_that_fills_during_a_write_leaves_no_file_and_names_no_partition(s3, rng, tmp_path):
    """A real write failure in a separate process (a file-size limit with SIGXFSZ ignored: the write fails with
    EFBIG, as on a full disk): the read stops with LocalCacheError naming the directory and the settings, not the
    partition; none of the partition's files (or their temporary copies) is left; its place stays reserved (with
    room for two, partition 2 read next gets none), and the next fetch of that partition, with room again, writes
    it."""
    import subprocess
    import sys

    url = _store(s3, rng)
    directory = tmp_path / "cache"
    directory.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), DPPCA_DASK_NUMBA="0")
    out = subprocess.run([sys.executable, "-c", _FULL_DISK, url, str(directory), "300"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    sizes, error, files, places, end = out.stdout.splitlines()
    # The first file of a partition (its row pointers) fits under the limit and the others do not: partition 1's
    # first file is written before the failure, and must be removed with the rest
    first, *others = ast.literal_eval(sizes.split(":", 1)[1])
    assert first < 300 < min(others), sizes
    assert re.fullmatch(  # the whole message: the directory and the settings, no partition index
        rf"error: could not keep a partition on the local disk in '{re.escape(str(directory))}/dppca-dask-cache-\w+' "
        r"\(OSError: File too large\); free space there, set dppca_dask\.storage\.object-cache-directory to another "
        r"directory, or set dppca_dask\.storage\.object-cache-partitions to 0 to read every step from the bucket",
        error), error
    left = ast.literal_eval(files.split(":", 1)[1])
    assert left and all(name.startswith("0-0-") for name in left), files  # partition 0's files only
    assert places == "reserved: [0, 1] kept: [0]", places
    assert end == "kept: [0, 1] files: 6", end


def test_the_fetch_started_first_keeps_its_place_however_long_it_takes(s3, rng, monkeypatch):
    """Which partitions are kept follows the order their fetches start in, never how long they take (which depends
    on their sizes): partition 1's fetch is held back until partition 2's has ended, and with room for one, 1 is
    kept; a fetch of 1 cancelled before it ends keeps its place too. The delay stands in for a larger partition
    (sizes are private: a neighbouring dataset may make any partition the larger)."""
    import asyncio
    import threading

    from dppca_dask.storage import _remote_chunks
    from dppca_dask.storage.store import _fetch_ranges

    url = _store(s3, rng)
    store = open_matrix(url)
    held_back = store.partitions[1].nnz_start
    read = _remote_chunks.read_range
    release = threading.Event()

    async def slower(layout, start, stop):
        if start == held_back:
            await asyncio.to_thread(release.wait, 30)
        return await read(layout, start, stop)

    monkeypatch.setattr(_remote_chunks, "read_range", slower)
    with dask.config.set({SETTING: 1}):
        first = _fetch_ranges(store.path, store.fingerprint, store._options, store._ranges(1), wait=False,
                              partition=1)
        second = _fetch_ranges(store.path, store.fingerprint, store._options, store._ranges(2), wait=False,
                               partition=2)
        second.result(30)
        assert not first.done()  # (the order of the ends is the reverse of the starts)
        release.set()
        first.result(30)
        assert DISK_CACHE.kept(_key(store)) == [1]
    drop_read_ahead()
    # A fetch cancelled (read-ahead that guessed wrong) keeps its place: the next fetch of it writes it
    release.clear()
    with dask.config.set({SETTING: 1}):
        first = _fetch_ranges(store.path, store.fingerprint, store._options, store._ranges(1), wait=False,
                              partition=1)
        first.cancel()
        _fetch_ranges(store.path, store.fingerprint, store._options, store._ranges(2), partition=2)
        assert DISK_CACHE.reserved(_key(store)) == [1] and DISK_CACHE.kept(_key(store)) == []
        release.set()
        _fetch_ranges(store.path, store.fingerprint, store._options, store._ranges(1), partition=1)
        assert DISK_CACHE.kept(_key(store)) == [1]


def _keep(n: int) -> None:
    dask.config.set({SETTING: n})


def _state() -> tuple[int, str | None]:
    return DISK_CACHE.hits, DISK_CACHE._directory


def test_a_run_on_a_cluster_reads_kept_partitions_and_removes_them(s3, rng, local_client):
    url = _store(s3, rng)

    def run(**where):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # seeded noise: a test of where the partitions come from
            return pca(url, epsilon=1.0, delta=1e-6, n_components=1, n_iter=3, seed=5, persist=False, **where)

    reference = run(executor="local")  # in this process, nothing kept: the same values as a cluster's run
    hits = {w: h for w, (h, _) in local_client.run(_state).items()}
    local_client.run(_keep, 8)
    try:
        kept = run(client=local_client, executor="cluster", storage_options=s3.options())
    finally:
        local_client.run(_keep, 0)
    after = local_client.run(_state)
    assert np.array_equal(kept.components, reference.components)
    assert sum(h - hits[w] for w, (h, _) in after.items()) > 0  # later steps read the workers' disks
    assert {d for _, d in after.values()} == {None}  # removed when the run ended
