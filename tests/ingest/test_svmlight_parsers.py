"""scikit-learn's svmlight parser and the numpy parser give the same store, row for row, on tricky input (comments,
``qid:``, empty rows and blank lines, trailing whitespace, tabs, unsorted and repeated indices, chunk boundaries
inside lines), and the same errors naming the same line."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr

from dppca_dask.errors import InvalidInputError
from dppca_dask.ingest import _text, ingest
from dppca_dask.ingest import svmlight as svmlight_module

pytest.importorskip("sklearn")

TRICKY = {
    "comments": "# header\n1 1:0.5 4:-2 # trailing comment\n   # indented comment\n-1 2:1e-3 3:7\n",
    "qid": "1 qid:3 1:0.5 4:-2\n-1 qid:3 2:1e-3\t3:7\n+1 qid:4\n0 1:2 4:+1.25\n",
    "empty_rows": "1\n\n-1 2:1\n0\n\n\n1 1:3 3:-0.25\n",
    "whitespace": "1 1:2   3:4   \n-1\t2:5\t\n  0 1:1e2 \n1 3:.5  \n",
    "crlf": "1 1:2 3:4\r\n-1 2:5\r\n",
    "unsorted_and_repeated": "1 2:1.5 3:1 2:2\n1 3:4 1:-1\n",
    "exponents_and_signs": "1 1:+1.5e-3 2:-2E+2 4:0.0\n-1 3:1.0000000000000002 4:123456789.123456789\n",
}


def _ingest(tmp_path: Path, name: str, text: str, parser: str, monkeypatch: pytest.MonkeyPatch,
            **kwargs: object) -> object:
    monkeypatch.setattr(svmlight_module, "DEFAULT_PARSER", parser)
    src = tmp_path / f"{name}.svm"
    src.write_bytes(text.encode())
    return ingest(src, tmp_path / f"{name}-{parser}.zarr", **kwargs)


@pytest.mark.parametrize("name", sorted(TRICKY))
@pytest.mark.parametrize("options", [{}, {"n_features": 6, "store_labels": True}, {"zero_based": True}])
def test_both_parsers_give_the_same_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                                          options: dict[str, object]) -> None:
    stores = [_ingest(tmp_path, name, TRICKY[name], parser, monkeypatch, **options) for parser in ("sklearn", "numpy")]
    fast, reference = stores
    assert fast.shape == reference.shape and fast.nnz == reference.nnz  # type: ignore[attr-defined]
    assert fast.n_partitions == reference.n_partitions  # type: ignore[attr-defined]
    a, b = fast.to_scipy(), reference.to_scipy()  # type: ignore[attr-defined]
    np.testing.assert_array_equal(a.indptr, b.indptr)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.data, b.data)  # bit for bit
    if options.get("store_labels"):
        np.testing.assert_array_equal(zarr.open_group(fast.path, mode="r")["labels"][:],  # type: ignore[attr-defined]
                                      zarr.open_group(reference.path, mode="r")["labels"][:])  # type: ignore[attr-defined]


def test_chunk_boundaries_inside_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       rng: np.random.Generator) -> None:
    lines = []
    for _ in range(200):
        cols = np.sort(rng.choice(np.arange(1, 30), size=int(rng.integers(0, 8)), replace=False))
        lines.append(" ".join([str(int(rng.integers(-1, 2)))] + [f"{c}:{rng.normal():.17g}" for c in cols]))
    text = "\n".join(lines) + "\n"
    monkeypatch.setattr(_text, "CHUNK_BYTES", 97)
    fast = _ingest(tmp_path, "many", text, "sklearn", monkeypatch, n_features=30, rows_per_partition=13)
    reference = _ingest(tmp_path, "many", text, "numpy", monkeypatch, n_features=30, rows_per_partition=13)
    a, b = fast.to_scipy(), reference.to_scipy()  # type: ignore[attr-defined]
    assert (a != b).nnz == 0 and a.shape == b.shape == (200, 30)


def test_clean_chunks_are_parsed_by_scikit_learn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"sklearn": 0, "numpy": 0}
    sklearn_parse, numpy_parse = svmlight_module._parse_chunk_sklearn, svmlight_module._parse_chunk

    def counting_sklearn(*args: object, **kwargs: object) -> object:
        out = sklearn_parse(*args, **kwargs)
        calls["sklearn"] += out is not None
        return out

    def counting_numpy(*args: object, **kwargs: object) -> object:
        calls["numpy"] += 1
        return numpy_parse(*args, **kwargs)

    monkeypatch.setattr(svmlight_module, "_parse_chunk_sklearn", counting_sklearn)
    monkeypatch.setattr(svmlight_module, "_parse_chunk", counting_numpy)
    _ingest(tmp_path, "clean", TRICKY["comments"], "sklearn", monkeypatch, n_features=6)
    assert calls == {"sklearn": 1, "numpy": 0}
    _ingest(tmp_path, "repeated", TRICKY["unsorted_and_repeated"], "sklearn", monkeypatch, n_features=6)
    assert calls == {"sklearn": 1, "numpy": 1}  # scikit-learn refuses unsorted indices: the numpy parser reads it


@pytest.mark.parametrize(
    ("text", "options", "match"),
    [
        ("1 1:2\n1 2:nan\n", {}, r"'2:nan' at line 2 \(row 1\).*NaN and infinite"),
        ("1 0:2\n", {}, r"feature index 0 in '0:2' at line 1 \(row 0\).*zero_based=True"),
        ("1 1:2\n1 3\n", {}, r"malformed feature '3' at line 2 \(row 1\)"),
        ("1 1:2\n1 7:1\n", {"n_features": 6}, r"feature index in '7:1' at line 2 \(row 1\) of .* is beyond n_features=6"),
        ("1 1:2\nx 2:1\n", {"store_labels": True}, r"label 'x' at line 2 \(row 1\) of .* is not a number"),
        ("1 1:1_0\n", {}, r"malformed feature '1:1_0' at line 1"),
    ],
)
def test_both_parsers_name_the_same_bad_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str,
                                             options: dict[str, object], match: str) -> None:
    for parser in ("sklearn", "numpy"):
        with pytest.raises(InvalidInputError, match=match):
            _ingest(tmp_path, f"bad-{parser}", text, parser, monkeypatch, **options)


def test_a_bad_parser_name_is_refused(tmp_path: Path) -> None:
    from dppca_dask.errors import InvalidParameterError

    src = tmp_path / "x.svm"
    src.write_text("1 1:2\n")
    with pytest.raises(InvalidParameterError, match="parser must be one of auto, sklearn, numpy; got 'fast'"):
        svmlight_module._chunk_parser(str(src), "fast")
