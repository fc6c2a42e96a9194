"""A lasting corpus of malformed inputs and damaged stores (issue 9, "A lasting corpus"; issue 8, item 1).

Each case writes its input into a fresh directory and returns the command line to run and a pattern the error must
match (it names the file and the record, line, partition or row). Cases are small (bytes to kilobytes) and
generated, so the corpus documents how each was made. ``INGEST_CASES`` run ``dppca-dask ingest``; ``STORE_CASES``
damage a store and run ``dppca-dask pca`` (through a LocalCluster) and ``dppca-dask info --check`` on it;
``CHECK_ONLY_CASES`` are damage that a private run tolerates correctly (it recomputes norms and canonicalises) but
``info --check`` must report.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import zarr

__all__ = ["APPEND_CASES", "CHECK_ONLY_CASES", "INGEST_CASES", "STORE_CASES", "Case", "native_store"]


@dataclass(frozen=True)
class Case:
    """One malformed input: ``make(directory)`` returns (argv after the command, expected error pattern)."""

    name: str
    issue: str
    """Where the input class comes from (issue and item)."""
    make: Callable[[Path], tuple[list[str], str]]


def _text(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def _csr() -> sp.csr_matrix:
    return sp.csr_matrix(np.array([[1.0, 0, 2, 0], [0, 0, 3, 0], [4, 5, 0, 6], [0, 7, 0, 0]]))


def _npz(path: Path, mutate: Callable[[sp.csr_matrix], None]) -> str:
    m = _csr()
    mutate(m)
    np.savez(path, format=np.array("csr"), shape=np.array(m.shape), data=m.data, indices=m.indices,
             indptr=m.indptr)  # what scipy.sparse.save_npz writes, without its checks
    return str(path)


def _h5ad(path: Path, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, shape: tuple[int, int],
          encoding: str = "csr_matrix") -> str:
    import h5py

    with h5py.File(path, "w") as f:
        f.attrs["encoding-type"] = "anndata"
        f.attrs["encoding-version"] = "0.1.0"
        x = f.create_group("X")
        x.attrs["encoding-type"] = encoding
        x.attrs["encoding-version"] = "0.1.0"
        x.attrs["shape"] = np.array(shape)
        x.create_dataset("data", data=data)
        x.create_dataset("indices", data=indices)
        x.create_dataset("indptr", data=indptr)
    return str(path)


def _anndata_zarr(path: Path, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
                  shape: tuple[int, int]) -> str:
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    root.attrs.update({"encoding-type": "anndata", "encoding-version": "0.1.0"})
    x = root.create_group("X", attributes={"encoding-type": "csr_matrix", "encoding-version": "0.1.0",
                                           "shape": list(shape)})
    for name, values in (("data", data), ("indices", indices), ("indptr", indptr)):
        x.create_array(name, shape=values.shape, dtype=values.dtype, chunks=(max(values.size, 1),))[:] = values
    return str(path)


def _good() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    m = _csr()
    return m.data.astype(np.float64), m.indices.astype(np.int32), m.indptr.astype(np.int64)


def _decreasing(indptr: np.ndarray) -> np.ndarray:
    out = indptr.copy()
    out[2] = out[3] + 1
    return out


def _parquet(path: Path, cols: list[int]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"row_id": list(range(len(cols))), "col_id": cols, "value": [1.0] * len(cols)}), path)
    return str(path)


def _ingest(*extra: str) -> Callable[[str, Path], list[str]]:
    def argv(src: str, d: Path) -> list[str]:
        return ["ingest", src, "--out", str(d / "out" / "s.zarr"), *extra]

    return argv


def _case(name: str, issue: str, write: Callable[[Path], str], pattern: str, *extra: str) -> Case:
    def make(d: Path) -> tuple[list[str], str]:
        src = write(d)
        return _ingest(*extra)(src, d), pattern

    return Case(name, issue, make)


MTX = "%%MatrixMarket matrix coordinate real general\n"

INGEST_CASES: list[Case] = [
    # 9.1: CSR structure, checked before scipy trusts it (a decreasing indptr used to abort the process)
    _case("npz-decreasing-indptr", "9.1", lambda d: _npz(d / "a.npz", lambda m: m.indptr.__setitem__(1, 5)),
          r"a\.npz': 'indptr' decreases \(at row 1\)"),
    _case("npz-indptr-beyond-entries", "9.1", lambda d: _npz(d / "a.npz", lambda m: m.indptr.__setitem__(-1, 99)),
          r"a\.npz' is not a scipy\.sparse \.npz file .*index pointer"),
    _case("npz-column-index-out-of-range", "9.1", lambda d: _npz(d / "a.npz", lambda m: m.indices.__setitem__(3, 9)),
          r"column index 9 out of range \[0, 4\) at row 2 of '.*a\.npz'"),
    _case("npz-negative-column-index", "9.1", lambda d: _npz(d / "a.npz", lambda m: m.indices.__setitem__(0, -3)),
          r"column index -3 out of range \[0, 4\) at row 0 of '.*a\.npz'"),
    _case("h5ad-decreasing-indptr", "9.1",
          lambda d: _h5ad(d / "a.h5ad", *(lambda g: (g[0], g[1], _decreasing(g[2])))(_good()), (4, 4)),
          r"'X' of '.*a\.h5ad': the row pointers are not increasing .* at row 2"),
    _case("h5ad-indptr-length", "9.1", lambda d: _h5ad(d / "a.h5ad", *(lambda g: (g[0], g[1], g[2][:-1]))(_good()),
                                                      (4, 4)),
          r"'X' of '.*a\.h5ad': .* row pointers for 4 rows"),
    _case("h5ad-index-out-of-range", "9.1",
          lambda d: _h5ad(d / "a.h5ad", *(lambda g: (g[0], np.where(g[1] == 3, 40, g[1]), g[2]))(_good()), (4, 4)),
          r"column index 40 out of range \[0, 4\) at row 2 of '.*a\.h5ad'; fix the index"),
    _case("h5ad-csc-decreasing-indptr", "9.1",
          lambda d: _h5ad(d / "c.h5ad", *(lambda g: (g[0], g[1], _decreasing(g[2])))(_good()), (4, 4), "csc_matrix"),
          r"'X' of '.*c\.h5ad': the column pointers must increase"),
    _case("anndata-zarr-decreasing-indptr", "9.1",
          lambda d: _anndata_zarr(d / "a.zarr", *(lambda g: (g[0], g[1], _decreasing(g[2])))(_good()), (4, 4)),
          r"'X' of '.*a\.zarr': the row pointers are not increasing"),
    # 8.1 / 9.9: values
    _case("svm-nan", "8.1", lambda d: _text(d / "a.svm", "1 1:0.5\n1 2:nan\n"),
          r"at line 2 .*a\.svm.*NaN and infinite values are not allowed"),
    _case("svm-inf", "8.1", lambda d: _text(d / "a.svm", "1 1:inf\n"), r"at line 1 .*a\.svm"),
    _case("npz-nan", "8.1", lambda d: _npz(d / "a.npz", lambda m: m.data.__setitem__(4, np.nan)),
          r"nan value at row 2 \(partition 0\) of '.*a\.npz' \(column 1\)"),
    _case("h5ad-inf", "8.1", lambda d: _h5ad(d / "a.h5ad", *(lambda g: (np.where(g[0] == 5, np.inf, g[0]), g[1],
                                                                        g[2]))(_good()), (4, 4)),
          r"inf value at row 2 \(partition 0\) of '.*a\.h5ad'"),
    _case("h5ad-duplicates-rejected", "8.1",
          lambda d: _h5ad(d / "a.h5ad", np.array([1.0, 2.0, 3.0]), np.array([1, 1, 0], dtype=np.int32),
                          np.array([0, 2, 3], dtype=np.int64), (2, 4)),
          r"duplicate entry \(row 0, column 1\).*a\.h5ad", "--on-duplicate", "reject"),
    _case("svm-infinite-row-norm", "9.4", lambda d: _text(d / "a.svm", "1 1:1.5e308 2:1.5e308\n"),
          r"the L2 norm of row 0 .*a\.svm' is inf"),
    # 9.4: sizes
    _case("mtx-1e11-rows", "9.4", lambda d: _text(d / "a.mtx", MTX + "100000000000 3 1\n1 1 1.0\n"),
          r"a\.mtx' declares 100000000000 rows and 1 entries: the store would take up to 1\.5 TiB", "--max-disk",
          "1GiB"),
    _case("svm-index-2e9", "9.4", lambda d: _text(d / "a.svm", "1 2000000000:1.5\n"),
          r"a\.svm' declares 2000000000 columns: an analysis needs about 119\.2 GiB", "--max-memory", "16GiB"),
    _case("n-features-2-to-the-40", "9.4", lambda d: _text(d / "a.svm", "1 2:1.5\n"),
          r"a\.svm' declares 1099511627776 columns", "--n-features", str(2**40)),
    _case("svm-index-beyond-int64", "9.4", lambda d: _text(d / "a.svm", "1 99999999999999999999999:2\n"),
          r"'99999999999999999999999:2' at line 1 .*a\.svm.* is too large"),
    _case("mtx-index-beyond-int64", "9.4", lambda d: _text(d / "a.mtx", MTX + "2 3 1\n99999999999999999999999 1 1\n"),
          r"at line 3 of '.*a\.mtx' is not an integer in \[1, 2\]"),
    _case("svm-index-beyond-declared-width", "9.4", lambda d: _text(d / "a.svm", "1 1:1\n1 5:1\n"),
          r"'5:1' at line 2 .*a\.svm.* is beyond n_features=3", "--n-features", "3"),
    _case("mtx-index-beyond-declared-width", "9.4", lambda d: _text(d / "a.mtx", MTX + "2 3 1\n1 4 1.0\n"),
          r"at line 3 of '.*a\.mtx'"),
    _case("mtx-huge-dense-array", "9.4",
          lambda d: _text(d / "a.mtx", "%%MatrixMarket matrix array real general\n300000 200000\n1\n"),
          r"a\.mtx': reading its dense 300000 x 200000 array needs about 447\.0 GiB", "--max-memory", "16GiB",
          "--max-disk", "1TiB"),
    # 8.4: a declared schema the input contradicts
    _case("npy-width-differs-from-declared", "8.4", lambda d: (np.save(d / "a.npy", np.ones((3, 4))),
                                                               str(d / "a.npy"))[1],
          r"a\.npy' has 4 columns but n_features=5", "--n-features", "5"),
    Case("parquet-id-outside-declared-universe", "8.4", lambda d: (
        _ingest("--column-ids", _text(d / "ids.txt", "1\n2\n"))(_parquet(d / "t.parquet", [1, 2, 3]), d),
        r"column id 3 of column 'col_id' in '.*t\.parquet' is not among the declared column ids")),
    # 36.4: NUL bytes (a zeroed or pre-allocated file, a device), refused where they are read
    _case("svm-nul-file", "36.4", lambda d: (Path(d / "z.svm").write_bytes(b"\0" * 300_000), str(d / "z.svm"))[1],
          r"z\.svm' holds a NUL byte at line 1: it is not a text file", "--n-features", "3"),
    _case("svm-nul-line", "36.4", lambda d: (Path(d / "l.svm").write_bytes(b"1 1:0.5\n\0\n1 2:1\n"),
                                              str(d / "l.svm"))[1],
          r"l\.svm' holds a NUL byte at line 2", "--n-features", "3"),
    _case("mtx-nul-line", "36.4", lambda d: (Path(d / "a.mtx").write_bytes((MTX + "2 3 1\n").encode() + b"\0\0\n"),
                                              str(d / "a.mtx"))[1],
          r"a\.mtx' holds a NUL byte at line 3"),
    Case("dev-zero", "36.4", lambda d: (["ingest", "/dev/zero", "--format", "svmlight", "--out",
                                         str(d / "out" / "s.zarr"), "--n-features", "3"],
                                        r"input '/dev/zero' is a device, not a file")),
    # 36.4: messages that name the fix, limits refused before anything is written
    _case("svm-negative-index", "36.4", lambda d: _text(d / "a.svm", "1 -3:1\n"),
          r"negative feature index in '-3:1' at line 1"),
    _case("svm-nan-label-stored", "36.4", lambda d: _text(d / "a.svm", "1 1:1\nnan 2:1\n"),
          r"label 'nan' at line 2 .*a\.svm' is not finite", "--n-features", "3", "--store-labels"),
    _case("svm-one-row-per-partition", "36.4", lambda d: _text(d / "a.svm", "1 1:1\n" * 20_001),
          r"a\.svm' would have 20001 partitions with rows_per_partition=1 \(at most 10000\)", "--n-features", "3",
          "--rows-per-partition", "1"),
    # 9.2: --overwrite replaces only a store or an empty directory
    Case("overwrite-a-file", "9.2", lambda d: (
        ["ingest", _text(d / "a.svm", "1 1:1\n"), "--out", _text(d / "out" / "notes.txt", "keep me"), "--overwrite"],
        r"notes\.txt' is a file; overwrite \(--overwrite\) replaces only a dppca_dask store or an empty directory")),
    Case("overwrite-a-source-directory", "9.2", lambda d: (
        ["ingest", _text(d / "a.svm", "1 1:1\n"), "--out", (os.makedirs(d / "out" / "src"),
                                                            _text(d / "out" / "src" / "data.csv", "1,2"),
                                                            str(d / "out" / "src"))[2], "--overwrite"],
        r"src' is a directory that is not a dppca_dask store")),
]


def native_store(d: Path, *, rows_per_partition: int = 2) -> str:
    """A small dppca_dask store (8 x 4, 2 rows per partition, 4 partitions) at ``d/store.zarr``."""
    from dppca_dask.storage import write_matrix

    m = sp.vstack([_csr(), _csr()], format="csr")
    return write_matrix(d / "store.zarr", m, rows_per_partition=rows_per_partition).path


def _edit(path: str, key: str, position: int, value: float) -> None:
    zarr.open_group(path, mode="r+")[key][position] = value


def _damaged(mutate: Callable[[str], None]) -> Callable[[Path], str]:
    def make(d: Path) -> str:
        path = native_store(d)
        mutate(path)
        return path

    return make


def _store_case(name: str, issue: str, make_store: Callable[[Path], str], pattern: str) -> Case:
    def make(d: Path) -> tuple[list[str], str]:
        return [make_store(d)], pattern

    return Case(name, issue, make)


# Damage found by every read (so by the preflight of a private run, before any noise), and by info --check.
# The 8 x 4 store holds 14 entries: partition 2 (rows 4-5) holds entries 7-9, partition 3 (rows 6-7) entries 10-13.
STORE_CASES: list[Case] = [
    _store_case("nan-in-data-chunk", "9.9", _damaged(lambda p: _edit(p, "X/data", 8, np.nan)),
                r"partition 2 of store '.*store\.zarr' is damaged: a non-finite value at row 4"),
    _store_case("inf-in-data-chunk", "9.9", _damaged(lambda p: _edit(p, "X/data", 12, np.inf)),
                r"partition 3 of store '.*store\.zarr' is damaged: a non-finite value at row 6"),
    _store_case("index-beyond-width", "9.9", _damaged(lambda p: _edit(p, "X/indices", 9, 11)),
                r"partition 2 of store '.*store\.zarr' is damaged: column indices outside \[0, 4\)"),
    _store_case("negative-index", "9.9", _damaged(lambda p: _edit(p, "X/indices", 11, -7)),
                r"partition 3 of store '.*store\.zarr' is damaged: a chunk of 'data' or 'indices' is missing|"
                r"column index -7 out of range"),
    _store_case("decreasing-indptr", "9.1", _damaged(lambda p: _edit(p, "X/indptr", 5, 1)),
                r"partition 2 of store '.*store\.zarr' is damaged: the row pointers disagree|row pointers decrease"),
    _store_case("deleted-data-chunk", "9.9", _damaged(lambda p: os.remove(os.path.join(p, "X", "data", "c", "0"))),
                r"partition 0 of store '.*store\.zarr' is damaged: a chunk of 'data' or 'indices' is missing"),
    _store_case("garbage-data-chunk", "9.9",
                _damaged(lambda p: Path(p, "X", "data", "c", "0").write_bytes(b"\x00garbage" * 5)),
                r"partition 0 .*of store '.*store\.zarr'.*re-ingest"),
    _store_case("broken-partition-table", "9.9", _damaged(lambda p: _table(p)),
                r"partition table of store '.*store\.zarr' is inconsistent at partition 1"),
    _store_case("anndata-nan", "8.1",
                lambda d: _anndata_zarr(d / "a.zarr", *(lambda g: (np.where(g[0] == 5, np.nan, g[0]), g[1], g[2]))(
                    _good()), (4, 4)),
                r"NaN or infinite value at row 2 \(partition 0\), column 1 of AnnData store '.*a\.zarr'"),
    _store_case("anndata-decreasing-indptr", "9.1",
                lambda d: _anndata_zarr(d / "a.zarr", *(lambda g: (g[0], g[1], _decreasing(g[2])))(_good()), (4, 4)),
                r"partition 0 of store '.*a\.zarr' is damaged: row pointers decrease"),
    _store_case("anndata-index-beyond-width", "9.1",
                lambda d: _anndata_zarr(d / "a.zarr", *(lambda g: (g[0], np.where(g[1] == 3, 9, g[1]), g[2]))(
                    _good()), (4, 4)),
                r"partition 0 of store '.*a\.zarr' is damaged: column indices outside \[0, 4\)"),
]


def _table(path: str) -> None:
    from dppca_dask.storage import _format

    group = zarr.open_group(path, mode="r+")
    meta = dict(group.attrs[_format.ATTR_KEY])
    parts = [list(p) for p in meta["partitions"]]
    parts[1][2] += 1
    meta["partitions"] = parts
    group.attrs[_format.ATTR_KEY] = meta


def _duplicate_entries(path: str) -> None:
    # Row 0 holds (0, 1.0), (2, 2.0): make it (0, 1.0), (0, 2.0). A private run sums them (the row it multiplies).
    _edit(path, "X/indices", 1, 0)


# Damage a private run handles soundly (it never trusts stored norms; it canonicalises), reported by info --check.
CHECK_ONLY_CASES: list[Case] = [
    _store_case("stale-row-norms", "8.1", _damaged(lambda p: _edit(p, "X/data", 4, 50.0)),
                r"partition 1 of store '.*store\.zarr' is damaged: the stored row norm of row 2 does not match"),
    _store_case("zeroed-row-norms", "9.9", _damaged(lambda p: _edit(p, "obs/row_norms", 3, 0.0)),
                r"partition 1 of store '.*store\.zarr' is damaged: the stored row norm of row 3 does not match"),
    _store_case("deleted-row-norms-chunk", "9.9",
                _damaged(lambda p: os.remove(os.path.join(p, "obs", "row_norms", "c", "1"))),
                r"stored row norm of row 2 \(partition 1\) in store '.*store\.zarr' is missing"),
    _store_case("duplicate-entries-in-a-store", "8.1", _damaged(_duplicate_entries),
                r"partition 0 of store '.*store\.zarr' is damaged: its column indices are unsorted or repeated"),
]


def _truncate(path: str) -> None:
    chunk = Path(path, "X", "data", "c", "0")
    chunk.write_bytes(chunk.read_bytes()[:40])


def _data_type(path: str) -> None:
    import json

    meta = Path(path, "X", "data", "zarr.json")
    doc = json.loads(meta.read_text())
    doc["data_type"] = "int8"
    doc["fill_value"] = 0
    meta.write_text(json.dumps(doc))
    root = Path(path, "zarr.json")  # and its consolidated copy, which readers use
    top = json.loads(root.read_text())
    top["consolidated_metadata"]["metadata"]["X/data"].update(data_type="int8", fill_value=0)
    root.write_text(json.dumps(top))


def _link_chunk(path: str, target: str | None = None) -> None:
    chunk = Path(path, "X", "data", "c", "0")
    copy = Path(path).parent / "chunk-copy"
    copy.write_bytes(chunk.read_bytes())
    chunk.unlink()
    os.symlink(target or str(copy), chunk)


def _billion_rows(path: str) -> None:
    from dppca_dask.storage import _format

    group = zarr.open_group(path, mode="r+")
    meta = dict(group.attrs[_format.ATTR_KEY])
    parts = [list(p) for p in meta["partitions"]]
    parts[-1][1] = 10**9
    meta["partitions"], meta["n_rows"] = parts, 10**9
    group.attrs[_format.ATTR_KEY] = meta


# Damaged stores given to `dppca-dask append` (issue 36, item 4): refused before anything is written.
APPEND_CASES: list[Case] = [
    _store_case("append-truncated-chunk", "36.4", _damaged(_truncate),
                r"partition 0 of store '.*store\.zarr'.* holds 40 bytes.*damaged, re-ingest it"),
    _store_case("append-edited-data-type", "36.4", _damaged(_data_type),
                r"store '.*store\.zarr'.* (holds int8 values|cannot be opened)"),
    _store_case("append-chunk-is-a-symlink", "36.4", _damaged(_link_chunk),
                r"'X/data/c/0' in store '.*store\.zarr' is a symbolic link"),
    _store_case("append-chunk-linked-to-dev-zero", "36.4", _damaged(lambda p: _link_chunk(p, "/dev/zero")),
                r"'X/data/c/0' in store '.*store\.zarr' is a symbolic link"),
    _store_case("append-table-of-a-billion-rows", "36.4", _damaged(_billion_rows),
                r"array 'X/indptr' of store '.*store\.zarr' has 9 entries but the partition table needs 1000000001"),
    _store_case("append-deleted-chunk", "36.4",
                _damaged(lambda p: os.remove(os.path.join(p, "X", "data", "c", "0"))),
                r"partition 0 of store '.*store\.zarr' is damaged: a chunk of 'data' or 'indices' is missing"),
    _store_case("append-nan-in-chunk", "36.4", _damaged(lambda p: _edit(p, "X/data", 8, np.nan)),
                r"partition 2 of store '.*store\.zarr' is damaged: a non-finite value"),
    _store_case("append-index-out-of-range", "36.4", _damaged(lambda p: _edit(p, "X/indices", 9, 11)),
                r"partition 2 of store '.*store\.zarr' is damaged: column indices outside"),
]
