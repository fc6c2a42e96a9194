"""Appending partitions: timestamps, repeated appends, AnnData compatibility, and crash safety."""

from __future__ import annotations

import datetime as dt
import os
import threading
from pathlib import Path

import anndata
import numpy as np
import pytest
import scipy.sparse as sp
import zarr

from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.storage import append_partition, open_matrix, write_matrix
from dppca_dask.storage import writer as writer_module


def read_back(path: Path) -> np.ndarray:
    return open_matrix(path).to_scipy().toarray()


def test_appends_with_timestamps(tmp_path: Path, sparse: sp.csr_array, rng: np.random.Generator) -> None:
    store = write_matrix(tmp_path / "s.zarr", sparse, rows_per_partition=10)
    first = sp.csr_array(rng.standard_normal((3, 6)) * (rng.random((3, 6)) < 0.5))
    second = sp.csr_array(rng.standard_normal((25, 6)) * (rng.random((25, 6)) < 0.5))
    when = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    after_first = append_partition(store.path, first, timestamp=1_700_000_000.5)
    after_second = append_partition(store.path, second, timestamp=when)
    assert (after_first.generation, after_second.generation) == (1, 2)
    assert len({store.fingerprint, after_first.fingerprint, after_second.fingerprint}) == 3
    # The second block is larger than a partition: it is split at the store's partition size.
    assert [p.n_rows for p in after_second.partitions] == [10, 10, 10, 10, 3, 10, 10, 5]
    assert [p.timestamp for p in after_second.partitions] == [None] * 4 + [1_700_000_000.5] + [when.timestamp()] * 3
    assert after_second.info()["timestamps"] is True
    expected = np.vstack([sparse.toarray(), first.toarray(), second.toarray()])
    np.testing.assert_array_equal(read_back(tmp_path / "s.zarr"), expected)
    np.testing.assert_allclose(after_second.read_row_norms(4), np.linalg.norm(first.toarray(), axis=1))
    # AnnData still reads the grown matrix.
    x = anndata.io.read_elem(zarr.open_group(store.path, mode="r")["X"])
    np.testing.assert_array_equal(sp.csr_array(x).toarray(), expected)


def test_append_to_dense_store(tmp_path: Path, sparse: sp.csr_array) -> None:
    store = write_matrix(tmp_path / "d.zarr", sparse.toarray(), rows_per_partition=10)
    grown = append_partition(store.path, sparse[:4])  # a sparse block is densified for a dense store
    np.testing.assert_array_equal(grown.to_scipy().toarray(), np.vstack([sparse.toarray(), sparse[:4].toarray()]))


def test_append_errors_leave_the_store_unchanged(tmp_path: Path, sparse: sp.csr_array) -> None:
    store = write_matrix(tmp_path / "s.zarr", sparse, rows_per_partition=10)
    bad = np.ones((2, 6))
    bad[1, 4] = np.nan
    with pytest.raises(InvalidInputError, match=r"nan value at row 41 \(partition 4\)"):
        append_partition(store.path, bad)
    with pytest.raises(InvalidInputError, match=r"shape mismatch at row 40 .* the matrix has 6 columns"):
        append_partition(store.path, sp.csr_array((2, 5)))
    with pytest.raises(InvalidParameterError, match=r"timestamp must be timezone-aware"):
        append_partition(store.path, sparse[:1], timestamp=dt.datetime(2026, 1, 1))
    with pytest.raises(InvalidInputError, match=r"duplicate entry \(row 40, column 2\)"):
        append_partition(store.path, sp.coo_array(([1.0, 1.0], ([0, 0], [2, 2])), shape=(1, 6)),
                         on_duplicate="reject")
    reopened = open_matrix(store.path)
    assert reopened.fingerprint == store.fingerprint
    np.testing.assert_array_equal(reopened.to_scipy().toarray(), sparse.toarray())


def test_append_to_anndata_store_is_refused(tmp_path: Path, sparse: sp.csr_array) -> None:
    anndata.AnnData(X=sp.csr_matrix(sparse)).write_zarr(tmp_path / "a.zarr")
    with pytest.raises(InvalidParameterError, match=r"is an AnnData store; appending needs a dppca_dask store"):
        append_partition(tmp_path / "a.zarr", sparse[:1])


