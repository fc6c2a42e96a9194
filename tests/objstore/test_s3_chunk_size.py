"""Stores written to object storage get chunks sized for it (fewer, larger objects: every chunk a read touches is one
request), recorded in the metadata as ``nnz_chunk``; an append keeps the store's own size, whichever it is."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dppca_dask.ingest import ingest
from dppca_dask.storage import _format, append_partition, open_matrix, write_matrix
from dppca_dask.storage._remote import open_group, upload_store


def _matrix(rng: np.random.Generator, n_rows: int = 300, n_cols: int = 12) -> sp.csr_array:
    return sp.csr_array(sp.random(n_rows, n_cols, density=0.3, random_state=rng, format="csr"))


def _chunks(url: str) -> list[int]:
    group = open_group(url)
    return [int(group[f"X/{name}"].chunks[0]) for name in ("data", "indices")]


def _scaled_down(monkeypatch) -> None:
    """160 entries per chunk in object storage, 16 on a file system (the bounds of a chosen size scaled down too)."""
    monkeypatch.setattr(_format, "OBJECT_NNZ_CHUNK", 160)
    monkeypatch.setattr(_format, "NNZ_CHUNK", 16)
    monkeypatch.setattr(_format, "MIN_NNZ_CHUNK", 16)


def _reads_back(url: str, matrix: sp.csr_array) -> None:
    store = open_matrix(url)
    assert (store.to_scipy() != matrix).nnz == 0
    for part in store.partitions:  # what a worker reads: the partition and its norms, every check on the way
        block, norms = store.read_partition_with_norms(part.index, dtype=np.float64)
        want = sp.csr_array(matrix[part.row_start : part.row_stop], dtype=np.float64)
        assert (block != want).nnz == 0
        np.testing.assert_allclose(norms, np.sqrt(np.asarray(want.multiply(want).sum(axis=1)).ravel()), rtol=1e-12)


def test_a_store_ingested_to_a_bucket_gets_the_object_storage_chunk_size(s3, rng):
    matrix = _matrix(rng)
    url = s3.url("big-chunks.zarr")
    store = ingest(matrix, url, rows_per_partition=100, n_features=12)
    assert _format.OBJECT_NNZ_CHUNK > _format.NNZ_CHUNK
    assert store.metadata["nnz_chunk"] == _format.OBJECT_NNZ_CHUNK
    assert _chunks(url) == [_format.OBJECT_NNZ_CHUNK] * 2
    _reads_back(url, matrix)


def test_partitions_across_several_large_chunks_read_back_exactly(s3, rng, monkeypatch):
    # The object-storage size scaled down so that partitions start and end inside chunks of the bucket's store, and
    # the file-system size made different from it: the bucket's store follows the object-storage one.
    _scaled_down(monkeypatch)
    matrix = _matrix(rng)
    url = s3.url("scaled.zarr")
    store = ingest(matrix, url, rows_per_partition=100, n_features=12, dtype=np.float32)
    assert store.metadata["nnz_chunk"] == 160 and _chunks(url) == [160, 160]
    assert any(p.nnz_start % 160 for p in store.partitions[1:])
    _reads_back(url, sp.csr_array(matrix, dtype=np.float32))


def test_a_chosen_chunk_size_is_recorded_in_a_bucket_too(s3, rng):
    matrix = _matrix(rng)
    url = s3.url("chosen.zarr")
    store = ingest(matrix, url, rows_per_partition=100, n_features=12, nnz_chunk=4096)
    assert store.metadata["nnz_chunk"] == 4096 and _chunks(url) == [4096, 4096]
    _reads_back(url, matrix)


def test_an_append_keeps_the_stores_own_chunk_size(s3, rng, tmp_path, monkeypatch):
    # A bucket's store of the object-storage size and one uploaded from a file system (the other size): each append
    # writes chunks of the store's own size, and the whole store reads back.
    _scaled_down(monkeypatch)
    first, more = _matrix(rng), _matrix(rng, 70)
    ingested = s3.url("ingested.zarr")
    ingest(first, ingested, rows_per_partition=100, n_features=12)
    local = write_matrix(tmp_path / "local.zarr", first, rows_per_partition=100)
    uploaded = s3.url("uploaded.zarr")
    upload_store(local.path, uploaded, None, overwrite=False)
    for url, size in ((ingested, 160), (uploaded, 16)):
        store = append_partition(url, more, timestamp=1.0e9)
        assert store.generation == 1 and store.metadata["nnz_chunk"] == size and _chunks(url) == [size, size]
        keys = s3.filesystem().ls(f"{url.removeprefix('s3://')}/X/data/c")
        assert len(keys) == -(-store.nnz // size)  # the new entries in chunks of that size
        _reads_back(url, sp.csr_array(sp.vstack([first, more], format="csr")))



def test_a_generated_store_written_to_a_bucket_gets_the_object_storage_size(s3):
    from dppca_dask.datasets import PlantedSpec, low_coherence_blocks, write_low_coherence

    spec = PlantedSpec(n_rows=400, n_cols=50, nnz_per_row=5, support=10, signal_share=0.05, seed=3)
    url = s3.url("generated.zarr")
    store = write_low_coherence(url, spec, rows_per_partition=100, dtype=np.float32)
    assert store.path == url and store.n_partitions == 4
    assert store.metadata["nnz_chunk"] == _format.OBJECT_NNZ_CHUNK and _chunks(url) == [_format.OBJECT_NNZ_CHUNK] * 2
    blocks = low_coherence_blocks(spec, rows_per_block=100)  # the blocks the writer generated
    _reads_back(url, sp.csr_array(sp.vstack(list(blocks), format="csr"), dtype=np.float32))
    chosen = write_low_coherence(s3.url("chosen-generated.zarr"), spec, nnz_chunk=8192, dtype=np.float32)
    assert chosen.metadata["nnz_chunk"] == 8192
