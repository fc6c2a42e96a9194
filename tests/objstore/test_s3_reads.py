"""How a partition is read from object storage: every chunk it touches requested at once, of an uncompressed chunk
only the partition's bytes (no size request first), of a compressed chunk the whole object; a lost chunk is damage,
named as such."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.errors import StoreCorruptError
from dppca_dask.ingest import ingest
from dppca_dask.storage import _format, open_matrix


def _matrix(rng: np.random.Generator, n_rows: int = 300, n_cols: int = 12) -> sp.csr_array:
    return sp.csr_array(sp.random(n_rows, n_cols, density=0.3, random_state=rng, format="csr"))


@pytest.fixture
def requests(monkeypatch):
    """Every object read of s3fs in this process: ``(key, start, end)``."""
    import s3fs

    from dppca_dask.storage.store import READ_AHEAD

    READ_AHEAD.clear()
    seen: list[tuple[str, int | None, int | None]] = []
    read = s3fs.S3FileSystem._cat_file

    async def recording(self, path, *args, start=None, end=None, **kwargs):
        seen.append((path, start, end))
        return await read(self, path, *args, start=start, end=end, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_cat_file", recording)
    yield seen
    READ_AHEAD.clear()


def test_an_uncompressed_partition_reads_only_its_bytes(s3, rng, monkeypatch, requests):
    monkeypatch.setattr(_format, "NNZ_CHUNK", 64)  # partitions start and end inside chunks
    matrix = _matrix(rng)
    url = s3.url("ranges.zarr")
    ingest(matrix, url, rows_per_partition=100, n_features=12, codec="none")
    store = open_matrix(url)
    part = store.partitions[1]
    assert part.nnz_start % 64 and part.nnz_stop % 64
    requests.clear()
    block, _ = store.read_partition_with_norms(1)
    assert (block != matrix[100:200]).nnz == 0
    for name, itemsize in (("data", np.dtype(store.dtype).itemsize), ("indices", None)):
        reads = [(start, end) for key, start, end in requests if f"/X/{name}/c/" in key]
        assert len(reads) == -(-part.nnz_stop // 64) - part.nnz_start // 64  # one request per chunk touched
        assert all(start is not None and end is not None for start, end in reads)  # ranged: no size request
        total = sum(end - start for start, end in reads)
        if itemsize is not None:
            assert total == part.nnz * itemsize  # the partition's bytes, not the chunks'


def test_a_compressed_partition_reads_whole_chunks(s3, rng, monkeypatch, requests):
    monkeypatch.setattr(_format, "NNZ_CHUNK", 64)
    matrix = _matrix(rng)
    url = s3.url("lz4.zarr")
    ingest(matrix, url, rows_per_partition=100, n_features=12, codec="lz4")
    store = open_matrix(url)
    requests.clear()
    assert (store.read_partition(2) != matrix[200:]).nnz == 0
    chunks = [(start, end) for key, start, end in requests if "/X/data/c/" in key]
    assert chunks and all((start, end) == (0, None) for start, end in chunks)  # from byte 0: no size request


def test_a_lost_chunk_is_damage(s3, rng, monkeypatch, requests):
    monkeypatch.setattr(_format, "NNZ_CHUNK", 64)
    matrix = _matrix(rng)
    url = s3.url("lost.zarr")
    ingest(matrix, url, rows_per_partition=100, n_features=12)
    store = open_matrix(url)
    part = store.partitions[1]
    s3.filesystem().rm_file(s3.url(f"lost.zarr/X/data/c/{part.nnz_start // 64 + 1}"))
    with pytest.raises(StoreCorruptError, match="partition 1 .* is damaged: a chunk of 'data' or 'indices' is missing"):
        store.read_partition(1)