def test_interrupted_append_keeps_the_previous_store(tmp_path: Path, sparse: sp.csr_array, small_chunks: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    store = write_matrix(tmp_path / "s.zarr", sparse, rows_per_partition=10)
    before = read_back(tmp_path / "s.zarr")

    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("power cut")

    monkeypatch.setattr(writer_module, "_commit_metadata", fail)
    with pytest.raises(RuntimeError, match="power cut"):
        append_partition(store.path, sparse[:12])
    reopened = open_matrix(store.path)
    assert reopened.fingerprint == store.fingerprint and reopened.n_rows == 40
    np.testing.assert_array_equal(reopened.to_scipy().toarray(), before)
    x = anndata.io.read_elem(zarr.open_group(store.path, mode="r")["X"])
    np.testing.assert_array_equal(sp.csr_array(x).toarray(), before)  # arrays were trimmed back
    monkeypatch.undo()
    grown = append_partition(store.path, sparse[:12])
    assert grown.generation == 1
    np.testing.assert_array_equal(grown.to_scipy().toarray(), np.vstack([before, sparse[:12].toarray()]))


@pytest.mark.parametrize("layout", ["csr", "dense"])
def test_crash_after_writing_chunks(tmp_path: Path, sparse: sp.csr_array, small_chunks: int, layout: str) -> None:
    matrix = sparse if layout == "csr" else sparse.toarray()
    store = write_matrix(tmp_path / "s.zarr", matrix, rows_per_partition=10)
    before = read_back(tmp_path / "s.zarr")
    # A process that died after writing new chunks but before its commit: the chunks are there, beyond the
    # arrays' shapes, which neither the nodes' own metadata nor the consolidated copy changed.
    group = writer_module._prepare(store)
    arrays = writer_module._open_for_append(store, group)
    changes = writer_module.Changes(group)
    writer_module._write_rows(arrays, store.layout, matrix[:15], store.n_rows, store.nnz, store.n_partitions, None,
                              grow=changes.grow)
    assert arrays["row_norms"].shape == (55,)
    for use_consolidated in (None, False):
        assert zarr.open_group(store.path, mode="r", use_consolidated=use_consolidated)["obs/row_norms"].shape == (40,)
    reopened = open_matrix(store.path)
    assert reopened.fingerprint == store.fingerprint and reopened.shape == (40, 6)
    np.testing.assert_array_equal(reopened.to_scipy().toarray(), before)
    assert anndata.read_zarr(store.path).shape == (40, 6)
    extra = sparse[20:23] if layout == "csr" else sparse[20:23].toarray()
    grown = append_partition(store.path, extra)
    np.testing.assert_array_equal(grown.to_scipy().toarray(), np.vstack([before, sparse[20:23].toarray()]))
    assert zarr.open_group(store.path, mode="r")["obs/row_norms"].shape == (43,)


def _unconsolidate(path: str) -> None:
    """Make ``path`` a store of an earlier release: no consolidated metadata in its root ``zarr.json``."""
    import json

    meta = Path(path, "zarr.json")
    doc = json.loads(meta.read_text())
    doc.pop("consolidated_metadata", None)
    meta.write_text(json.dumps(doc))


def test_an_earlier_releases_interrupted_append_is_cut_back_and_the_store_consolidated(
        tmp_path: Path, sparse: sp.csr_array, small_chunks: int) -> None:
    """Appends of earlier releases resized the arrays before their commit: the next append cuts them back to the
    committed extents, consolidates the store, then appends."""
    store = write_matrix(tmp_path / "s.zarr", sparse, rows_per_partition=10)
    _unconsolidate(store.path)
    before = read_back(tmp_path / "s.zarr")
    arrays = writer_module._open_for_append(store)
    writer_module._write_rows(arrays, store.layout, sparse[:15], store.n_rows, store.nnz, store.n_partitions, None,
                              grow=writer_module.direct_grow)  # as earlier releases wrote: shapes grown at once
    assert zarr.open_group(store.path, mode="r")["obs/row_norms"].shape == (55,)
    assert open_matrix(store.path).shape == (40, 6)
    grown = append_partition(store.path, sparse[20:23])
    np.testing.assert_array_equal(grown.to_scipy().toarray(), np.vstack([before, sparse[20:23].toarray()]))
    group = zarr.open_group(store.path, mode="r")
    assert group.metadata.consolidated_metadata is not None and group["obs/row_norms"].shape == (43,)
    assert anndata.read_zarr(store.path).shape == (43, 6)


def test_concurrent_appends_take_a_lock(tmp_path: Path, sparse: sp.csr_array) -> None:
    store = write_matrix(tmp_path / "s.zarr", sparse)
    append_partition(store.path, sparse[:2])
    assert os.path.exists(tmp_path / ".s.zarr.append.lock")  # beside the store: zarr lists what is inside
    assert not os.path.exists(tmp_path / "s.zarr" / ".append.lock")
    assert open_matrix(store.path).n_rows == 42


def _waiting_on(thread: threading.Thread, lock_file: Path, timeout: float = 60.0) -> bool:
    """Whether ``thread`` comes to wait in ``FileLock.acquire`` of ``lock_file`` (its stack, read until it does,
    ends or ``timeout`` passes): no timing assumption about how long an append takes."""
    import sys
    import time

    deadline = time.monotonic() + timeout
    while thread.is_alive() and time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident or -1)
        while frame is not None:
            lock = frame.f_locals.get("self")
            if frame.f_code.co_name == "acquire" and os.fspath(getattr(lock, "lock_file", "")) == str(lock_file):
                return True
            frame = frame.f_back
        time.sleep(0.01)
    return False


