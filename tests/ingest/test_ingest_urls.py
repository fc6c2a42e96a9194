"""fsspec URLs: ``file://`` and ``memory://`` inputs to ingest, stores opened by ``open_matrix`` and ``pca`` from
``memory://`` and ``file://``, and advice naming the package for a scheme whose package is missing."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from ingest_helpers import assert_store_equals, make_matrix, write_svmlight

import dppca_dask
from dppca_dask.cli import main
from dppca_dask.errors import InvalidParameterError, NotPrivateWarning, StoreNotFoundError
from dppca_dask.ingest import ingest
from dppca_dask.storage import open_matrix, write_matrix

fsspec = pytest.importorskip("fsspec")


@pytest.fixture
def memory() -> object:
    fs = fsspec.filesystem("memory")
    fs.store.clear()
    fs.pseudo_dirs.clear()
    fs.pseudo_dirs.append("")
    yield fs
    fs.store.clear()


def test_file_urls_are_local_paths(tmp_path: Path, rng: np.random.Generator) -> None:
    matrix = make_matrix(rng, n_rows=30, n_cols=5)
    src = write_svmlight(tmp_path / "m.svm", matrix)
    store = ingest(Path(src).as_uri(), (tmp_path / "m.zarr").as_uri(), n_features=5)
    assert store.path == str(tmp_path / "m.zarr")
    assert_store_equals(open_matrix((tmp_path / "m.zarr").as_uri()), matrix)


def test_a_memory_input_is_ingested_as_the_local_file_is(tmp_path: Path, rng: np.random.Generator,
                                                         memory: object) -> None:
    matrix = make_matrix(rng, n_rows=40, n_cols=7)
    src = write_svmlight(tmp_path / "m.svm", matrix)
    memory.put(src, "/inputs/m.svm")  # type: ignore[attr-defined]
    store = ingest("memory://inputs/m.svm", tmp_path / "from-memory.zarr", n_features=7)
    assert_store_equals(store, matrix)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["from-memory.zarr", "m.svm"]  # the copy is gone
    with pytest.raises(StoreNotFoundError, match="input 'memory://inputs/none.svm' does not exist"):
        ingest("memory://inputs/none.svm", tmp_path / "x.zarr")


def test_pca_reads_memory_and_file_stores(tmp_path: Path, memory: object) -> None:
    matrix = sp.random(200, 12, density=0.3, format="csr", random_state=np.random.RandomState(4))
    local = write_matrix(tmp_path / "s.zarr", matrix, rows_per_partition=50, schema="declared")
    memory.put(str(local.path), "/stores/s.zarr", recursive=True)  # type: ignore[attr-defined]
    opened = open_matrix("memory://stores/s.zarr")
    assert (opened.shape, opened.n_partitions, opened.nnz) == (local.shape, local.n_partitions, local.nnz)
    kwargs = {"epsilon": 1.0, "delta": 1e-6, "n_iter": 4, "seed": 3, "executor": "local"}
    with pytest.warns(NotPrivateWarning):
        results = [dppca_dask.pca(data, **kwargs)
                   for data in (str(local.path), "memory://stores/s.zarr", (tmp_path / "s.zarr").as_uri())]
    for other in results[1:]:
        np.testing.assert_array_equal(other.components, results[0].components)
    with pytest.raises(StoreNotFoundError, match="no matrix store at 'memory://stores/none.zarr'"):
        open_matrix("memory://stores/none.zarr")
    # On a cluster the store would be looked for in the workers' processes, where it does not exist: refused before
    # anything runs, saying why (it read as a damaged store)
    with pytest.raises(InvalidParameterError, match=r"is a memory:// store: it lives in this process.*"
                                                    r"executor='cluster' was asked for.*executor='local'"):
        dppca_dask.pca("memory://stores/s.zarr", epsilon=1.0, delta=1e-6, executor="cluster")


@pytest.mark.skipif(importlib.util.find_spec("s3fs") is not None, reason="s3fs is installed")
def test_a_scheme_without_its_package_names_it(tmp_path: Path) -> None:
    advice = r"reading s3:// URLs needs the s3fs package.*pip install s3fs"
    with pytest.raises(InvalidParameterError, match=advice):
        dppca_dask.pca("s3://bucket/store.zarr", epsilon=1.0, delta=1e-6)
    with pytest.raises(InvalidParameterError, match=advice):
        open_matrix("s3://bucket/store.zarr")
    with pytest.raises(InvalidParameterError, match=advice):
        ingest("s3://bucket/data.svm", tmp_path / "x.zarr")
    assert not (tmp_path / "x.zarr").exists()


def test_the_command_line_ingests_a_file_url(tmp_path: Path, rng: np.random.Generator,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    matrix = make_matrix(rng, n_rows=20, n_cols=4)
    src = write_svmlight(tmp_path / "m.svm", matrix)
    out = (tmp_path / "m.zarr").as_uri()
    assert main(["ingest", Path(src).as_uri(), "--out", out, "--n-features", "4"]) == 0
    assert main(["info", out]) == 0
    assert "20 x 4" in capsys.readouterr().out


def test_a_store_is_never_written_to_a_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``write_matrix``/``StoreWriter`` given ``memory://…`` wrote a local directory named ``memory:`` (the URL as a
    relative path); they refuse it as ingest does, and a ``file://`` URL is the local path it names."""
    monkeypatch.chdir(tmp_path)
    matrix = sp.random(20, 4, density=0.5, format="csr", random_state=np.random.RandomState(1))
    with pytest.raises(InvalidParameterError, match=r"out 'memory://t/s.zarr' is a memory:// URL; this writer "
                                                    r"builds a store on a local or mounted file system"):
        write_matrix("memory://t/s.zarr", matrix)
    assert os.listdir(tmp_path) == []
    store = write_matrix((tmp_path / "f.zarr").as_uri(), matrix)
    assert store.path == str(tmp_path / "f.zarr")
