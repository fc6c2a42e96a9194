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


def _chunks_of_64(monkeypatch) -> None:
    """Stores ingested to the bucket in this test get 64 entries per chunk (object storage's size scaled down)."""
    monkeypatch.setattr(_format, "OBJECT_NNZ_CHUNK", 64)
    monkeypatch.setattr(_format, "MIN_NNZ_CHUNK", 64)


def test_an_uncompressed_partition_reads_only_its_bytes(s3, rng, monkeypatch, requests):
    _chunks_of_64(monkeypatch)  # partitions start and end inside chunks
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
        assert not [key for method, key, _, _ in requests if method != "get_object" and "/c/" in key]
        reads = [(start, end) for _, key, start, end in requests if f"/X/{name}/c/" in key]
        assert len(reads) == -(-part.nnz_stop // 64) - part.nnz_start // 64  # one request per chunk touched
        assert all(start is not None and end is not None for start, end in reads)  # ranged: no size request
        total = sum(end - start for start, end in reads)
        if itemsize is not None:
            assert total == part.nnz * itemsize  # the partition's bytes, not the chunks'


def test_a_compressed_partition_reads_whole_chunks(s3, rng, monkeypatch, requests):
    _chunks_of_64(monkeypatch)
    matrix = _matrix(rng)
    url = s3.url("lz4.zarr")
    ingest(matrix, url, rows_per_partition=100, n_features=12, codec="lz4")
    store = open_matrix(url)
    requests.clear()
    assert (store.read_partition(2) != matrix[200:]).nnz == 0
    chunks = [(start, end) for _, key, start, end in requests if "/X/data/c/" in key]
    assert chunks and all((start, end) == (0, None) for start, end in chunks)  # from byte 0: no size request


def test_a_lost_chunk_is_damage(s3, rng, monkeypatch, requests):
    _chunks_of_64(monkeypatch)
    matrix = _matrix(rng)
    url = s3.url("lost.zarr")
    ingest(matrix, url, rows_per_partition=100, n_features=12)
    store = open_matrix(url)
    part = store.partitions[1]
    s3.filesystem().rm_file(s3.url(f"lost.zarr/X/data/c/{part.nnz_start // 64 + 1}"))
    with pytest.raises(StoreCorruptError, match="partition 1 .* is damaged: a chunk of 'data' or 'indices' is missing"):
        store.read_partition(1)


def test_an_unchanged_partition_skips_the_checks_it_passed_a_rewritten_one_does_not(s3, rng, requests):
    """The chunk objects' ETags identify their bytes: a partition read again from unchanged objects reuses the norms
    of the read that checked it (as a local store's unchanged chunk files do); a chunk rewritten since is checked
    again (here: a value made NaN is found)."""
    from dppca_dask.storage.store import CHECKED

    CHECKED.clear()
    matrix = _matrix(rng)
    url = s3.url("memo.zarr")
    ingest(matrix, url, rows_per_partition=100, n_features=12)
    store = open_matrix(url)
    block, norms = store.read_partition_with_norms(1)
    hits = CHECKED.hits
    again, norms_again = store.read_partition_with_norms(1)
    assert CHECKED.hits == hits + 1
    assert (again != block).nnz == 0 and np.array_equal(norms_again, norms)
    part, itemsize = store.partitions[1], np.dtype(store.dtype).itemsize
    fs = s3.filesystem()
    key = s3.url("memo.zarr/X/data/c/0")
    raw = bytearray(fs.cat_file(key))
    raw[part.nnz_start * itemsize: (part.nnz_start + 1) * itemsize] = np.array([np.nan], dtype=store.dtype).tobytes()
    fs.pipe_file(key, bytes(raw))
    with pytest.raises(StoreCorruptError, match="partition 1"):
        store.read_partition_with_norms(1)
    assert CHECKED.hits == hits + 1


def test_a_body_cut_short_is_requested_again_not_called_damage(s3, rng, monkeypatch):
    """A response body that ends early (a connection dropped mid-transfer: a fault a healthy local server does not
    produce, hence the stand-in body) is retried as the filesystem's own reads are, and the partition is read."""
    import aiohttp
    import s3fs

    from dppca_dask.storage.store import READ_AHEAD

    READ_AHEAD.clear()
    matrix = _matrix(rng)
    url = s3.url("cut.zarr")
    ingest(matrix, url, rows_per_partition=100, n_features=12)
    store = open_matrix(url)
    call, cut = s3fs.S3FileSystem._call_s3, []

    class CutShort:
        def __init__(self, body):
            self.body = body

        async def read(self):
            raise aiohttp.ClientPayloadError("response payload is not completed")

        def close(self):
            self.body.close()

    async def flaky(self, method, *args, **kwargs):
        response = await call(self, method, *args, **kwargs)
        if method == "get_object" and "/X/data/c/" in kwargs.get("Key", "") and not cut:
            cut.append(kwargs["Key"])
            response["Body"] = CutShort(response["Body"])
        return response

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", flaky)
    assert (store.read_partition(1) != matrix[100:200]).nnz == 0
    assert cut
    READ_AHEAD.clear()


def test_an_uncompressed_chunk_is_written_into_the_partition_as_it_arrives(s3, rng, monkeypatch, requests):
    # Reading a response body whole joins its pieces (one more copy of every byte of the partition) before they are
    # copied into place: the chunks' bodies are read piece by piece instead (recorded, not replaced: the reads are
    # the client's own).
    from aiobotocore.response import AioStreamingBody

    _chunks_of_64(monkeypatch)
    matrix = _matrix(rng)
    url = s3.url("pieces.zarr")
    ingest(matrix, url, rows_per_partition=100, n_features=12, codec="none")
    store = open_matrix(url)
    store.read_partition(0)  # the root metadata's version seen: the next reads' replacement checks are HEADs only
    whole: list[int] = []
    read = AioStreamingBody.read

    async def recording(self, amt=None):
        whole.append(amt)
        return await read(self, amt)

    monkeypatch.setattr(AioStreamingBody, "read", recording)
    requests.clear()
    for index in (1, 2):
        block, _ = store.read_partition_with_norms(index)
        assert (block != matrix[100 * index : 100 * index + 100]).nnz == 0
    assert len([r for r in requests if r[0] == "get_object"]) >= 6 and whole == []


def test_a_chunk_shorter_than_the_range_is_damage(s3, rng, monkeypatch):
    _chunks_of_64(monkeypatch)
    matrix = _matrix(rng)
    url = s3.url("short.zarr")
    ingest(matrix, url, rows_per_partition=100, n_features=12, codec="none")
    store = open_matrix(url)
    part = store.partitions[1]
    fs = s3.filesystem()
    key = s3.url(f"short.zarr/X/data/c/{part.nnz_stop // 64 - 1}")  # a chunk the partition needs whole
    fs.pipe_file(key, fs.cat_file(key)[:-8])
    with pytest.raises(StoreCorruptError, match=r"cannot read partition 1 .*holds 504 bytes at offset 0, expected 512"):
        store.read_partition(1)


def test_a_partition_ending_on_a_chunk_boundary_takes_its_last_pointer_from_the_table(s3, rng, requests):
    """Partition ``p``'s rows end where chunk ``p + 1`` of the row pointers begins: its read does not request that
    chunk (the pointer is the next partition's first, equal to ``nnz_stop`` of the table), and a damaged pointer
    there is still found, by the next partition's read."""
    matrix = _matrix(rng, n_rows=400)
    url = s3.url("boundary.zarr")
    ingest(matrix, url, rows_per_partition=50, n_features=12, codec="none")  # row pointers: one chunk per partition
    store = open_matrix(url)
    requests.clear()
    block, _ = store.read_partition_with_norms(0)
    assert (block != sp.csr_array(matrix[:50])).nnz == 0
    pointer_chunks = {key for _, key, *_ in requests if "/indptr/" in key}
    assert pointer_chunks == {"boundary.zarr/X/indptr/c/0"}
    last, _ = store.read_partition_with_norms(7)  # the last partition reads its end pointer
    assert (last != sp.csr_array(matrix[350:])).nnz == 0
    fs = s3.filesystem()
    key = f"{s3.name}/boundary.zarr/X/indptr/c/1"
    values = bytearray(fs.cat(key))
    width = len(values) // 50
    values[:width] = (int.from_bytes(values[:width], "little") + 1).to_bytes(width, "little")
    fs.pipe(key, bytes(values))
    from dppca_dask.storage.store import READ_AHEAD

    READ_AHEAD.clear()
    fresh = open_matrix(url)
    fresh.read_partition_with_norms(0)  # its own pointers are sound
    with pytest.raises(StoreCorruptError, match="partition 1 .*disagree with the partition table"):
        fresh.read_partition_with_norms(1)
