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
from typing import Any
from pathlib import Path

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
    assert len(CHECKED) == store.n_partitions - sum(p.nnz == 0 for p in store.partitions) or len(CHECKED) > 0
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
    for p in store.partitions:
        store.read_partition_with_norms(p.index, dtype=np.float64)
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
    for p in store.partitions:
        store.read_partition_with_norms(p.index, dtype=np.float64)
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
    sizes = [p.n_rows * 8 for p in store.partitions]
    monkeypatch.setattr(CHECKED, "max_bytes", sizes[0] + sizes[1])
    for p in store.partitions:
        store.read_partition_with_norms(p.index, dtype=np.float64)
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


def _worker_hits() -> int:
    from dppca_dask.storage.store import CHECKED

    return CHECKED.hits


def test_on_a_cluster_every_step_after_the_checks_re_reads_unchanged_files(tmp_path: Path, rng: np.random.Generator,
                                                                          local_client: Any) -> None:
    """Real worker processes: the checks before a run read each partition on the worker that re-reads it at every
    step, so from the first step on every read finds its files unchanged; each step's partial is the bits of the
    partition checked anew (an executor in this process with the memo emptied)."""
    from distributed import get_task_stream

    from dppca_dask.algorithms.requests import PowerStep
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