def test_a_store_locked_inside_by_an_earlier_release_still_appends(tmp_path: Path, sparse: sp.csr_array) -> None:
    """Earlier releases locked appends with ``NAME/.append.lock``: an append takes that lock too while it exists
    (it is held by the other release's append otherwise), leaves it in place and its mode as it was."""
    from filelock import FileLock

    store = write_matrix(tmp_path / "s.zarr", sparse)
    legacy = tmp_path / "s.zarr" / ".append.lock"
    legacy.touch()
    os.chmod(legacy, 0o664)  # another user's earlier release may share it
    done = threading.Event()
    with FileLock(str(legacy), mode=0o664):  # an earlier release's append, running: this one must wait for it
        worker = threading.Thread(target=lambda: (append_partition(store.path, sparse[:2]), done.set()))
        worker.start()
        assert _waiting_on(worker, legacy) and not done.is_set()
    worker.join(60)
    assert done.is_set() and legacy.exists() and (legacy.stat().st_mode & 0o777) == 0o664
    assert open_matrix(store.path).n_rows == 42


def test_every_path_to_a_store_takes_one_lock(tmp_path: Path, sparse: sp.csr_array) -> None:
    """An append through a symbolic link to the store and one through its own path take the same lock file."""
    from filelock import FileLock

    store = write_matrix(tmp_path / "s.zarr", sparse)
    (tmp_path / "current.zarr").symlink_to(tmp_path / "s.zarr", target_is_directory=True)
    assert writer_module.append_lock_path(str(tmp_path / "current.zarr")) == str(tmp_path / ".s.zarr.append.lock")
    done = threading.Event()
    with FileLock(writer_module.append_lock_path(store.path)):  # an append through the store's own path
        worker = threading.Thread(target=lambda: (append_partition(tmp_path / "current.zarr", sparse[:2]),
                                                  done.set()))
        worker.start()
        assert _waiting_on(worker, tmp_path / ".s.zarr.append.lock") and not done.is_set()
    worker.join(60)
    assert done.is_set() and open_matrix(store.path).n_rows == 42


