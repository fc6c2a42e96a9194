"""Re-reads of unchanged chunk files (``storage.store.CHECKED``): the bits of a checked read, and every change to a
file seen.

An out-of-core run re-reads each partition at every step; a read whose chunk files are the ones a checked read
opened (same device, inode, size, modification and change times) skips the canonical-form scan and the sums of
squares. These tests write stores, let their files settle (the memo keeps only reads of files whose change time is
older than ``CheckedReads.SETTLED``; shortened here to 50 ms), and check that what a re-read returns is what a
checked read returns, and that any change to a file makes the next read check everything again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.errors import StoreCorruptError
from dppca_dask.storage import _chunks, open_matrix, write_matrix
from dppca_dask.storage import store as store_module
from dppca_dask.storage.store import CHECKED, CheckedReads, MatrixStore

from tests.storage.test_store_read_fast import random_csr


@pytest.fixture(autouse=True)
def fresh_memo() -> Iterator[None]:
    CHECKED.clear()
    yield
    CHECKED.clear()


@pytest.fixture
def settle(monkeypatch: pytest.MonkeyPatch) -> float:
    """Files count as settled 50 ms after their last change (the default is 2 s); returns the wait to use."""
    monkeypatch.setattr(CheckedReads, "SETTLED", 50_000_000)
    return 0.1


def _write(path: Path, matrix: sp.csr_array, wait: float, codec: str = "none") -> MatrixStore:
    store = write_matrix(path, matrix, rows_per_partition=25, codec=codec)
    time.sleep(wait)
    return open_matrix(store.path)


def _read_every_partition(store: MatrixStore) -> None:
    """A checked read of each partition (kept in the memo when its files have settled)."""
    for p in store.partitions:
        store.read_partition_with_norms(p.index, dtype=np.float64)


def _chunk(store: MatrixStore, name: str, index: int) -> str:
    return os.path.join(store.path, store.matrix_key, name, "c", str(index))


def _same(a: tuple[sp.csr_array, np.ndarray], b: tuple[sp.csr_array, np.ndarray]) -> bool:
    return (a[0].shape == b[0].shape and a[0].data.tobytes() == b[0].data.tobytes()
            and np.array_equal(a[0].indices, b[0].indices) and np.array_equal(a[0].indptr, b[0].indptr)
            and a[1].tobytes() == b[1].tobytes())


@pytest.mark.parametrize("codec", ["none", "lz4"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_re_read_of_unchanged_files_is_the_checked_read_bit_for_bit(
        tmp_path: Path, rng: np.random.Generator, small_chunks: int, settle: float, codec: str, dtype: type) -> None:
    store = _write(tmp_path / "s.zarr", random_csr(rng, dtype=dtype), settle, codec)
    checked = [store.read_partition_with_norms(p.index, dtype=np.float64) for p in store.partitions]
    checked = [(b.copy(), n.copy()) for b, n in checked]  # the read pool reuses arrays
    assert len(CHECKED) == store.n_partitions  # every partition, an empty one too (its row pointers are identified)
    hits = CHECKED.hits
    for p, first in zip(store.partitions, checked):
        again = store.read_partition_with_norms(p.index, dtype=np.float64)
        assert _same(again, first)
        assert again[0].has_canonical_format
    assert CHECKED.hits - hits == len(CHECKED) > 0
    # A block read as stored (float32 values) is another entry: its own check first.
    if dtype is np.float32:
        store.read_partition_with_norms(0)
        assert CHECKED.hits - hits == store.n_partitions


def test_files_changed_less_than_two_seconds_before_the_check_are_not_kept(tmp_path: Path,
                                                                            rng: np.random.Generator) -> None:
    store = _write(tmp_path / "s.zarr", random_csr(rng), 0.0)
    store.read_partition_with_norms(0, dtype=np.float64)
    assert len(CHECKED) == 0  # a second write within the resolution of file times could keep the change time


def _rewrite(path: str, values: np.ndarray) -> None:
    """Write the chunk file in place (same inode, same size): only its times change."""
    assert os.path.getsize(path) == values.nbytes
    with open(path, "r+b") as handle:
        handle.write(values.tobytes())


def test_a_values_chunk_written_since_the_checked_read_is_read_and_summed_again(
        tmp_path: Path, rng: np.random.Generator, small_chunks: int, settle: float) -> None:
    matrix = random_csr(rng)
    store = _write(tmp_path / "s.zarr", matrix, settle)
    _read_every_partition(store)
    path = _chunk(store, "data", 1)
    doubled = np.fromfile(path, dtype=np.float64) * 2.0
    _rewrite(path, doubled)
    hits = CHECKED.hits
    fresh = open_matrix(store.path)
    expected = sp.csr_array(matrix, copy=True)
    expected.data[small_chunks : 2 * small_chunks] *= 2.0
    for p in fresh.partitions:
        block, norms = fresh.read_partition_with_norms(p.index, dtype=np.float64)
        rows = slice(p.row_start, p.row_stop)
        assert np.array_equal(block.toarray(), expected[rows].toarray())
        assert np.allclose(norms, np.sqrt((expected[rows].toarray() ** 2).sum(axis=1)), rtol=1e-15, atol=0)
    assert CHECKED.hits - hits == store.n_partitions - 1  # every partition but the one holding the chunk


def test_an_indices_chunk_replaced_since_the_checked_read_is_checked_again(
        tmp_path: Path, rng: np.random.Generator, small_chunks: int, settle: float) -> None:
    store = _write(tmp_path / "s.zarr", random_csr(rng), settle)
    _read_every_partition(store)
    path = _chunk(store, "indices", 0)
    bad = np.fromfile(path, dtype=np.int32)
    bad[3] = 10_000  # outside the 50 columns
    replacement = path + ".new"
    bad.tofile(replacement)
    os.replace(replacement, path)  # a new file (another inode) renamed over the chunk
    with pytest.raises(StoreCorruptError, match=r"column indices outside \[0, 50\)"):
        open_matrix(store.path).read_partition_with_norms(0, dtype=np.float64)


def test_an_index_out_of_range_is_refused_even_when_the_files_look_unchanged(
        tmp_path: Path, rng: np.random.Generator, small_chunks: int, settle: float,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A file written through a shared memory map may keep its times for a while after a write: even then, the
    # indices are bounded during the read and nothing out of range reaches a scipy routine.
    monkeypatch.setattr(_chunks, "identity", lambda status: (status.st_dev, status.st_ino, 0, 0, 0))
    monkeypatch.setattr(store_module.CheckedReads, "SETTLED", -(2**62))
    store = _write(tmp_path / "s.zarr", random_csr(rng), 0.0)
    store.read_partition_with_norms(0, dtype=np.float64)
    assert len(CHECKED) == 1
    for value in (50, -1, 2**31 - 1):
        path = _chunk(store, "indices", 1)
        indices = np.fromfile(path, dtype=np.int32)
        indices[5] = value
        _rewrite(path, indices)
        with pytest.raises(StoreCorruptError, match=r"column indices outside \[0, 50\)|malformed|out of range"):
            open_matrix(store.path).read_partition_with_norms(0, dtype=np.float64)


def test_a_lost_chunk_is_never_kept_and_still_refused(tmp_path: Path, rng: np.random.Generator, small_chunks: int,
                                                      settle: float) -> None:
    store = _write(tmp_path / "s.zarr", random_csr(rng), settle)
    store.read_partition_with_norms(0, dtype=np.float64)
    os.remove(_chunk(store, "data", 1))
    for _ in range(2):
        with pytest.raises(StoreCorruptError, match="a chunk of 'data' or 'indices' is missing"):
            open_matrix(store.path).read_partition_with_norms(0, dtype=np.float64)


def test_the_memo_keeps_the_most_recently_read_within_its_bound(tmp_path: Path, rng: np.random.Generator,
                                                               small_chunks: int, settle: float,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = _write(tmp_path / "s.zarr", random_csr(rng), settle)
    for p in store.partitions:  # what each entry holds: its norms and its files' identities
        store.read_partition_with_norms(p.index, dtype=np.float64)
    sizes = [entry.nbytes for entry in CHECKED._entries.values()]
    assert len(sizes) == store.n_partitions
    CHECKED.clear()
    monkeypatch.setattr(CHECKED, "max_bytes", sizes[-2] + sizes[-1])
    _read_every_partition(store)
    assert len(CHECKED) == 2
    hits = CHECKED.hits
    store.read_partition_with_norms(store.n_partitions - 1, dtype=np.float64)
    assert CHECKED.hits == hits + 1
    store.read_partition_with_norms(0, dtype=np.float64)  # dropped: checked again
    assert CHECKED.hits == hits + 1


def test_a_store_written_again_at_the_same_path_is_checked_again(tmp_path: Path, rng: np.random.Generator,
                                                                 small_chunks: int, settle: float) -> None:
    first = _write(tmp_path / "s.zarr", random_csr(rng), settle)
    first.read_partition_with_norms(0, dtype=np.float64)
    other = random_csr(rng)
    second = write_matrix(tmp_path / "s.zarr", other, rows_per_partition=25, overwrite=True)
    time.sleep(settle)
    hits = CHECKED.hits
    block, _norms = open_matrix(second.path).read_partition_with_norms(0, dtype=np.float64)
    assert CHECKED.hits == hits
    assert np.array_equal(block.toarray(), other[:25].toarray())


def _anndata(path: Path, matrix: sp.csr_array) -> str:
    """An AnnData store (no partition table of its own) whose arrays each fit one uncompressed chunk file."""
    import zarr

    root = zarr.open_group(path, mode="w", zarr_format=3)
    x = root.create_group("X", attributes={"encoding-type": "csr_matrix", "encoding-version": "0.1.0",
                                           "shape": list(matrix.shape)})
    for key, values in (("data", matrix.data), ("indices", matrix.indices.astype(np.int32)),
                        ("indptr", matrix.indptr.astype(np.int64))):
        x.create_array(key, shape=values.shape, dtype=values.dtype, chunks=(1000,), compressors=None)[:] = values
    return str(path)


def test_a_partition_of_another_table_over_the_same_files_is_not_taken_for_a_checked_one(
        tmp_path: Path, settle: float) -> None:
    # An AnnData store has no partition table: the reader chooses one (rows_per_partition). Partition 1 of a table
    # of 4 rows per partition is rows 4-7; of a table of 6, rows 6-9: as many rows, read from the same chunk files.
    # A re-read must give the norms of its own rows, never those of the rows another table put at that position.
    norms = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 3.0, 4.0, 50.0, 60.0])
    matrix = sp.csr_array((norms, (np.arange(10), np.arange(10) % 4)), shape=(10, 4))
    path = _anndata(tmp_path / "a.zarr", matrix)
    time.sleep(settle)
    by_four = open_matrix(path, rows_per_partition=4)
    _, first = by_four.read_partition_with_norms(1, dtype=np.float64)
    assert np.array_equal(first, norms[4:8]) and len(CHECKED) == 1
    by_six = open_matrix(path, rows_per_partition=6)
    block, second = by_six.read_partition_with_norms(1, dtype=np.float64)
    assert np.array_equal(block.toarray(), matrix[6:10].toarray())
    assert np.array_equal(second, norms[6:10])


def test_files_are_settled_by_the_time_the_read_began_not_when_it_ended(
        tmp_path: Path, rng: np.random.Generator, small_chunks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # A file changed just before a read may be changed again within the same tick of file times while the read goes
    # on: its change time is compared with the time the read began. A slow disk (fault injected: each chunk read
    # waits) makes the read end long after the files have settled; the read is still not kept.
    monkeypatch.setattr(CheckedReads, "SETTLED", 1_000_000_000)
    store = _write(tmp_path / "s.zarr", random_csr(rng), 0.2)
    read_chunk = _chunks._read_chunk

    def slow(*args: object, **kwargs: object) -> None:
        read_chunk(*args, **kwargs)  # type: ignore[arg-type]
        time.sleep(0.1)

    monkeypatch.setattr(_chunks, "_read_chunk", slow)
    store.read_partition_with_norms(0, dtype=np.float64)  # more than ten chunk files: over a second
    assert len(CHECKED) == 0


def _deep_size(value: object) -> int:
    import sys

    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (list, tuple)):
        return sys.getsizeof(value) + sum(_deep_size(v) for v in value)
    return sys.getsizeof(value)


def test_the_memo_bound_counts_the_file_identities_it_keeps(tmp_path: Path, rng: np.random.Generator,
                                                            small_chunks: int, settle: float,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # Partitions of many chunk files keep far more file identities than norms (16 values per chunk here): the bound
    # is on all that is kept.
    store = _write(tmp_path / "s.zarr", random_csr(rng), settle)
    bound = 6 * sum(p.n_rows * 8 for p in store.partitions)  # the norms of every partition, and then some
    monkeypatch.setattr(CHECKED, "max_bytes", bound)
    _read_every_partition(store)
    kept = sum(e.norms.nbytes + _deep_size(e.files) for e in CHECKED._entries.values())
    assert 0 < len(CHECKED) and kept <= bound


def test_threads_of_one_worker_reading_at_once_get_each_partition_as_checked(
        tmp_path: Path, rng: np.random.Generator, small_chunks: int, settle: float) -> None:
    # Several threads per worker: reads of the same and of other partitions at once (some first reads, most
    # re-reads, some entries replaced meanwhile) each return their own partition's block and norms.
    from concurrent.futures import ThreadPoolExecutor

    matrix = random_csr(rng)
    store = _write(tmp_path / "s.zarr", matrix, settle)
    expected = {p.index: (matrix[p.row_start : p.row_stop].toarray(),
                          np.sqrt((matrix[p.row_start : p.row_stop].toarray() ** 2).sum(axis=1)))
                for p in store.partitions}
    order = rng.integers(0, store.n_partitions, 400)

    def read(index: int) -> bool:
        block, norms = store.read_partition_with_norms(int(index), dtype=np.float64)
        dense, want = expected[int(index)]
        return bool(np.array_equal(block.toarray(), dense) and np.allclose(norms, want, rtol=1e-12, atol=0))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(read, order))
    assert CHECKED.hits > 0


def test_an_append_rewrites_shared_chunks_and_every_partition_still_reads_as_written(
        tmp_path: Path, rng: np.random.Generator, small_chunks: int, settle: float) -> None:
    # An append writes the chunk its first values share with the last partition again (a new file, renamed over
    # the old one) and a new generation: the old handle's re-reads and the new handle's reads both give the rows
    # as written, and nothing is taken from an entry whose files changed.
    from dppca_dask.storage import append_partition

    matrix = random_csr(rng)
    old = _write(tmp_path / "s.zarr", matrix, settle)
    _read_every_partition(old)
    extra = random_csr(rng, n_rows=10)
    new = append_partition(old.path, extra)
    time.sleep(settle)
    whole = sp.csr_array(sp.vstack([matrix, extra], format="csr"))
    for store in (old, open_matrix(new.path)):
        for p in store.partitions:
            block, norms = store.read_partition_with_norms(p.index, dtype=np.float64)
            rows = whole[p.row_start : p.row_stop].toarray()
            assert np.array_equal(block.toarray(), rows)
            assert np.allclose(norms, np.sqrt((rows**2).sum(axis=1)), rtol=1e-12, atol=0)


@pytest.mark.parametrize("bad", [2**32 + 1, -(2**32) + 2, 2**40])
def test_a_wide_column_index_out_of_range_is_refused_not_narrowed_into_range(tmp_path: Path, bad: int) -> None:
    # 64-bit column indices are narrowed to 32 bits for the kernels: only once they are known to be in range
    # (2**32 + 1 narrowed first would read as column 1).
    import zarr

    root = zarr.open_group(tmp_path / "a.zarr", mode="w", zarr_format=3)
    x = root.create_group("X", attributes={"encoding-type": "csr_matrix", "encoding-version": "0.1.0",
                                           "shape": [2, 4]})
    for key, values in (("data", np.array([1.0, 2.0, 3.0])), ("indices", np.array([0, bad, 3], np.int64)),
                        ("indptr", np.array([0, 2, 3], np.int64))):
        x.create_array(key, shape=values.shape, dtype=values.dtype, chunks=(100,), compressors=None)[:] = values
    store = open_matrix(tmp_path / "a.zarr")
    for read in (lambda: store.read_partition(0), lambda: store.read_partition_with_norms(0, dtype=np.float64)):
        with pytest.raises(StoreCorruptError, match=rf"column indices outside \[0, 4\) \(column {bad} at row 0\)"):
            read()


def test_file_identities_of_any_unsigned_inode_and_device_numbers_are_kept(
        tmp_path: Path, rng: np.random.Generator, small_chunks: int, settle: float,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Device and inode numbers are unsigned 64-bit (network and FUSE file systems hand out ones above 2**63), times
    # are signed: every identity is kept and compared exactly.
    def identity(status: os.stat_result) -> tuple[int, int, int, int, int]:
        return (status.st_dev + 2**63, status.st_ino + 2**64 - 2**40, status.st_size, status.st_mtime_ns,
                status.st_ctime_ns)

    monkeypatch.setattr(_chunks, "identity", identity)
    store = _write(tmp_path / "s.zarr", random_csr(rng), settle)
    first = store.read_partition_with_norms(0, dtype=np.float64)
    first = (first[0].copy(), first[1].copy())
    hits = CHECKED.hits
    assert _same(store.read_partition_with_norms(0, dtype=np.float64), first) and CHECKED.hits == hits + 1


def _worker_hits() -> int:
    from dppca_dask.storage.store import CHECKED

    return CHECKED.hits


def test_on_a_cluster_every_step_after_the_checks_re_reads_unchanged_files(tmp_path: Path, rng: np.random.Generator,
                                                                          local_client: Any) -> None:
    """Real worker processes: the checks before a run read each partition on the worker that re-reads it at every
    step, so from the first step on every read finds its files unchanged; each step's partial is the bits of the
    partition checked anew (an executor in this process with the memo emptied)."""
    from distributed import get_task_stream

    from dppca_dask.coordinator.requests import PowerStep
    from dppca_dask.coordinator.driver import Coordinator, LocalExecutor
    from dppca_dask.coordinator.preflight import preflight
    from dppca_dask.coordinator.sources import as_source
    from dppca_dask.kernels import ThresholdGrid

    store = _write(tmp_path / "s.zarr", random_csr(rng, n_rows=200), CheckedReads.SETTLED / 1e9 + 0.2)
    x = rng.standard_normal(store.n_cols)
    step = PowerStep(x / np.linalg.norm(x), row_norm_bound=1.0, grid=ThresholdGrid.for_bound(1.0), top_m=20)
    with Coordinator(local_client, as_source(store), persist=False) as coordinator:
        with get_task_stream(local_client) as stream:
            preflight(coordinator.source, coordinator)
        ran = {str(t["key"]).rsplit("-", 1)[1]: t["worker"] for t in stream.data if "preflight" in str(t["key"])}
        assert ran == {str(i): coordinator._placement[i] for i in range(store.n_partitions)}
        before = sum(local_client.run(_worker_hits).values())
        partials = [coordinator.execute(step) for _ in range(2)]
        assert sum(local_client.run(_worker_hits).values()) - before == 2 * store.n_partitions
    CHECKED.clear()
    expected = LocalExecutor(as_source(store)).execute(step)
    for got in partials:
        assert got.full_sum.tobytes() == expected.full_sum.tobytes()
        assert np.array_equal(got.histogram, expected.histogram) and got.cuts == expected.cuts
        assert [b.data.tobytes() for b in got.bin_sums] == [b.data.tobytes() for b in expected.bin_sums]


def test_the_setting_bounds_the_memo_and_zero_keeps_nothing(tmp_path: Path, rng: np.random.Generator,
                                                            small_chunks: int, settle: float) -> None:
    import dask

    from dppca_dask.errors import InvalidParameterError

    store = _write(tmp_path / "s.zarr", random_csr(rng), settle)
    assert CHECKED.max_bytes is None and CHECKED.limit == 256 * 2**20  # the packaged default
    hits = CHECKED.hits
    with dask.config.set({"dppca_dask.storage.checked-reads": 0}):
        for _ in range(2):
            store.read_partition_with_norms(0, dtype=np.float64)
        assert len(CHECKED) == 0 and CHECKED.hits == hits
    store.read_partition_with_norms(0, dtype=np.float64)
    with dask.config.set({"dppca_dask.storage.checked-reads": 0}):  # kept before: not used while the setting is 0
        store.read_partition_with_norms(0, dtype=np.float64)
        assert len(CHECKED) == 1 and CHECKED.hits == hits
    with dask.config.set({"dppca_dask.storage.checked-reads": "1KiB"}):
        assert CHECKED.limit == 1024
    with dask.config.set({"dppca_dask.storage.checked-reads": -1}):
        with pytest.raises(InvalidParameterError, match="checked-reads must be >= 0"):
            store.read_partition_with_norms(0, dtype=np.float64)
