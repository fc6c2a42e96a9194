"""``ingest(..., nnz_chunk=)`` and ``dppca-dask ingest --nnz-chunk``: the entries per chunk of ``data`` and
``indices``, recorded in the store and kept by appends; a bad value fails with a clear error (exit 2) before anything
is read, written or requested."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from ingest_helpers import make_matrix

from dppca_dask.cli import main
from dppca_dask.errors import InvalidParameterError
from dppca_dask.ingest import ingest
from dppca_dask.storage import _format, append_partition, open_matrix


def _array_chunks(path: Path | str) -> tuple[int, int]:
    group = zarr.open_group(path, mode="r")
    return int(group["X/data"].chunks[0]), int(group["X/indices"].chunks[0])


def test_the_default_on_a_file_system_is_unchanged(tmp_path: Path, rng: np.random.Generator) -> None:
    store = ingest(make_matrix(rng, n_rows=40, n_cols=7), tmp_path / "s.zarr", rows_per_partition=10)
    assert store.metadata["nnz_chunk"] == _format.NNZ_CHUNK == 2**18
    assert _array_chunks(store.path) == (_format.NNZ_CHUNK, _format.NNZ_CHUNK)


@pytest.mark.parametrize("source", ["svmlight", "in-memory"])
def test_a_chosen_size_is_recorded_reads_back_and_appends_keep_it(tmp_path: Path, rng: np.random.Generator,
                                                                  source: str) -> None:
    matrix = sp.csr_array(sp.random(2000, 30, density=0.2, random_state=rng, format="csr"))  # 12,000 entries
    src: object = matrix
    kwargs: dict[str, object] = {}
    if source == "svmlight":
        src = tmp_path / "m.svm"
        rows = []
        for i in range(matrix.shape[0]):
            lo, hi = matrix.indptr[i], matrix.indptr[i + 1]
            rows.append(" ".join(["0"] + [f"{j + 1}:{float(v)!r}" for j, v in zip(matrix.indices[lo:hi],
                                                                                    matrix.data[lo:hi])]))
        src.write_text("\n".join(rows) + "\n")  # type: ignore[attr-defined]
        kwargs = {"n_features": 30}
    store = ingest(src, tmp_path / "s.zarr", rows_per_partition=700, nnz_chunk=4096, **kwargs)
    assert store.metadata["nnz_chunk"] == 4096 and _array_chunks(store.path) == (4096, 4096)
    assert any(p.nnz_start % 4096 for p in store.partitions[1:])  # partitions start inside chunks
    assert (open_matrix(store.path).to_scipy() != matrix).nnz == 0
    more = sp.csr_array(sp.random(300, 30, density=0.2, random_state=rng, format="csr"))
    appended = append_partition(store.path, more)  # rewrites the last partly filled chunk, in the store's size
    assert appended.metadata["nnz_chunk"] == 4096 and _array_chunks(store.path) == (4096, 4096)
    assert (appended.to_scipy() != sp.vstack([matrix, more], format="csr")).nnz == 0
    for part in appended.partitions:
        block, _ = appended.read_partition_with_norms(part.index)
        assert (block != sp.vstack([matrix, more], format="csr")[part.row_start : part.row_stop]).nnz == 0


@pytest.mark.parametrize("value", [0, -1, 100, 2**12 - 1, 2**24 + 1, 1.5, "4096", True])
def test_a_bad_size_is_refused_before_anything_is_written(tmp_path: Path, rng: np.random.Generator,
                                                          value: object) -> None:
    with pytest.raises(InvalidParameterError, match=r"nnz_chunk \(--nnz-chunk\) must be a whole number of entries "
                                                    r"per chunk from 4096 \(2\*\*12\) to 16777216 \(2\*\*24\); got"):
        ingest(make_matrix(rng, n_rows=10, n_cols=4), tmp_path / "s.zarr", nnz_chunk=value)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_bad_size_for_a_url_is_refused_before_any_request(tmp_path: Path, rng: np.random.Generator,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # No endpoint on a closed port: a request would fail with a connection error, not with this message.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    with pytest.raises(InvalidParameterError, match=r"nnz_chunk \(--nnz-chunk\) must be .* got 10"):
        ingest(make_matrix(rng, n_rows=10, n_cols=4), "s3://bucket/x.zarr", nnz_chunk=10)


def test_the_command_line_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "m.svm"
    src.write_text("1 1:0.5 3:2\n-1\n1 2:1.5\n")
    assert main(["ingest", str(src), "--out", str(tmp_path / "s.zarr"), "--nnz-chunk", "8192"]) == 0
    assert open_matrix(tmp_path / "s.zarr").metadata["nnz_chunk"] == 8192
    capsys.readouterr()
    for bad in ("1000", "33554432"):
        assert main(["ingest", str(src), "--out", str(tmp_path / f"bad{bad}.zarr"), "--nnz-chunk", bad]) == 2
        err = capsys.readouterr().err
        assert f"nnz_chunk (--nnz-chunk) must be a whole number of entries per chunk" in err and f"got {bad}" in err
        assert not (tmp_path / f"bad{bad}.zarr").exists()
    with pytest.raises(SystemExit) as exit_:
        main(["ingest", str(src), "--out", str(tmp_path / "x.zarr"), "--nnz-chunk", "2**20"])  # not a number
    assert exit_.value.code == 2
    assert "--nnz-chunk: invalid int value" in capsys.readouterr().err


def test_generated_stores_take_a_chosen_size_and_refuse_options_for_a_local_path(tmp_path: Path) -> None:
    from dppca_dask.datasets import PlantedSpec, low_coherence_blocks, write_low_coherence

    spec = PlantedSpec(n_rows=300, n_cols=40, nnz_per_row=5, support=10, signal_share=0.05, seed=1)
    store = write_low_coherence(tmp_path / "g.zarr", spec, rows_per_partition=100, nnz_chunk=4096)
    assert store.metadata["nnz_chunk"] == 4096 and _array_chunks(store.path) == (4096, 4096)
    generated = sp.vstack(list(low_coherence_blocks(spec, rows_per_block=100)), format="csr")
    assert (store.to_scipy() != generated).nnz == 0
    assert write_low_coherence(tmp_path / "d.zarr", spec).metadata["nnz_chunk"] == _format.NNZ_CHUNK
    with pytest.raises(InvalidParameterError, match=r"storage_options apply to a URL .* is a local path: drop them"):
        write_low_coherence(tmp_path / "o.zarr", spec, storage_options={"endpoint_url": "http://127.0.0.1:9"})
    assert not (tmp_path / "o.zarr").exists()