def _id_store(tmp_path: Path, ids: np.ndarray) -> str:
    """A Parquet-ingested store (declared width 4) whose rows map to ``ids``."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from dppca_dask.ingest import ingest

    pq.write_table(pa.table({"row_id": np.repeat(ids, 2), "col_id": np.tile([0, 3], ids.size),
                             "value": np.ones(2 * ids.size)}), tmp_path / "day.parquet")
    return ingest(tmp_path / "day.parquet", tmp_path / "ids.zarr", column_ids=[0, 1, 2, 3]).path


def test_row_ids_and_labels_are_checked_before_anything_is_written(tmp_path: Path) -> None:
    """An append's row ids and labels follow the store's: refused (store unchanged) when missing, unexpected, of
    the wrong length or kind."""
    path = _id_store(tmp_path, np.array([10, 11, 12]))
    rows = sp.csr_array(np.ones((2, 4)))
    cases = [({}, "maps its rows to ids .* the appended rows have none"),
             ({"row_ids": np.array([1])}, r"row_ids has shape \(1,\) for 2 new rows"),
             ({"row_ids": np.array(["a", "b"])}, "the appended rows' ids are strings"),
             ({"row_ids": np.array([1, 2]), "labels": np.zeros(2)}, "keeps no labels")]
    for kwargs, message in cases:
        with pytest.raises(InvalidParameterError, match=message):
            append_partition(path, rows, **kwargs)
        assert open_matrix(path).n_rows == 3 and zarr.open_group(path)["obs/obs_ids"].shape == (3,)
    plain = write_matrix(tmp_path / "plain.zarr", rows)
    with pytest.raises(InvalidParameterError, match="has no row ids"):
        append_partition(plain.path, rows, row_ids=np.array([1, 2]))
    zarr.open_group(plain.path, mode="r+").create_array("labels", shape=(2,), dtype=np.float64, chunks=(8,))
    zarr.consolidate_metadata(plain.path)  # a consolidated store's nodes changed directly: consolidated again
    for kwargs, message in (({}, "stores a label per row"), ({"labels": np.zeros(3)}, r"labels has shape \(3,\)")):
        with pytest.raises(InvalidParameterError, match=message):
            append_partition(plain.path, rows, **kwargs)
    assert append_partition(plain.path, rows, labels=np.array([0.5, 1.5])).n_rows == 4
    np.testing.assert_array_equal(zarr.open_group(plain.path)["labels"][:], [0.0, 0.0, 0.5, 1.5])


def test_ids_and_labels_left_by_an_interrupted_append_are_cut_back(tmp_path: Path) -> None:
    """An append of an earlier release that died after writing ids and labels (before its commit) left them longer
    than the rows: the next append cuts them back, then adds its own."""
    path = _id_store(tmp_path, np.array([10, 11, 12]))
    _unconsolidate(path)
    group = zarr.open_group(path, mode="r+")
    group.create_array("labels", shape=(3,), dtype=np.float64, chunks=(8,))
    for name, leftover in (("obs/obs_ids", 99), ("labels", 9.0)):  # the dead append's, beyond the committed rows
        group[name].resize((5,))
        group[name][3:] = leftover
    append_partition(path, sp.csr_array(np.ones((1, 4))), row_ids=np.array([20]), labels=np.array([2.0]))
    group = zarr.open_group(path)
    np.testing.assert_array_equal(group["obs/obs_ids"][:], [10, 11, 12, 20])
    np.testing.assert_array_equal(group["labels"][:], [0.0, 0.0, 0.0, 2.0])


def test_a_store_whose_ids_stopped_at_an_earlier_append_takes_rows_without_ids(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Days appended before ids were kept left the id map short: the map can no longer line up, so new rows are
    taken without ids, with a warning that gives no counts (a row count under add/remove neighbours is private)."""
    path = _id_store(tmp_path, np.array([10, 11, 12]))
    zarr.open_group(path, mode="r+")["obs/obs_ids"].resize((2,))
    zarr.consolidate_metadata(path)
    with caplog.at_level("WARNING"):
        assert append_partition(path, sp.csr_array(np.ones((1, 4)))).n_rows == 4
    assert "row ids do not cover its rows" in caplog.text and not any(c.isdigit() for c in caplog.messages[-1]
                                                                        .replace(path, ""))
    assert zarr.open_group(path)["obs/obs_ids"].shape == (2,)
