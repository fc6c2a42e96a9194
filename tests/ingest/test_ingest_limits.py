"""Size sanity (issue 9, item 4): declared sizes the machine cannot hold are refused before anything is written."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.ingest import ingest
from dppca_dask.ingest._limits import VECTORS_PER_ANALYSIS, SizeLimits, parse_size, physical_memory


def nothing_left(directory: Path, name: str) -> bool:
    return not [n for n in os.listdir(directory) if n == name or n.startswith(f".{name}.")]


@pytest.mark.parametrize(("text", "expected"), [("123", 123), (7, 7), ("64GiB", 64 * 2**30), ("1.5 TB", 1.5e12),
                                                ("2k", 2000), ("10MiB", 10 * 2**20)])
def test_parse_size(text: str | int, expected: float) -> None:
    assert parse_size(text) == int(expected)


@pytest.mark.parametrize("text", ["lots", "12XB", "0", "-5", "", True])
def test_parse_size_refuses(text: object) -> None:
    with pytest.raises(InvalidParameterError, match=r"cannot read the size|must be >= 1 byte"):
        parse_size(text)  # type: ignore[arg-type]


def test_an_mtx_declaring_1e11_rows_is_refused_by_the_free_disk(tmp_path: Path) -> None:
    (tmp_path / "h.mtx").write_text("%%MatrixMarket matrix coordinate real general\n100000000000 3 1\n1 1 1.0\n")
    if shutil.disk_usage(tmp_path).free > 2**40:
        pytest.skip("this file system has more than 1 TiB free; the max_disk test below covers the refusal")
    with pytest.raises(InvalidInputError, match=r"declares 100000000000 rows and 1 entries: the store would take up "
                                                 r"to 1\.5 TiB on disk, more than the .* allowed \(free on"):
        ingest(tmp_path / "h.mtx", tmp_path / "s.zarr")
    assert nothing_left(tmp_path, "s.zarr")


def test_max_disk_and_max_memory_options(tmp_path: Path) -> None:
    (tmp_path / "m.mtx").write_text("%%MatrixMarket matrix coordinate real general\n1000 3 1\n1 1 1.0\n")
    with pytest.raises(InvalidInputError, match=r"take up to 15\.6 KiB on disk, more than the 1\.0 KiB allowed "
                                                 r"\(max_disk, --max-disk\)"):
        ingest(tmp_path / "m.mtx", tmp_path / "s.zarr", max_disk="1KiB")
    assert ingest(tmp_path / "m.mtx", tmp_path / "s.zarr", max_disk="1MiB").n_rows == 1000
    with pytest.raises(InvalidInputError, match=r"declares 3 columns: an analysis needs about .* \(max_memory"):
        ingest(tmp_path / "m.mtx", tmp_path / "t.zarr", max_memory=VECTORS_PER_ANALYSIS * 8 * 3 - 1)
    assert nothing_left(tmp_path, "t.zarr")


def test_max_disk_is_checked_as_a_streamed_input_is_written(tmp_path: Path) -> None:
    """An svmlight file with a declared width is read once, so its size is unknown before it is read (a file
    without it is scanned first, and Parquet and Matrix Market say theirs): ``max_disk`` is checked as partitions
    are written, and the store is not left behind when it is exceeded."""
    rows, n_cols = 3000, 50
    matrix = sp.csr_array(sp.random(rows, n_cols, density=0.2, format="csr", random_state=np.random.default_rng(3)))
    src = tmp_path / "m.svm"
    src.write_text("".join(
        "0 " + " ".join(f"{j + 1}:{float(v)!r}" for j, v in zip(matrix.indices[matrix.indptr[i]:matrix.indptr[i + 1]],
                                                               matrix.data[matrix.indptr[i]:matrix.indptr[i + 1]]))
        + "\n" for i in range(rows)))
    with pytest.raises(InvalidInputError, match=r"its first 500 rows \(\d+ entries\) already take up to .* on disk, "
                                                 r"more than the 1\.0 KiB allowed \(max_disk, --max-disk\); the store "
                                                 r"was not written"):
        ingest(src, tmp_path / "s.zarr", n_features=n_cols, rows_per_partition=500, max_disk="1KiB")
    assert nothing_left(tmp_path, "s.zarr")
    assert ingest(src, tmp_path / "s.zarr", n_features=n_cols, rows_per_partition=500, max_disk="1MiB").n_rows == rows


def test_a_width_of_2e9_or_2_to_the_40_is_refused_by_the_memory(tmp_path: Path) -> None:
    assert physical_memory() > 0
    (tmp_path / "w.svm").write_text("1 2000000000:1.5\n")
    with pytest.raises(InvalidInputError, match=r"declares 2000000000 columns: an analysis needs about 119\.2 GiB"):
        ingest(tmp_path / "w.svm", tmp_path / "s.zarr", max_memory="64GiB")
    (tmp_path / "n.svm").write_text("1 2:1.5\n")
    with pytest.raises(InvalidInputError, match=r"declares 1099511627776 columns: an analysis needs about 64\.0 TiB"):
        ingest(tmp_path / "n.svm", tmp_path / "s.zarr", n_features=2**40)
    assert nothing_left(tmp_path, "s.zarr")


def test_an_index_beyond_int64_is_a_clean_error(tmp_path: Path) -> None:
    (tmp_path / "b.svm").write_text("1 1:0.5 99999999999999999999999:2\n")
    with pytest.raises(InvalidInputError, match=r"'99999999999999999999999:2' at line 1 .* is too large"):
        ingest(tmp_path / "b.svm", tmp_path / "s.zarr")
    (tmp_path / "b.mtx").write_text("%%MatrixMarket matrix coordinate real general\n2 3 1\n99999999999999999999999 1 1\n")
    with pytest.raises(InvalidInputError, match=r"at line 3 .* is not an integer in \[1, 2\]"):
        ingest(tmp_path / "b.mtx", tmp_path / "s.zarr")
    assert nothing_left(tmp_path, "s.zarr")


def test_dense_declarations(tmp_path: Path) -> None:
    (tmp_path / "a.mtx").write_text("%%MatrixMarket matrix array real general\n300000 200000\n1\n")
    with pytest.raises(InvalidInputError, match=r"reading its dense 300000 x 200000 array needs about 447\.0 GiB"):
        ingest(tmp_path / "a.mtx", tmp_path / "s.zarr", max_memory="16GiB", max_disk="1TiB")
    tall = sp.coo_array((np.ones(1), (np.zeros(1, int), np.zeros(1, int))), shape=(10**9, 4))  # no row pointers
    sp.save_npz(tmp_path / "tall.npz", tall)
    with pytest.raises(InvalidInputError, match=r"tall\.npz' declares 1000000000 rows and 1 entries"):
        ingest(tmp_path / "tall.npz", tmp_path / "s.zarr", max_disk="1GiB")
    assert nothing_left(tmp_path, "s.zarr")


def test_values_near_the_float64_limit(tmp_path: Path) -> None:
    # 1e200: the squares overflow, the norm (1.4e200) does not: accepted, with the true norm.
    (tmp_path / "big.svm").write_text("1 1:1e200 2:1e200\n")
    store = ingest(tmp_path / "big.svm", tmp_path / "ok.zarr")
    assert store.read_row_norms(0)[0] == pytest.approx(np.sqrt(2) * 1e200)
    (tmp_path / "inf.svm").write_text("1 1:1.5e308 2:1.5e308\n")
    with pytest.raises(InvalidInputError, match=r"the L2 norm of row 0 .* is inf: its values are too large"):
        ingest(tmp_path / "inf.svm", tmp_path / "s.zarr")
    assert nothing_left(tmp_path, "s.zarr")
    assert SizeLimits().max_memory is None
