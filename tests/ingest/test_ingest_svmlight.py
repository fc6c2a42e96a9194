"""LIBSVM / svmlight ingestion: round trips, the w8a reference file, and every error."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from ingest_helpers import RPP, assert_store_equals, make_matrix, write_svmlight

from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.ingest import _text, ingest

W8A = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "w8a.svm"


@pytest.mark.skipif(not W8A.exists(), reason="shared/data/w8a.svm is not beside the project")
def test_w8a_matches_scikit_learn(tmp_path: Path) -> None:
    from sklearn.datasets import load_svmlight_file

    expected, labels = load_svmlight_file(str(W8A))
    store = ingest(W8A, tmp_path / "w8a.zarr", store_labels=True)
    assert store.shape == (49_749, 300)
    assert store.nnz == expected.nnz == 579_586
    assert_store_equals(store, expected, dtype=np.float64)
    np.testing.assert_array_equal(zarr.open_group(store.path, mode="r")["labels"][:], labels)


@pytest.mark.skipif(not W8A.exists(), reason="shared/data/w8a.svm is not beside the project")
def test_w8a_line_count_is_rows_plus_a_trailing_blank_line() -> None:
    # `wc -l` says 49,750: the file ends with an empty line, which is not a row.
    lines = W8A.read_bytes().split(b"\n")
    assert lines[-1] == b"" and lines[-2] == b""  # the text ends with "\n\n"
    assert sum(1 for line in lines if line.strip()) == 49_749


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_round_trip_with_empty_partition_and_zero_rows(tmp_path: Path, matrix: sp.csr_array, dtype: type) -> None:
    src = write_svmlight(tmp_path / "m.svm", matrix)
    store = ingest(src, tmp_path / "m.zarr", rows_per_partition=RPP, dtype=dtype)
    assert store.n_partitions == 6
    assert store.partitions[1].nnz == 0  # rows 10-19 are all zero
    assert_store_equals(store, matrix.astype(dtype), dtype=dtype)


def test_single_column_zero_based_with_n_features(tmp_path: Path, rng: np.random.Generator) -> None:
    column = make_matrix(rng, n_rows=25, n_cols=1, density=0.5)
    src = write_svmlight(tmp_path / "c.svmlight", column, zero_based=True)
    store = ingest(src, tmp_path / "c.zarr", zero_based=True, n_features=1)
    assert store.shape == (25, 1)
    assert_store_equals(store, column)


def test_n_features_keeps_trailing_empty_columns(tmp_path: Path, matrix: sp.csr_array) -> None:
    src = write_svmlight(tmp_path / "m.libsvm", matrix)
    store = ingest(src, tmp_path / "m.zarr", n_features=12)
    assert store.shape == (60, 12)
    np.testing.assert_array_equal(store.to_scipy().toarray()[:, :9], matrix.toarray())


def test_comments_qid_blank_lines_and_scikit_learn_agree(tmp_path: Path) -> None:
    from sklearn.datasets import load_svmlight_file

    text = (
        "# a header comment\n"
        "1 qid:3 1:0.5 4:-2 # trailing comment\n"
        "\n"
        "-1 qid:3 2:1e-3\t3:7\n"
        "+1 qid:4\n"
        "   # an indented comment line\n"
        "0 1:2 4:+1.25\n"
    )
    src = tmp_path / "c.svm"
    src.write_text(text)
    store = ingest(src, tmp_path / "c.zarr", store_labels=True)
    expected, labels, _qid = load_svmlight_file(str(src), query_id=True, n_features=4, zero_based=False)
    assert store.shape == (4, 4)
    assert_store_equals(store, expected)
    np.testing.assert_array_equal(zarr.open_group(store.path, mode="r")["labels"][:], labels)


def test_many_chunks_give_the_same_matrix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          rng: np.random.Generator) -> None:
    big = make_matrix(rng, n_rows=300, n_cols=17)
    src = write_svmlight(tmp_path / "b.svm", big)
    monkeypatch.setattr(_text, "CHUNK_BYTES", 64)  # lines straddle every chunk boundary
    store = ingest(src, tmp_path / "b.zarr", rows_per_partition=7)
    assert_store_equals(store, big)


def test_no_final_newline_and_gzip(tmp_path: Path, matrix: sp.csr_array) -> None:
    plain = write_svmlight(tmp_path / "m.svm", matrix)
    text = Path(plain).read_bytes().rstrip(b"\n")
    with gzip.open(tmp_path / "m.svm.gz", "wb") as handle:
        handle.write(text)
    store = ingest(tmp_path / "m.svm.gz", tmp_path / "m.zarr")
    assert_store_equals(store, matrix)


def test_unsorted_indices_and_duplicates_summed_by_default(tmp_path: Path) -> None:
    src = tmp_path / "d.svm"
    src.write_text("1 2:1.5 3:1 2:2\n1 3:4 1:-1\n")
    store = ingest(src, tmp_path / "d.zarr")
    np.testing.assert_array_equal(store.to_scipy().toarray(), [[0.0, 3.5, 1.0], [-1.0, 0.0, 4.0]])


# ------------------------------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("1 1:2\n1 2:nan\n", r"'2:nan' at line 2 \(row 1\).*NaN and infinite"),
        ("1 1:2\n1 2:inf\n", r"'2:inf' at line 2 \(row 1\).*NaN and infinite"),
        ("1 1:2\n\n1 2:-inf\n", r"'2:-inf' at line 3 \(row 1\)"),
        ("1 0:2\n", r"feature index 0 in '0:2' at line 1 \(row 0\).*zero_based=True"),
        ("1 1:2\n1 3\n", r"malformed feature '3' at line 2 \(row 1\)"),
        ("1 1:2:3\n", r"malformed feature '1:2:3' at line 1"),
        ("1 a:2\n", r"malformed feature 'a:2' at line 1 \(row 0\)"),
        ("1 2:x\n", r"malformed feature '2:x' at line 1 \(row 0\)"),
        ("1 1.5:2\n", r"index in '1.5:2' at line 1 \(row 0\) of '.*bad.svm' is not an integer"),
        ("1 1:1\n2:1 3:1\n", r"missing label at line 2 \(row 1\)"),
        ("1\n-1\n", r"no features in .*n_features"),
    ],
)
def test_malformed_input_names_the_line(tmp_path: Path, text: str, match: str) -> None:
    src = tmp_path / "bad.svm"
    src.write_text(text)
    with pytest.raises(InvalidInputError, match=match) as info:
        ingest(src, tmp_path / "out.zarr")
    assert info.value.source == str(src)
    assert not (tmp_path / "out.zarr").exists()


def test_negative_zero_based_index(tmp_path: Path) -> None:
    src = tmp_path / "neg.svm"
    src.write_text("1 -1:2\n")
    with pytest.raises(InvalidInputError, match=r"negative feature index in '-1:2' at line 1 \(row 0\)"):
        ingest(src, tmp_path / "out.zarr", zero_based=True)


def test_index_beyond_n_features(tmp_path: Path) -> None:
    src = tmp_path / "wide.svm"
    src.write_text("1 1:1\n1 5:1\n")
    with pytest.raises(InvalidInputError, match=r"'5:1' at line 2 \(row 1\) of '.*wide.svm' is beyond n_features=4"):
        ingest(src, tmp_path / "out.zarr", n_features=4)


def test_non_numeric_label_with_store_labels(tmp_path: Path) -> None:
    src = tmp_path / "multi.svm"
    src.write_text("1 1:1\n1,2 2:1\n")
    with pytest.raises(InvalidInputError, match=r"label '1,2' at line 2 \(row 1\) of '.*multi.svm' is not a number"):
        ingest(src, tmp_path / "out.zarr", store_labels=True)
    assert ingest(src, tmp_path / "ok.zarr").shape == (2, 2)  # without labels, multi-label files are fine


def test_duplicates_rejected_name_row_and_partition(tmp_path: Path) -> None:
    src = tmp_path / "d.svm"
    src.write_text("1 1:1\n1 1:1\n1 2:1 2:3\n")
    with pytest.raises(InvalidInputError, match=r"duplicate entry \(row 2, column 1\) at partition 1") as info:
        ingest(src, tmp_path / "out.zarr", on_duplicate="reject", rows_per_partition=2)
    assert (info.value.partition, info.value.row) == (1, 2)
    assert os.listdir(tmp_path) == ["d.svm"]


def test_n_features_must_be_positive(tmp_path: Path) -> None:
    src = tmp_path / "m.svm"
    src.write_text("1 1:1\n")
    with pytest.raises(InvalidParameterError, match=r"n_features must be an integer >= 1; got 0"):
        ingest(src, tmp_path / "out.zarr", n_features=0)
