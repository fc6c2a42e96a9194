"""``ingest(..., codec=)``, ``dppca-dask ingest --codec`` and ``[data.ingest] codec``: every codec reads back the same
matrix and is recorded in the store; an unknown codec fails before anything is written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from ingest_helpers import make_matrix

from dppca_dask.cli import main
from dppca_dask.errors import InvalidParameterError
from dppca_dask.ingest import ingest
from dppca_dask.storage import _format, open_matrix


def _svm(path: Path, matrix: sp.csr_array) -> Path:
    lines = []
    for i in range(matrix.shape[0]):
        lo, hi = matrix.indptr[i], matrix.indptr[i + 1]
        lines.append(" ".join(["0"] + [f"{j + 1}:{float(v)!r}" for j, v in zip(matrix.indices[lo:hi], matrix.data[lo:hi])]))
    path.write_text("\n".join(lines) + "\n")
    return path


def _chunk_codecs(path: Path) -> list[int]:
    group = zarr.open_group(path, mode="r")
    return [len(group[f"X/{name}"].metadata.codecs) for name in ("data", "indices", "indptr")]


@pytest.mark.parametrize("source", ["svmlight", "npz", "in-memory"])
@pytest.mark.parametrize("codec", _format.CODECS)
def test_each_codec_reads_back_identically_and_is_recorded(tmp_path: Path, rng: np.random.Generator, codec: str,
                                                           source: str) -> None:
    matrix = make_matrix(rng, n_rows=60, n_cols=9)
    if source == "svmlight":
        src: object = _svm(tmp_path / "m.svm", matrix)
        kwargs = {"n_features": 9}
    elif source == "npz":
        sp.save_npz(tmp_path / "m.npz", sp.csr_matrix(matrix))
        src, kwargs = tmp_path / "m.npz", {}
    else:
        src, kwargs = matrix, {}
    store = ingest(src, tmp_path / "s.zarr", rows_per_partition=10, codec=codec, **kwargs)
    assert store.codec == codec and store.info()["codec"] == codec
    assert open_matrix(tmp_path / "s.zarr").metadata["codec"] == codec
    assert _chunk_codecs(tmp_path / "s.zarr") == [1 if codec == "none" else 2] * 3  # bytes (+ Blosc)
    got = store.to_scipy()
    assert got.dtype == np.float64 and (got != sp.csr_array(matrix)).nnz == 0
    for part in store.partitions:  # the partitions the workers read, with their norms, are the same for every codec
        block, norms = store.read_partition_with_norms(part.index, dtype=np.float64)
        want = sp.csr_array(matrix)[part.row_start : part.row_stop]
        np.testing.assert_array_equal(block.toarray(), want.toarray())
        np.testing.assert_array_equal(norms, np.sqrt(np.asarray(want.multiply(want).sum(axis=1)).ravel()))


def test_default_codec_is_none(tmp_path: Path, rng: np.random.Generator) -> None:
    assert ingest(make_matrix(rng), tmp_path / "s.zarr").codec == "none" == _format.DEFAULT_CODEC


@pytest.mark.parametrize("codec", ["snappy", "", None, 3])
def test_unknown_codec_fails_before_anything_is_written(tmp_path: Path, rng: np.random.Generator,
                                                        codec: object) -> None:
    with pytest.raises(InvalidParameterError, match=r"codec must be one of 'none', 'lz4', 'zstd'; got"):
        ingest(make_matrix(rng), tmp_path / "s.zarr", codec=codec)  # type: ignore[arg-type]
    assert not (tmp_path / "s.zarr").exists()


def test_cli_codec_option_and_help(tmp_path: Path, rng: np.random.Generator,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    src = _svm(tmp_path / "m.svm", make_matrix(rng))
    assert main(["ingest", str(src), "--out", str(tmp_path / "s.zarr"), "--codec", "zstd", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["codec"] == "zstd"
    assert main(["info", str(tmp_path / "s.zarr")]) == 0
    assert "(codec: zstd)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["ingest", str(src), "--out", str(tmp_path / "t.zarr"), "--codec", "snappy"])
    assert exit_.value.code == 2 and not (tmp_path / "t.zarr").exists()
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["ingest", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--codec {none,lz4,zstd}" in text
    for codec in _format.CODECS:  # the trade-off: measured read speed of each codec
        assert f"{codec}:" in text
    assert "MB/s" in text and "default: none" in text


def test_job_spec_accepts_an_ingest_codec(tmp_path: Path) -> None:
    from dppca_dask.jobs import parse_job

    doc = {
        "job": {"name": "codec-job"},
        "data": {"store": "store.zarr", "ingest": {"source": "m.svm", "n_features": 9, "codec": "lz4"}},
        "mechanism": {"name": "adaptive-power", "n_iter": 3},
        "privacy": {"epsilon": 0.8, "delta": 1e-7},
        "budget": {"ledger": str(tmp_path / "ledger.sqlite"), "dataset": "ds"},
        "output": {"path": str(tmp_path / "out")},
    }
    spec = parse_job(doc, base_dir=str(tmp_path))
    assert spec.data.ingest is not None and spec.data.ingest["codec"] == "lz4"  # passed to ingest() as it is
