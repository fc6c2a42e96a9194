"""Reading a range of a 1-D zarr array straight into one NumPy array, chunk by chunk.

zarr decodes every chunk into a buffer of its own and then copies the selected part into the result. For the 1-D
arrays of a partition (``data`` and ``indices``: tens of millions of elements per read, re-read by every out-of-core
step) that copy and zarr's per-chunk machinery cost as much as the decoding itself. For the plain layouts that
stores written by :class:`~dppca_dask.storage.StoreWriter` use (zarr format 3 on a local filesystem, regular chunks,
the default chunk keys, little-endian bytes followed by at most one Blosc compressor), :func:`read_range` reads each
chunk file and decodes it directly into its place in the result: a single copy from the page cache for uncompressed
chunks (of a chunk the range covers only in part, only that part's bytes are read), Blosc's own decompression into
the result for compressed ones. Anything else (zarr format 2, sharding,
other codecs, remote stores) is read through zarr, whose result is the same.

A chunk file that does not exist reads as the fill value, as in zarr (the store's readers detect lost chunks from
it); a chunk whose size does not match the array's chunk raises :class:`ValueError`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import zarr

__all__ = ["PIECE", "BufferPool", "ChunkLayout", "FileIdentity", "chunk_layout", "identity", "prefetch_range",
           "read_range"]


class BufferPool:
    """Arrays for partition reads, reused once nothing refers to them any more.

    An out-of-core worker reads a partition of tens of millions of values every step and drops it after the kernel;
    a fresh array of that size is mapped anew by the allocator each time, and the operating system then faults in
    and zeroes every page on first write, which costs several times the copy itself. The pool keeps one array per
    type and hands out views of it; a view (and every view of it, and a sparse block built on it) refers to the
    pooled array, so when its reference count is back to the pool's own reference it is free, and the next read
    reuses its pages. While it is in use (a partition persisted, or two reads at once), reads get arrays of their
    own. Once a run is over, a process keeps at most one partition's values and indices (the largest read).
    """

    def __init__(self) -> None:
        self._arrays: dict[np.dtype[Any], np.ndarray] = {}
        self._lock = threading.Lock()  # threads of one worker must not both take the same free array

    def take(self, n: int, dtype: Any) -> np.ndarray:
        """An uninitialised array of ``n`` elements of ``dtype`` (a view of the pooled array when it is free)."""
        import sys

        dtype = np.dtype(dtype)
        if n * dtype.itemsize < 2**22:  # small arrays: the allocator reuses their memory anyway
            return np.empty(n, dtype=dtype)
        with self._lock:
            pooled = self._arrays.get(dtype)
            # References to a free pooled array: the dict, the name ``pooled``, getrefcount's argument.
            if pooled is not None and sys.getrefcount(pooled) == 3:
                if pooled.size >= n:
                    return pooled[:n]
                del self._arrays[dtype], pooled  # too small: replaced by the larger one below
            fresh = np.empty(n, dtype=dtype)
            if dtype not in self._arrays:
                self._arrays[dtype] = fresh
            return fresh[:n]

    def clear(self) -> None:
        """Drop the pooled arrays (their memory is freed once the partitions using them are)."""
        with self._lock:
            self._arrays.clear()


#: Values converted (and shown to ``read_range``'s ``piece``) at a time: 256 KiB of float64, which stay in a core's
#: own cache (1-2 MiB on current processors) with the piece's float32 source and a pass's output.
PIECE = 2**15

#: The pool of this process's partition reads.
POOL = BufferPool()


@dataclass(frozen=True, slots=True)
class ChunkLayout:
    """Where the chunks of a 1-D array are and how to decode them (only for the layouts :func:`read_range` reads)."""

    directory: str
    """Directory of the array (its chunk files are ``c/<i>`` below it)."""
    length: int
    chunk: int
    """Elements per chunk."""
    dtype: np.dtype[Any]
    fill_value: Any
    compressor: str | None
    """``"blosc"`` or ``None`` (uncompressed chunks)."""

    def chunk_path(self, index: int) -> str:
        return os.path.join(self.directory, "c", str(index))


def chunk_layout(array: zarr.Array) -> ChunkLayout | None:
    """The :class:`ChunkLayout` of ``array`` when its chunks can be read directly, else ``None``."""
    from zarr.codecs import BloscCodec, BytesCodec
    from zarr.core.chunk_grids import RegularChunkGrid
    from zarr.core.chunk_key_encodings import DefaultChunkKeyEncoding
    from zarr.storage import LocalStore

    meta = array.metadata
    if meta.zarr_format != 3 or array.ndim != 1 or not isinstance(array.store, LocalStore):
        return None
    if not isinstance(meta.chunk_grid, RegularChunkGrid) or not isinstance(meta.chunk_key_encoding,
                                                                            DefaultChunkKeyEncoding):
        return None
    if meta.chunk_key_encoding.separator != "/" or meta.storage_transformers:
        return None
    codecs = tuple(meta.codecs)
    if not codecs or not isinstance(codecs[0], BytesCodec) or len(codecs) > 2:
        return None
    dtype = np.dtype(array.dtype)
    if dtype.itemsize > 1 and (codecs[0].endian is None or codecs[0].endian.value != "little"):
        return None
    if dtype.byteorder == ">" or dtype.kind not in "iuf":
        return None
    compressor: str | None = None
    if len(codecs) == 2:
        if not isinstance(codecs[1], BloscCodec):
            return None
        compressor = "blosc"
    directory = os.path.join(str(array.store.root), array.path)
    return ChunkLayout(directory=directory, length=int(array.shape[0]), chunk=int(meta.chunk_grid.chunk_shape[0]),
                       dtype=dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype,
                       fill_value=array.fill_value, compressor=compressor)


def read_range(layout: ChunkLayout, start: int, stop: int, *, dtype: Any = None,
               visit: Callable[[int, np.ndarray], None] | None = None,
               piece: Callable[[int, np.ndarray], None] | None = None,
               seen: list[FileIdentity | None] | None = None) -> np.ndarray:
    """Elements ``[start, stop)`` of the array described by ``layout``, as a new array.

    ``seen``, when given, gets the :func:`identity` of each chunk file read, in order, taken from the open file
    after its bytes were read (``None`` for a chunk file that does not exist).

    ``dtype`` converts the values chunk by chunk on the way (a chunk-sized scratch buffer instead of a second
    array of the whole range). ``visit(offset, values)`` is called once per chunk with the converted values of
    the range that chunk held (``offset`` from ``start``), while they are still in the processor's cache.

    ``piece(offset, values)``, when converting, is called for each piece of at most :data:`PIECE` converted values
    as soon as it is written, before the chunk's ``visit``: a piece is still in the core's own cache, where a
    whole chunk (2 MiB of float64) is not, so a pass over each piece costs a fraction of a pass over the chunk.
    Pieces come in order and never span two chunks. Without conversion it is not called.
    """
    if not 0 <= start <= stop <= layout.length:
        raise ValueError(f"range [{start}, {stop}) outside the array's {layout.length} elements")
    out_dtype = layout.dtype if dtype is None else np.dtype(dtype)
    out = POOL.take(stop - start, out_dtype)
    chunk = layout.chunk
    scratch = np.empty(chunk, dtype=layout.dtype) if out_dtype != layout.dtype and stop > start else None
    for index in range(start // chunk, -(-stop // chunk)):
        lo, hi = index * chunk, (index + 1) * chunk
        a, b = max(lo, start), min(hi, stop)
        target = out[a - start : b - start]
        if scratch is not None:  # decode into the scratch buffer, convert into place piece by piece
            _read_chunk(layout, index, scratch[: b - a], seen, offset=a - lo)
            for p in range(a, b, PIECE):
                q = min(p + PIECE, b)
                np.copyto(out[p - start : q - start], scratch[p - a : q - a], casting="unsafe")
                if piece is not None:
                    piece(p - start, out[p - start : q - start])
        else:  # in place (of an edge chunk, only the part inside the range)
            _read_chunk(layout, index, target, seen, offset=a - lo)
        if visit is not None:
            visit(a - start, target)
    return out


#: What identifies a file's contents without reading them: device, inode, size, modification and change times (ns).
FileIdentity = tuple[int, int, int, int, int]


def identity(status: os.stat_result) -> FileIdentity:
    """A file's :data:`FileIdentity` from its ``stat``: a file renamed over it changes it, and so does a write, with
    two exceptions. File times have a resolution (milliseconds): a write of the same size within it of the last
    change may leave the identity as it was, so only files whose change time is older than that are trusted
    (``store.CheckedReads.SETTLED``). A write through a shared memory map may set the times only later. The change
    time is set by the system and cannot be set back by the file's owner (only by setting the clock)."""
    return (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)


