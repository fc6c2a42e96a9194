"""Damaged and foreign stores: every failure is a clear error naming the store and, for data, the partition."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr

from dppca_dask.errors import InvalidInputError, StoreCorruptError, StoreNotFoundError, UnsupportedStoreVersionError
from dppca_dask.storage import open_matrix, write_matrix


def set_metadata(path: Path, meta: object) -> None:
    zarr.open_group(path, mode="r+").attrs["dppca_dask"] = meta


def metadata(path: Path) -> dict[str, object]:
    return dict(zarr.open_group(path, mode="r").attrs["dppca_dask"])  # type: ignore[arg-type]


def test_missing_path_and_not_a_store(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError, match=r"no matrix store at '.*nowhere.zarr'; create one with"):
        open_matrix(tmp_path / "nowhere.zarr")
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreNotFoundError, match=r"'.*file' is not a zarr group"):
        open_matrix(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreNotFoundError, match=r"is not a zarr group"):
        open_matrix(tmp_path / "empty")
    zarr.open_group(tmp_path / "group", mode="w").create_array("other", shape=(2,), dtype="f8")
    with pytest.raises(StoreNotFoundError, match=r"neither a dppca_dask store nor an AnnData store"):
        open_matrix(tmp_path / "group")


def test_unknown_format_version(tmp_path: Path, sparse: sp.csr_array) -> None:
    store = write_matrix(tmp_path / "s.zarr", sparse)
    set_metadata(tmp_path / "s.zarr", {**metadata(tmp_path / "s.zarr"), "format_version": 2})
    with pytest.raises(UnsupportedStoreVersionError, match=r"format version 2; this release of dppca_dask reads "
                                                           r"version 1") as info:
        open_matrix(store.path)
    assert info.value.exit_code == 2


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda m: {k: v for k, v in m.items() if k != "n_rows"}, r"incomplete or malformed \(KeyError"),
        (lambda m: {**m, "n_cols": "wide"}, r"incomplete or malformed \(ValueError"),
        (lambda m: {**m, "partitions": [[0, 1]]}, r"incomplete or malformed"),
        (lambda m: {**m, "layout": "coo"}, r"unknown layout 'coo'"),
        (lambda m: {**m, "n_rows": 41}, r"partition table of store .* disagrees with its row and entry counts"),
        (lambda m: {**m, "partitions": [m["partitions"][1], m["partitions"][0]] + m["partitions"][2:]},
         r"inconsistent at partition 0"),
        (lambda m: [1, 2, 3], r"malformed \(a list, expected an object\)"),
    ],
)
def test_malformed_metadata(tmp_path: Path, sparse: sp.csr_array, change: object, match: str) -> None:
    write_matrix(tmp_path / "s.zarr", sparse, rows_per_partition=10)
    set_metadata(tmp_path / "s.zarr", change(metadata(tmp_path / "s.zarr")))  # type: ignore[operator]
    with pytest.raises(StoreCorruptError, match=match):
        open_matrix(tmp_path / "s.zarr")


@pytest.mark.parametrize("array", ["data", "indices", "indptr"])
def test_deleted_chunk_names_the_partition(tmp_path: Path, sparse: sp.csr_array, small_chunks: int,
                                           array: str) -> None:
    store = write_matrix(tmp_path / "s.zarr", sparse, rows_per_partition=10)
    victim = store.partitions[2]
    chunk = victim.nnz_start // small_chunks if array != "indptr" else 2  # indptr chunks are 10 rows each
    os.remove(tmp_path / "s.zarr" / "X" / array / "c" / str(chunk))
    reopened = open_matrix(store.path)
    with pytest.raises(StoreCorruptError, match=r"partition 2 .* re-ingest") as info:
        reopened.read_partition(2)
    assert info.value.partition == 2 and info.value.source == store.path
    if array != "indptr":  # partitions whose entries lie outside the lost chunk still read
        lost = range(chunk * small_chunks, (chunk + 1) * small_chunks)
        intact = [p for p in store.partitions if p.nnz and (p.nnz_stop <= lost.start or p.nnz_start >= lost.stop)]
        assert intact
        for part in intact:
            expected = sparse[part.row_start : part.row_stop].toarray()
            np.testing.assert_array_equal(reopened.read_partition(part.index).toarray(), expected)


def test_deleted_row_norm_chunk(tmp_path: Path, sparse: sp.csr_array) -> None:
    store = write_matrix(tmp_path / "s.zarr", sparse, rows_per_partition=10)
    os.remove(tmp_path / "s.zarr" / "obs" / "row_norms" / "c" / "3")
    with pytest.raises(StoreCorruptError, match=r"row norm of row 30 \(partition 3\) .* is missing") as info:
        open_matrix(store.path).read_row_norms(3)
    assert (info.value.partition, info.value.row) == (3, 30)


def test_deleted_dense_chunk(tmp_path: Path, sparse: sp.csr_array) -> None:
    store = write_matrix(tmp_path / "d.zarr", sparse.toarray(), rows_per_partition=10)
    os.remove(tmp_path / "d.zarr" / "X" / "c" / "1" / "0")
    with pytest.raises(StoreCorruptError, match=r"partition 1 of store .* a chunk of 'X' is missing") as info:
        open_matrix(store.path).read_partition(1)
    assert info.value.row == 10


@pytest.mark.parametrize("chunk", ["X/data/c/1", "X/indptr/c/0", "obs/row_norms/c/0"])
def test_garbage_chunk(tmp_path: Path, sparse: sp.csr_array, small_chunks: int, rng: np.random.Generator,
                       chunk: str) -> None:
    store = write_matrix(tmp_path / "s.zarr", sparse, rows_per_partition=10)
    (tmp_path / "s.zarr" / chunk).write_bytes(rng.bytes(100))
    reopened = open_matrix(store.path)
    with pytest.raises(StoreCorruptError, match=r"partition 0 .*(damaged|re-ingest)") as info:
        reopened.read_row_norms(0) if chunk.startswith("obs/row_norms") else reopened.read_partition(0)
    assert info.value.partition == 0


def test_anndata_store_with_bad_x(tmp_path: Path) -> None:
    group = zarr.open_group(tmp_path / "a.zarr", mode="w")
    group.create_array("X", shape=(2, 2, 2), dtype="f8")
    with pytest.raises(InvalidInputError, match=r"'X' in '.*a.zarr' has 3 dimensions"):
        open_matrix(tmp_path / "a.zarr")
    x = zarr.open_group(tmp_path / "b.zarr", mode="w").create_group("X", attributes={"encoding-type": "csc_matrix"})
    assert x is not None
    with pytest.raises(InvalidInputError, match=r"is a csc_matrix \(column-compressed\).*dppca-dask ingest"):
        open_matrix(tmp_path / "b.zarr")
    zarr.open_group(tmp_path / "c.zarr", mode="w").create_group("X", attributes={"encoding-type": "dataframe"})
    with pytest.raises(InvalidInputError, match=r"encoding-type 'dataframe'; expected 'csr_matrix'"):
        open_matrix(tmp_path / "c.zarr")


def test_metadata_is_plain_json(tmp_path: Path, sparse: sp.csr_array) -> None:
    write_matrix(tmp_path / "s.zarr", sparse)
    meta = json.loads((tmp_path / "s.zarr" / "zarr.json").read_text())["attributes"]["dppca_dask"]
    assert meta["format_version"] == 1 and meta["n_rows"] == 40
