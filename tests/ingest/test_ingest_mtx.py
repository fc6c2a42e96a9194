"""Matrix Market ingestion: coordinate (streamed, any order, symmetric expansion) and array formats."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from ingest_helpers import RPP, assert_store_equals, make_matrix

from dppca_dask.errors import InvalidInputError
from dppca_dask.ingest import _text, ingest


def write_coordinate(path: Path, header: str, entries: list[str]) -> Path:
    path.write_text(header + "\n" + "\n".join(entries) + "\n")
    return path


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_coordinate_round_trip(tmp_path: Path, matrix: sp.csr_array, dtype: type) -> None:
    # float32 values written as float64 text (exact): scipy's writer pads float32 text with NUL bytes.
    scipy.io.mmwrite(tmp_path / "m.mtx", sp.coo_array(matrix.astype(dtype).astype(np.float64)), precision=17)
    store = ingest(tmp_path / "m.mtx", tmp_path / "m.zarr", rows_per_partition=RPP, dtype=dtype)
    assert store.n_partitions == 6 and store.partitions[1].nnz == 0
    assert_store_equals(store, matrix.astype(dtype), dtype=dtype)


def test_entries_in_any_order_across_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            rng: np.random.Generator) -> None:
    big = sp.coo_array(make_matrix(rng, n_rows=200, n_cols=13))
    order = rng.permutation(big.nnz)
    entries = [f"{r + 1} {c + 1} {float(v)!r}" for r, c, v in zip(big.row[order], big.col[order], big.data[order])]
    src = write_coordinate(tmp_path / "shuffled.mtx", f"%%MatrixMarket matrix coordinate real general\n% a comment\n"
                                                      f"200 13 {big.nnz}", entries)
    monkeypatch.setattr(_text, "CHUNK_BYTES", 100)
    store = ingest(src, tmp_path / "s.zarr", rows_per_partition=16)
    assert_store_equals(store, big)


def test_single_column_gzip(tmp_path: Path, rng: np.random.Generator) -> None:
    column = make_matrix(rng, n_rows=30, n_cols=1, density=0.5)
    scipy.io.mmwrite(tmp_path / "c.mtx", sp.coo_array(column), precision=17)
    with gzip.open(tmp_path / "c.mtx.gz", "wb") as handle:
        handle.write((tmp_path / "c.mtx").read_bytes())
    store = ingest(tmp_path / "c.mtx.gz", tmp_path / "c.zarr")
    assert store.shape == (30, 1)
    assert_store_equals(store, column)


def test_symmetric_pattern_and_skew(tmp_path: Path) -> None:
    sym = write_coordinate(tmp_path / "sym.mtx", "%%MatrixMarket matrix coordinate integer symmetric\n3 3 3",
                           ["1 1 2", "3 1 5", "3 2 -1"])
    store = ingest(sym, tmp_path / "sym.zarr")
    np.testing.assert_array_equal(store.to_scipy().toarray(), [[2, 0, 5], [0, 0, -1], [5, -1, 0]])
    skew = write_coordinate(tmp_path / "skew.mtx", "%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 1",
                            ["2 1 1.5"])
    np.testing.assert_array_equal(ingest(skew, tmp_path / "skew.zarr").to_scipy().toarray(), [[0, -1.5], [1.5, 0]])
    pattern = write_coordinate(tmp_path / "p.mtx", "%%MatrixMarket matrix coordinate pattern general\n2 3 2",
                               ["1 3", "2 1"])
    np.testing.assert_array_equal(ingest(pattern, tmp_path / "p.zarr").to_scipy().toarray(), [[0, 0, 1], [1, 0, 0]])


def test_array_format_is_dense(tmp_path: Path, matrix: sp.csr_array) -> None:
    scipy.io.mmwrite(tmp_path / "a.mtx", matrix.toarray(), precision=17)
    store = ingest(tmp_path / "a.mtx", tmp_path / "a.zarr", rows_per_partition=RPP)
    assert store.layout == "dense"
    assert_store_equals(store, matrix)


def test_duplicates_sum_or_reject(tmp_path: Path) -> None:
    src = write_coordinate(tmp_path / "d.mtx", "%%MatrixMarket matrix coordinate real general\n4 2 3",
                           ["1 1 1", "4 2 2", "4 2 3"])
    np.testing.assert_array_equal(ingest(src, tmp_path / "sum.zarr").to_scipy().toarray()[3], [0, 5])
    with pytest.raises(InvalidInputError, match=r"duplicate entry \(row 3, column 1\) in partition 1 of '.*d.mtx'"):
        ingest(src, tmp_path / "reject.zarr", on_duplicate="reject", rows_per_partition=2)
    assert sorted(os.listdir(tmp_path)) == ["d.mtx", "sum.zarr"]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 nan", r"nan value at line 3 \(row 0\)"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 2 -inf", r"-inf value at line 3 \(row 0\)"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1", r"row index 3 at line 3 .* not an integer in "
                                                                         r"\[1, 2\]"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 0 1", r"column index 0 at line 3"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n-1 1 1", r"row index -1 at line 3"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1.5 1 1", r"row index 1.5 at line 3"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1\n2 2 2", r"declares 1 entries but has more: "
                                                                                 r"line 4"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1", r"declares 3 entries but has only 1"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1", r"line 3 .* has 2 fields; expected 3"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 x", r"'x' at line 3 .* is not a number"),
        ("%%MatrixMarket matrix coordinate complex general\n2 2 1\n1 1 1 0", r"unsupported Matrix Market field "
                                                                              r"'complex'.*convert them to real"),
        ("%%MatrixMarket matrix coordinate real hermitian\n2 2 0", r"unsupported Matrix Market symmetry 'hermitian'"),
        ("%%MatrixMarket matrix graph real general\n2 2 0", r"unsupported Matrix Market format 'graph'"),
        ("%%MatrixMarket vector coordinate real general\n2 0", r"does not start with a Matrix Market banner"),
        ("1 2 3\n", r"does not start with a Matrix Market banner"),
        ("%%MatrixMarket matrix coordinate real symmetric\n2 3 0", r"declared symmetric but has shape 2 x 3"),
        ("%%MatrixMarket matrix coordinate real general\n2 2", r"invalid Matrix Market size line '2 2' at line 2"),
        ("%%MatrixMarket matrix coordinate real general\n2 0 0", r"declares 0 columns"),
        ("%%MatrixMarket matrix coordinate real general\n% only a comment\n", r"ends before its Matrix Market size"),
        ("%%MatrixMarket matrix array real general\n2 2\n1\n2\nabc\n4", r"cannot read the Matrix Market array"),
    ],
)
def test_errors_name_the_line(tmp_path: Path, text: str, match: str) -> None:
    src = tmp_path / "bad.mtx"
    src.write_text(text + "\n")
    with pytest.raises(InvalidInputError, match=match):
        ingest(src, tmp_path / "out.zarr")
    assert os.listdir(tmp_path) == ["bad.mtx"]  # no output and no spill directory left behind