def _read_chunk(layout: ChunkLayout, index: int, out: np.ndarray,
                seen: list[FileIdentity | None] | None = None, *, offset: int = 0) -> None:
    """Elements ``[offset, offset + out.size)`` of chunk ``index`` into ``out``: of an uncompressed chunk only their
    bytes are read (the file's size is still checked), a compressed chunk is decoded whole."""
    path = layout.chunk_path(index)
    try:
        handle = open(path, "rb", buffering=0)
    except FileNotFoundError:  # never written: zarr's fill value
        out.fill(layout.fill_value)
        if seen is not None:
            seen.append(None)
        return
    chunk_bytes = layout.chunk * layout.dtype.itemsize
    with handle:
        if layout.compressor is None:
            if offset:
                handle.seek(offset * layout.dtype.itemsize)
            view = memoryview(cast(Any, out)).cast("B")
            got = handle.readinto(view)
            status = os.fstat(handle.fileno())  # after the read: a write during it changes the identity
            if got != out.nbytes or status.st_size != chunk_bytes:
                raise ValueError(f"chunk '{path}' holds {status.st_size} bytes, expected {chunk_bytes}")
            if seen is not None:
                seen.append(identity(status))
            return
        encoded = handle.read()
        if seen is not None:
            seen.append(identity(os.fstat(handle.fileno())))
    from numcodecs import blosc

    # Blosc's 16-byte header: version, format version, flags, type size, then the decoded and the encoded sizes.
    nbytes = int.from_bytes(encoded[4:8], "little") if len(encoded) >= 16 else -1
    cbytes = int.from_bytes(encoded[12:16], "little") if len(encoded) >= 16 else -1
    if nbytes != chunk_bytes or cbytes != len(encoded):
        raise ValueError(f"chunk '{path}' is damaged: its header gives {nbytes} bytes in {cbytes}, expected "
                         f"{chunk_bytes} in the file's {len(encoded)}")
    if out.size == layout.chunk:
        blosc.decompress(encoded, out)
        return
    whole = np.empty(layout.chunk, dtype=layout.dtype)
    blosc.decompress(encoded, whole)
    out[:] = whole[offset : offset + out.size]


def prefetch_range(layout: ChunkLayout, start: int, stop: int) -> None:
    """Ask the operating system to read the chunk files of ``[start, stop)`` into its cache in the background.

    Costs no CPU time of the caller (``posix_fadvise(WILLNEED)`` starts the reads and returns); a no-op where the
    call does not exist. Errors are ignored: the range is read, and checked, when it is needed.
    """
    advise = getattr(os, "posix_fadvise", None)
    if advise is None or stop <= start:
        return
    for index in range(start // layout.chunk, -(-stop // layout.chunk)):
        try:
            fd = os.open(layout.chunk_path(index), os.O_RDONLY)
        except OSError:
            continue
        try:
            advise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
        except OSError:
            pass
        finally:
            os.close(fd)
