"""The streaming read path: codecs recorded in the metadata, chunks read straight into the partition's arrays, row
norms summed during the read, and the same checks and results as reading through zarr."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr

from dppca_dask.coordinator.sources import load_store_partition
from dppca_dask.errors import InvalidInputError, InvalidParameterError, StoreCorruptError
from dppca_dask.storage import _format, open_matrix, write_matrix
from dppca_dask.storage._chunks import BufferPool, chunk_layout, prefetch_range, read_range
from dppca_dask.storage.validate import safe_row_norms


def random_csr(rng: np.random.Generator, n_rows: int = 90, n_cols: int = 50, dtype: type = np.float64) -> sp.csr_array:
    """Rows of 0 to 30 entries (runs of empty rows, rows that span several 16-value chunks)."""
    counts = rng.integers(0, 31, n_rows)
    counts[10:14] = 0
    rows = np.repeat(np.arange(n_rows), counts)
    cols = np.concatenate([rng.choice(n_cols, c, replace=False) for c in counts])
    matrix = sp.csr_array((rng.standard_normal(rows.size).astype(dtype), (rows, cols)), shape=(n_rows, n_cols))
    matrix.sum_duplicates()
    return matrix


def metadata(path: str) -> dict[str, object]:
    return dict(zarr.open_group(path, mode="r").attrs["dppca_dask"])  # type: ignore[arg-type]


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_each_codec_is_recorded_and_reads_back_exactly(tmp_path: Path, rng: np.random.Generator, small_chunks: int,
                                                       codec: str) -> None:
    matrix = random_csr(rng, dtype=np.float32)
    store = write_matrix(tmp_path / "s.zarr", matrix, rows_per_partition=25, codec=codec)
    assert metadata(store.path)["codec"] == codec and store.codec == codec and store.info()["codec"] == codec
    codecs = zarr.open_group(store.path, mode="r")["X/data"].metadata.codecs
    assert len(codecs) == (1 if codec == "none" else 2)
    back = store.to_scipy()
    assert back.dtype == np.float32 and (back != matrix).nnz == 0


def test_default_codec_is_uncompressed_and_unknown_codecs_are_refused(tmp_path: Path, sparse: sp.csr_array) -> None:
    assert write_matrix(tmp_path / "d.zarr", sparse).codec == _format.DEFAULT_CODEC == "none"
    with pytest.raises(InvalidParameterError, match=r"codec must be one of 'none', 'lz4', 'zstd'; got 'snappy'"):
        write_matrix(tmp_path / "e.zarr", sparse, codec="snappy")
    assert not (tmp_path / "e.zarr").exists()


def test_store_written_before_the_codec_was_recorded_reads_as_before(tmp_path: Path, rng: np.random.Generator,
                                                                     small_chunks: int) -> None:
    # The former default: Blosc lz4 chunks and no "codec" in the metadata.
    matrix = random_csr(rng, dtype=np.float32)
    store = write_matrix(tmp_path / "old.zarr", matrix, rows_per_partition=30, codec="lz4")
    group = zarr.open_group(store.path, mode="r+")
    meta = dict(group.attrs["dppca_dask"])  # type: ignore[arg-type]
    del meta["codec"]
    group.attrs["dppca_dask"] = meta
    old = open_matrix(store.path)
    assert old.codec == "lz4"
    for part in old.partitions:
        block, norms = old.read_partition_with_norms(part.index, dtype=np.float64)
        expected = sp.csr_array(matrix[part.row_start : part.row_stop], dtype=np.float64)
        assert (block != expected).nnz == 0
        np.testing.assert_allclose(norms, safe_row_norms(expected), rtol=1e-12)


def test_direct_reads_equal_zarr_reads_for_every_range(tmp_path: Path, rng: np.random.Generator) -> None:
    group = zarr.open_group(tmp_path / "a.zarr", mode="w", zarr_format=3)
    values = rng.standard_normal(1000).astype(np.float32)
    for name, compressors in (("none", None), ("lz4", _format.compressors("lz4"))):
        array = group.create_array(name, shape=values.shape, dtype=values.dtype, chunks=(64,), compressors=compressors)
        array[:] = values
        layout = chunk_layout(array)
        assert layout is not None and layout.compressor == (None if name == "none" else "blosc")
        for start, stop in ((0, 1000), (0, 64), (64, 128), (3, 5), (63, 65), (5, 999), (999, 1000), (400, 400)):
            np.testing.assert_array_equal(read_range(layout, start, stop), values[start:stop])
            seen: list[tuple[int, np.ndarray]] = []
            converted = read_range(layout, start, stop, dtype=np.float64,
                                   visit=lambda offset, chunk: seen.append((offset, chunk.copy())))
            assert converted.dtype == np.float64
            np.testing.assert_array_equal(converted, values[start:stop].astype(np.float64))
            # the visits cover the range once, in order, with the converted values
            joined = np.concatenate([c for _, c in seen]) if seen else np.zeros(0)
            np.testing.assert_array_equal(joined, converted)
            assert [o for o, _ in seen] == list(np.cumsum([0] + [c.size for _, c in seen[:-1]]))
        with pytest.raises(ValueError, match=r"range \[990, 1001\) outside the array's 1000 elements"):
            read_range(layout, 990, 1001)


def test_layouts_the_direct_reader_does_not_handle_are_read_through_zarr(tmp_path: Path) -> None:
    v3 = zarr.open_group(tmp_path / "v3.zarr", mode="w", zarr_format=3)
    v2 = zarr.open_group(tmp_path / "v2.zarr", mode="w", zarr_format=2)
    others = [
        v3.create_array("zstd", shape=(100,), dtype="f8", chunks=(10,), compressors=[zarr.codecs.ZstdCodec()]),
        v3.create_array("sharded", shape=(100,), dtype="f8", chunks=(10,), shards=(50,)),
        v3.create_array("matrix", shape=(10, 10), dtype="f8", chunks=(5, 5)),
        v2.create_array("v2", shape=(100,), dtype="f8", chunks=(10,)),
    ]
    assert [chunk_layout(a) for a in others] == [None] * 4


def test_partition_reads_through_zarr_match_direct_reads(tmp_path: Path, rng: np.random.Generator,
                                                         small_chunks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from dppca_dask.storage import store as store_module

    matrix = random_csr(rng)
    store = write_matrix(tmp_path / "s.zarr", matrix, rows_per_partition=40)
    direct = [store.read_partition_with_norms(p.index, dtype=np.float64) for p in store.partitions]
    store_module._layout.cache_clear()
    monkeypatch.setattr(store_module, "chunk_layout", lambda array: None)
    via_zarr = [store.read_partition_with_norms(p.index, dtype=np.float64) for p in store.partitions]
    store_module._layout.cache_clear()
    for (a, na), (b, nb) in zip(direct, via_zarr):
        assert (a != b).nnz == 0
        np.testing.assert_allclose(na, nb, rtol=1e-14)


def test_norms_summed_during_the_read_are_the_norms_of_the_canonical_block(
    tmp_path: Path, rng: np.random.Generator, small_chunks: int
) -> None:
    matrix = random_csr(rng, n_rows=200, dtype=np.float32)
    store = write_matrix(tmp_path / "s.zarr", matrix, rows_per_partition=70)
    for part in store.partitions:
        block, norms = store.read_partition_with_norms(part.index, dtype=np.float64)
        assert block.has_canonical_format and block.dtype == np.float64
        assert (block != store.read_partition(part.index, dtype=np.float64)).nnz == 0
        np.testing.assert_allclose(norms, store.read_checked_norms(part.index, block), rtol=1e-13, atol=0)
        # float64 squares of the float32 values: the same norms as from the values the kernels multiply
        np.testing.assert_allclose(norms, safe_row_norms(block), rtol=1e-13)


def test_what_a_worker_gets_is_float64_values_with_int32_indices_without_copies(
    tmp_path: Path, rng: np.random.Generator
) -> None:
    matrix = random_csr(rng, dtype=np.float32)
    store = write_matrix(tmp_path / "s.zarr", matrix, rows_per_partition=50)
    raw = store.read_partition(0)
    assert raw.dtype == np.float32 and raw.indices.dtype == np.int32 and raw.indptr.dtype == np.int32
    part = load_store_partition(store, 0)
    block = part.block
    assert block.dtype == np.float64 and block.indices.dtype == np.int32 and block.indptr.dtype == np.int32
    # contiguous arrays, which scipy uses as they are
    assert all(a.flags.c_contiguous for a in (block.data, block.indices, block.indptr))
    product = block @ np.ones(block.shape[1])
    np.testing.assert_allclose(product, sp.csr_array(matrix[:50], dtype=np.float64) @ np.ones(block.shape[1]))


def test_lost_and_damaged_chunks_of_an_uncompressed_store(tmp_path: Path, rng: np.random.Generator,
                                                          small_chunks: int) -> None:
    matrix = random_csr(rng)
    store = write_matrix(tmp_path / "s.zarr", matrix, rows_per_partition=30)
    chunk_dir = Path(store.path, "X", "data", "c")
    os.remove(chunk_dir / "3")  # values 48-63: partition 0 or 1
    target = next(p for p in store.partitions if p.nnz_start <= 48 < p.nnz_stop)
    reopened = open_matrix(store.path)
    with pytest.raises(StoreCorruptError, match=rf"partition {target.index} of store .* a chunk of 'data' or "
                                                r"'indices' is missing"):
        reopened.read_partition_with_norms(target.index)
    Path(chunk_dir / "5").write_bytes(b"\0" * 10)  # truncated
    target = next(p for p in store.partitions if p.nnz_start <= 80 < p.nnz_stop)
    with pytest.raises(StoreCorruptError, match=rf"cannot read partition {target.index} .* holds 10 bytes, "
                                                r"expected 128"):
        reopened.read_partition(target.index)


def test_damaged_blosc_chunk_names_the_partition(tmp_path: Path, rng: np.random.Generator, small_chunks: int) -> None:
    matrix = random_csr(rng)
    store = write_matrix(tmp_path / "s.zarr", matrix, rows_per_partition=30, codec="lz4")
    path = Path(store.path, "X", "indices", "c", "2")
    path.write_bytes(path.read_bytes()[:-3])
    target = next(p for p in store.partitions if p.nnz_start <= 32 < p.nnz_stop)
    with pytest.raises(StoreCorruptError, match=rf"cannot read partition {target.index} .* is damaged"):
        open_matrix(store.path).read_partition(target.index)


def test_non_finite_values_and_overflowing_norms_are_still_refused(tmp_path: Path) -> None:
    # An AnnData store (no ingest checks) with a NaN in row 1 and a row whose norm overflows float64 in row 2.
    def anndata(name: str, data: np.ndarray) -> str:
        root = zarr.open_group(tmp_path / name, mode="w", zarr_format=3)
        x = root.create_group("X", attributes={"encoding-type": "csr_matrix", "encoding-version": "0.1.0",
                                               "shape": [3, 4]})
        for key, values in (("data", data), ("indices", np.array([0, 1, 2, 0, 3], np.int32)),
                            ("indptr", np.array([0, 2, 3, 5], np.int64))):
            x.create_array(key, shape=values.shape, dtype=values.dtype, chunks=(2,))[:] = values
        return str(tmp_path / name)

    nan = open_matrix(anndata("nan.zarr", np.array([1.0, 2.0, np.nan, 1.0, 1.0])))
    with pytest.raises(InvalidInputError, match=r"a NaN or infinite value at row 1 \(partition 0\), column 2"):
        nan.read_partition_with_norms(0, dtype=np.float64)
    huge = open_matrix(anndata("huge.zarr", np.array([1.0, 2.0, 3.0, 1.5e308, 1.5e308])))
    with pytest.raises(InvalidInputError, match=r"the L2 norm of row 2 .* is inf"):
        huge.read_partition_with_norms(0, dtype=np.float64)
    big = open_matrix(anndata("big.zarr", np.array([1.0, 2.0, 3.0, 1e200, 1e200])))
    _, norms = big.read_partition_with_norms(0, dtype=np.float64)
    np.testing.assert_allclose(norms, [np.sqrt(5.0), 3.0, np.sqrt(2.0) * 1e200], rtol=1e-15)


def test_prefetch_ignores_missing_chunks(tmp_path: Path) -> None:
    group = zarr.open_group(tmp_path / "p.zarr", mode="w", zarr_format=3)
    array = group.create_array("a", shape=(100,), dtype="f8", chunks=(10,), compressors=None)
    array[:50] = 1.0
    layout = chunk_layout(array)
    assert layout is not None
    prefetch_range(layout, 0, 100)  # chunks 5-9 were never written
    prefetch_range(layout, 20, 20)


def test_buffer_pool_reuses_an_array_only_once_nothing_refers_to_it() -> None:
    def address(array: np.ndarray) -> int:
        return int(array.__array_interface__["data"][0])

    pool = BufferPool()
    n = 2**20  # 8 MiB of float64: pooled
    first = pool.take(n, np.float64)
    where = address(first)
    block = sp.csr_array((first, np.zeros(n, np.int32), np.array([0, n], np.int32)), shape=(1, 3))
    view = block.data[10:]
    del first
    assert address(pool.take(n, np.float64)) != where  # the block holds it
    del block
    assert address(pool.take(n, np.float64)) != where  # a view of the block's values holds it
    del view
    again = pool.take(n - 5, np.float64)
    assert address(again) == where and again.size == n - 5  # free: reused, whatever its contents
    other = pool.take(n, np.int32)
    assert address(other) != where and other.dtype == np.int32
    del again
    larger = pool.take(2 * n, np.float64)  # too small: replaced
    assert larger.size == 2 * n
    small = pool.take(100, np.float64)  # small arrays are never pooled
    assert small.base is None
    pool.clear()


def test_reads_into_reused_arrays_are_exact(tmp_path: Path, rng: np.random.Generator) -> None:
    # Partitions large enough for the pool, read one after the other into the same arrays.
    n_rows, n_cols = 6_000, 2_000
    matrix = sp.csr_array(sp.random(n_rows, n_cols, density=0.25, format="csr", dtype=np.float64, random_state=rng))
    store = write_matrix(tmp_path / "s.zarr", matrix, rows_per_partition=2_000)
    for _ in range(2):
        for part in store.partitions:
            block, norms = store.read_partition_with_norms(part.index, dtype=np.float64)
            expected = matrix[part.row_start : part.row_stop]
            assert (block != expected).nnz == 0
            np.testing.assert_allclose(norms, safe_row_norms(expected), rtol=1e-13)
            del block


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_pieces_cover_each_chunk_in_order_before_its_visit(tmp_path: Path, rng: np.random.Generator, codec: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from dppca_dask.storage import _chunks

    monkeypatch.setattr(_chunks, "PIECE", 5)
    group = zarr.open_group(tmp_path / "a.zarr", mode="w", zarr_format=3)
    values = rng.standard_normal(300).astype(np.float32)
    array = group.create_array("v", shape=values.shape, dtype=values.dtype, chunks=(16,),
                               compressors=None if codec == "none" else _format.compressors("lz4"))
    array[:] = values
    layout = chunk_layout(array)
    assert layout is not None
    for start, stop in ((0, 300), (3, 5), (15, 17), (7, 250), (16, 32), (299, 300)):
        events: list[tuple[str, int, np.ndarray]] = []
        out = read_range(layout, start, stop, dtype=np.float64,
                         visit=lambda o, v: events.append(("chunk", o, v.copy())),
                         piece=lambda o, v: events.append(("piece", o, v.copy())))
        np.testing.assert_array_equal(out, values[start:stop].astype(np.float64))
        pieces: list[tuple[int, np.ndarray]] = []
        for kind, offset, seen in events:
            if kind == "piece":
                assert 0 < seen.size <= 5 and seen.dtype == np.float64
                np.testing.assert_array_equal(seen, out[offset : offset + seen.size])
                pieces.append((offset, seen))
                continue
            # a chunk's visit comes after exactly its own pieces, which cover it in order
            assert [o for o, _ in pieces] == list(range(offset, offset + seen.size, 5))
            np.testing.assert_array_equal(np.concatenate([p for _, p in pieces]), seen)
            pieces = []
        assert not pieces
        # without conversion there are no pieces
        events.clear()
        read_range(layout, start, stop, visit=lambda o, v: events.append(("chunk", o, v)),
                   piece=lambda o, v: events.append(("piece", o, v)))
        assert {kind for kind, _, _ in events} == {"chunk"}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_norms_squared_piece_by_piece_are_bit_identical(tmp_path: Path, rng: np.random.Generator, dtype: type,
                                                        small_chunks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from dppca_dask.storage import _chunks

    matrix = random_csr(rng, n_rows=200, dtype=dtype)
    matrix.data[::7] *= 1e150 if dtype == np.float64 else 1e30  # squares far apart in magnitude: order shows
    store = write_matrix(tmp_path / "s.zarr", matrix, rows_per_partition=70)
    whole = [store.read_partition_with_norms(p.index, dtype=np.float64) for p in store.partitions]
    for size in (1, 3, 5, 16):
        monkeypatch.setattr(_chunks, "PIECE", size)
        for (block, norms), part in zip(whole, store.partitions):
            again, pieces = store.read_partition_with_norms(part.index, dtype=np.float64)
            assert (again != block).nnz == 0
            np.testing.assert_array_equal(pieces.view(np.int64), norms.view(np.int64))


def _bytes_read() -> int:
    with open("/proc/self/io") as io:
        return next(int(line.split()[1]) for line in io if line.startswith("rchar:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/io"), reason="counts the bytes read through /proc/self/io")
def test_an_uncompressed_edge_chunk_reads_only_the_bytes_of_the_range(tmp_path: Path,
                                                                     rng: np.random.Generator) -> None:
    # Large chunks (object storage's, or a chosen size) must not cost a local read more than the partition's bytes:
    # of a chunk the range covers in part, only that part is read (the file's size is still checked).
    group = zarr.open_group(tmp_path / "a.zarr", mode="w", zarr_format=3)
    values = rng.standard_normal(2**21).astype(np.float32)
    array = group.create_array("v", shape=values.shape, dtype=values.dtype, chunks=(2**20,), compressors=None)
    array[:] = values
    layout = chunk_layout(array)
    assert layout is not None
    for start, stop in ((2**20 - 100, 2**20 + 100), (5, 1005), (2**21 - 10, 2**21)):
        for dtype in (None, np.float64):
            before = _bytes_read()
            got = read_range(layout, start, stop, dtype=dtype)
            assert _bytes_read() - before < 64 * 1024  # a whole chunk is 4 MiB
            np.testing.assert_array_equal(got, values[start:stop])
    (tmp_path / "a.zarr" / "v" / "c" / "1").write_bytes(values[2**20 :].tobytes()[:-4])  # one value short
    with pytest.raises(ValueError, match=r"chunk '.*c/1' holds 4194300 bytes, expected 4194304"):
        read_range(layout, 2**20 + 5, 2**20 + 10)
