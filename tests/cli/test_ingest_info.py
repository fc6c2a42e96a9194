"""``dppca-dask ingest`` and ``dppca-dask info``: summaries, JSON output, and exit code 2 for every data error."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
import zarr

from dppca_dask.cli import main


def svm_file(path: Path, text: str = "1 1:0.5 3:2\n-1\n1 2:1.5\n") -> Path:
    path.write_text(text)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_ingest_prints_one_summary_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = svm_file(tmp_path / "small.svm")
    code, out, err = run(capsys, "ingest", str(src), "--out", str(tmp_path / "s.zarr"))
    assert code == 0 and err == ""
    assert len(out.splitlines()) == 1
    assert "(svmlight)" in out and "3 x 3, 3 stored entries, 1 partitions, float64" in out


def test_ingest_json_and_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = svm_file(tmp_path / "small.txt", "1 0:1 4:2\n0 2:1\n")
    code, out, _ = run(capsys, "ingest", str(src), "--out", str(tmp_path / "s.zarr"), "--format", "svmlight",
                       "--zero-based", "--n-features", "6", "--dtype", "float32", "--rows-per-partition", "1",
                       "--store-labels", "--json")
    assert code == 0
    info = json.loads(out)
    assert (info["n_rows"], info["n_cols"], info["nnz"], info["n_partitions"]) == (2, 6, 3, 2)
    assert info["dtype"] == "float32" and info["format"] == "svmlight"
    np.testing.assert_array_equal(zarr.open_group(tmp_path / "s.zarr", mode="r")["labels"][:], [1, 0])


def test_ingest_parquet_columns(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pq.write_table(pa.table({"u": ["a", "b", "a"], "i": [5, 9, 9]}), tmp_path / "t.parquet")
    code, out, _ = run(capsys, "ingest", str(tmp_path / "t.parquet"), "--out", str(tmp_path / "s.zarr"),
                       "--row-column", "u", "--col-column", "i", "--no-value-column", "--json")
    assert code == 0 and json.loads(out)["nnz"] == 3
    code, out, _ = run(capsys, "info", str(tmp_path / "s.zarr"))
    assert "id maps:        obs_ids, var_ids" in out


def test_info_human_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = svm_file(tmp_path / "small.svm")
    assert main(["ingest", str(src), "--out", str(tmp_path / "s.zarr"), "--rows-per-partition", "2"]) == 0
    capsys.readouterr()
    code, out, _ = run(capsys, "info", str(tmp_path / "s.zarr"))
    assert code == 0
    for text in ("shape:          3 x 3 (csr)", "stored entries: 3", "partitions:     2", "dtype:          float64",
                 "format version: 1", "size on disk:", "(codec: none)"):
        assert text in out
    code, out, _ = run(capsys, "info", str(tmp_path / "s.zarr"), "--json")
    info = json.loads(out)
    assert {"n_rows": 3, "n_cols": 3, "nnz": 3, "n_partitions": 2}.items() <= info.items()
    assert info["size_on_disk"] > 0 and info["format_version"] == 1 and info["codec"] == "none"


def test_info_on_an_anndata_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    anndata = pytest.importorskip("anndata")
    anndata.AnnData(X=sp.csr_matrix(np.eye(4))).write_zarr(tmp_path / "a.zarr")
    code, out, _ = run(capsys, "info", str(tmp_path / "a.zarr"))
    assert code == 0 and "format version: none (AnnData store)" in out and "shape:          4 x 4" in out


def write_bad(tmp_path: Path, case: str) -> tuple[list[str], str]:
    """Input for one error case: the extra command-line arguments and a regex the message must match."""
    if case == "nan":
        return [str(svm_file(tmp_path / "nan.svm", "1 1:1\n1 2:nan\n"))], r"'2:nan' at line 2 \(row 1\) of '.*nan.svm'"
    if case == "inf":
        return [str(svm_file(tmp_path / "inf.svm", "1 1:-inf\n"))], r"'1:-inf' at line 1 \(row 0\)"
    if case == "index-zero":
        return [str(svm_file(tmp_path / "zero.svm", "1 0:1\n"))], r"feature index 0 .*--zero-based"
    if case == "negative-index":
        return ([str(svm_file(tmp_path / "neg.svm", "1 -2:1\n")), "--zero-based"],
                r"negative feature index in '-2:1' at line 1 \(row 0\)")
    if case == "out-of-range":
        return ([str(svm_file(tmp_path / "wide.svm", "1 7:1\n")), "--n-features", "3"],
                r"'7:1' at line 1 \(row 0\) of '.*wide.svm' is beyond n_features=3")
    if case == "shape":
        (tmp_path / "m.mtx").write_text("%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1.0\n")
        return [str(tmp_path / "m.mtx")], r"row index 3 at line 3 of '.*m.mtx' is not an integer in \[1, 2\]"
    if case == "not-2d":
        np.save(tmp_path / "v.npy", np.ones(3))
        return [str(tmp_path / "v.npy")], r"expected a 2-D matrix; got shape \(3,\) in '.*v.npy'"
    if case == "duplicate":
        return ([str(svm_file(tmp_path / "dup.svm", "1 1:1\n1 2:1 2:1\n")), "--on-duplicate", "reject"],
                r"duplicate entry \(row 1, column 1\) at partition 0 of '.*dup.svm'")
    if case == "missing-file":
        return [str(tmp_path / "nowhere.svm")], r"input '.*nowhere.svm' does not exist"
    if case == "unknown-format":
        (tmp_path / "table.csv").write_text("a,b\n1,2\n")
        return [str(tmp_path / "table.csv")], r"cannot tell the format of '.*table.csv'"
    if case == "wrong-option":
        return ([str(svm_file(tmp_path / "s.svm")), "--row-column", "user"],
                r"row_column applies only to parquet input")
    if case == "parquet-null":
        pq.write_table(pa.table({"row_id": [1, None], "col_id": [1, 1], "value": [1.0, 2.0]}), tmp_path / "t.parquet")
        return [str(tmp_path / "t.parquet")], r"null in column 'row_id' at record 1 of '.*t.parquet'"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["nan", "inf", "index-zero", "negative-index", "out-of-range", "shape", "not-2d",
                                  "duplicate", "missing-file", "unknown-format", "wrong-option", "parquet-null"])
def test_ingest_errors_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    args, match = write_bad(tmp_path, case)
    before = sorted(os.listdir(tmp_path))
    code, out, err = run(capsys, "ingest", *args, "--out", str(tmp_path / "out.zarr"))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("dppca-dask ingest: error: ")
    assert re.search(match, err), err
    assert sorted(os.listdir(tmp_path)) == before  # no store, no temporary directory


def test_existing_output_needs_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = svm_file(tmp_path / "small.svm")
    assert main(["ingest", str(src), "--out", str(tmp_path / "s.zarr")]) == 0
    code, _, err = run(capsys, "ingest", str(src), "--out", str(tmp_path / "s.zarr"))
    assert code == 2 and "--overwrite" in err
    assert main(["ingest", str(src), "--out", str(tmp_path / "s.zarr"), "--overwrite"]) == 0


@pytest.mark.parametrize("argv", [["--format", "csv"], ["--dtype", "int8"], ["--on-duplicate", "max"],
                                  ["--value-column", "v", "--no-value-column"]])
def test_invalid_arguments_exit_2(tmp_path: Path, argv: list[str]) -> None:
    src = svm_file(tmp_path / "small.svm")
    with pytest.raises(SystemExit) as info:
        main(["ingest", str(src), "--out", str(tmp_path / "s.zarr"), *argv])
    assert info.value.code == 2


def test_info_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "info", str(tmp_path / "nowhere.zarr"))
    assert code == 2 and "no matrix store at" in err
    (tmp_path / "file.txt").write_text("x")
    code, _, err = run(capsys, "info", str(tmp_path / "file.txt"))
    assert code == 2 and "is not a zarr group" in err
    src = svm_file(tmp_path / "small.svm")
    assert main(["ingest", str(src), "--out", str(tmp_path / "s.zarr")]) == 0
    group = zarr.open_group(tmp_path / "s.zarr", mode="r+")
    meta = dict(group.attrs["dppca_dask"])
    group.attrs["dppca_dask"] = {**meta, "format_version": 99}
    capsys.readouterr()
    code, _, err = run(capsys, "info", str(tmp_path / "s.zarr"))
    assert code == 2 and "format version 99" in err
