"""The ingest entry point: format detection, option validation, and nothing left behind after a failure."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.io
import scipy.sparse as sp
from ingest_helpers import assert_store_equals, listing, write_svmlight

from dppca_dask.errors import InvalidInputError, InvalidParameterError, StoreNotFoundError
from dppca_dask.ingest import FORMATS, detect_format, ingest
from dppca_dask.storage import StoreWriter


def write_all_formats(directory: Path, matrix: sp.csr_array) -> dict[str, Path]:
    """The matrix in every file format, under names without telling extensions."""
    paths = {}
    write_svmlight(directory / "a.svm", matrix)
    scipy.io.mmwrite(directory / "a.mtx", sp.coo_array(matrix), precision=17)
    sp.save_npz(directory / "a.npz", sp.csr_matrix(matrix))
    np.save(directory / "a.npy", matrix.toarray())
    coo = sp.coo_array(matrix)
    pq.write_table(pa.table({"row_id": coo.row, "col_id": coo.col, "value": coo.data}), directory / "a.parquet")
    for name in ("a.svm", "a.mtx", "a.npz", "a.npy", "a.parquet"):
        plain = directory / name.replace("a.", "data_").replace(".", "_")
        os.rename(directory / name, plain)
        paths[name.split(".")[1]] = plain
    return paths


def test_extensions() -> None:
    cases = {"x.svm": "svmlight", "x.svmlight": "svmlight", "x.libsvm": "svmlight", "x.svm.gz": "svmlight",
             "x.mtx": "mtx", "x.mtx.gz": "mtx", "x.mtx.bz2": "mtx", "x.h5ad": "anndata", "x.zarr": "anndata",
             "x.parquet": "parquet", "x.pq": "parquet", "x.npz": "npz", "x.npy": "npy"}
    assert set(cases.values()) == set(FORMATS)


@pytest.mark.parametrize("name", ["x.svm", "x.svm.gz", "x.mtx.bz2", "x.h5ad", "x.parquet", "X.NPZ", "x.npy"])
def test_detect_by_extension(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_bytes(b"")
    expected = {"svm": "svmlight", "mtx": "mtx", "h5ad": "anndata", "parquet": "parquet", "npz": "npz", "npy": "npy"}
    assert detect_format(tmp_path / name) == expected[name.lower().split(".")[1]]


def test_detect_by_contents(tmp_path: Path, matrix: sp.csr_array) -> None:
    paths = write_all_formats(tmp_path, matrix)
    assert {kind: detect_format(path) for kind, path in paths.items()} == {
        "svm": "svmlight", "mtx": "mtx", "npz": "npz", "npy": "npy", "parquet": "parquet"}
    nonempty = matrix[np.diff(matrix.indptr) > 0]  # a triplet table has no rows without entries
    for kind, path in paths.items():
        assert_store_equals(ingest(path, tmp_path / f"{kind}.zarr"), nonempty if kind == "parquet" else matrix)


def test_detect_directories(tmp_path: Path) -> None:
    (tmp_path / "tbl" / "day=1").mkdir(parents=True)
    pq.write_table(pa.table({"row_id": [1], "col_id": [1], "value": [1.0]}), tmp_path / "tbl" / "day=1" / "p.parquet")
    assert detect_format(tmp_path / "tbl") == "parquet"
    import zarr

    zarr.open_group(tmp_path / "adata_store", mode="w")
    assert detect_format(tmp_path / "adata_store") == "anndata"


def test_detect_hdf5_magic(tmp_path: Path) -> None:
    anndata = pytest.importorskip("anndata")
    anndata.AnnData(X=np.eye(2)).write_h5ad(tmp_path / "a.h5ad")
    os.rename(tmp_path / "a.h5ad", tmp_path / "cells")
    assert detect_format(tmp_path / "cells") == "anndata"


@pytest.mark.parametrize("content", [b"a,b,c\n1,2,3\n", b"\x00\x01\x02", b"", b"-1\n+1\n"])
def test_unknown_format(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "data.csv").write_bytes(content)
    with pytest.raises(InvalidParameterError, match=r"cannot tell the format of '.*data.csv'.*pass format="):
        ingest(tmp_path / "data.csv", tmp_path / "s.zarr")
    (tmp_path / "empty_dir").mkdir()
    with pytest.raises(InvalidParameterError, match=r"cannot tell the format"):
        detect_format(tmp_path / "empty_dir")
    (tmp_path / "x.npz.gz").write_bytes(b"")
    with pytest.raises(InvalidParameterError, match=r"cannot tell the format"):
        detect_format(tmp_path / "x.npz.gz")


def test_explicit_format_overrides_the_extension(tmp_path: Path, matrix: sp.csr_array) -> None:
    src = write_svmlight(tmp_path / "data.txt", matrix)
    assert_store_equals(ingest(src, tmp_path / "s.zarr", format="svmlight"), matrix)
    with pytest.raises(InvalidParameterError, match=r"format must be one of svmlight, mtx, anndata, parquet, npz, "
                                                    r"npy; got 'csv'"):
        ingest(src, tmp_path / "t.zarr", format="csv")


def test_missing_input(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError, match=r"input '.*nowhere.svm' does not exist"):
        ingest(tmp_path / "nowhere.svm", tmp_path / "s.zarr")
    assert listing(tmp_path) == []


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"rows_per_partition": 0}, r"rows_per_partition must be an integer >= 1; got 0"),
        ({"rows_per_partition": 2.5}, r"rows_per_partition must be an integer >= 1; got 2.5"),
        ({"dtype": "int32"}, r"dtype must be float32 or float64; got 'int32'"),
        ({"dtype": "bogus"}, r"dtype must be float32 or float64; got 'bogus'"),
        ({"on_duplicate": "max"}, r"on_duplicate must be 'sum' or 'reject'; got 'max'"),
        ({"progress": "yes"}, r"progress must be None, True or False; got 'yes'"),
        ({"row_column": "user"}, r"row_column applies only to parquet input; the input is svmlight"),
        ({"value_column": None}, r"value_column applies only to parquet input"),
        ({"zero_based": "no"}, r"zero_based must be True or False; got 'no'"),
        ({"store_labels": 1}, r"store_labels must be True or False; got 1"),
    ],
)
def test_invalid_options(tmp_path: Path, matrix: sp.csr_array, options: dict[str, object], match: str) -> None:
    src = write_svmlight(tmp_path / "m.svm", matrix)
    with pytest.raises(InvalidParameterError, match=match):
        ingest(src, tmp_path / "s.zarr", **options)  # type: ignore[arg-type]
    assert listing(tmp_path) == ["m.svm"]


def test_svmlight_options_on_other_formats(tmp_path: Path, matrix: sp.csr_array) -> None:
    np.save(tmp_path / "m.npy", matrix.toarray())
    for options in ({"zero_based": True}, {"store_labels": True}):
        with pytest.raises(InvalidParameterError, match=r"applies only to svmlight input; the input is npy"):
            ingest(tmp_path / "m.npy", tmp_path / "s.zarr", **options)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match=r"format applies to files"):
        ingest(matrix, tmp_path / "s.zarr", format="npz")
    with pytest.raises(InvalidParameterError, match=r"zero_based applies only to svmlight input; the input is array"):
        ingest(matrix, tmp_path / "s.zarr", zero_based=True)


def test_existing_output_and_overwrite(tmp_path: Path, matrix: sp.csr_array) -> None:
    src = write_svmlight(tmp_path / "m.svm", matrix)
    first = ingest(src, tmp_path / "s.zarr")
    with pytest.raises(InvalidParameterError, match=r"already exists; .*overwrite=True \(--overwrite\)"):
        ingest(src, tmp_path / "s.zarr")
    second = ingest(matrix[:7], tmp_path / "s.zarr", overwrite=True)
    assert second.store_id != first.store_id
    assert_store_equals(second, matrix[:7])
    with pytest.raises(InvalidParameterError, match=r"the output '.*m.svm' is the input"):
        ingest(src, src, overwrite=True)


def test_failed_ingest_leaves_nothing_and_keeps_the_old_store(tmp_path: Path, matrix: sp.csr_array) -> None:
    src = write_svmlight(tmp_path / "m.svm", matrix)
    old = ingest(src, tmp_path / "s.zarr")
    bad = tmp_path / "bad.svm"
    bad.write_text("1 1:1\n1 1:nan\n")
    before = listing(tmp_path)
    with pytest.raises(InvalidInputError, match=r"NaN and infinite values are not allowed"):
        ingest(bad, tmp_path / "s.zarr", overwrite=True)
    assert listing(tmp_path) == before  # no partial store, no temporary directory
    assert_store_equals(old, matrix)  # the previous store is untouched


def test_interrupted_ingest_leaves_nothing(tmp_path: Path, matrix: sp.csr_array,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    src = write_svmlight(tmp_path / "m.svm", matrix)

    def interrupted(self: StoreWriter) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(StoreWriter, "commit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ingest(src, tmp_path / "s.zarr")
    assert listing(tmp_path) == ["m.svm"]


def test_progress_bar_when_asked(tmp_path: Path, matrix: sp.csr_array, capsys: pytest.CaptureFixture[str]) -> None:
    src = write_svmlight(tmp_path / "m.svm", matrix)
    ingest(src, tmp_path / "a.zarr", progress=True)
    assert "parse" in capsys.readouterr().err
    ingest(src, tmp_path / "b.zarr")  # not a terminal: quiet
    assert capsys.readouterr().err == ""
