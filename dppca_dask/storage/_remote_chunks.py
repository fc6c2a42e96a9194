"""Reading a range of a 1-D zarr array in object storage straight into one NumPy array: every chunk's bytes
requested at once, and of an uncompressed chunk only the bytes of the range.

Through zarr, a partition's read costs two requests per chunk (the filesystem asks for the object's size before
reading it whole) and every chunk it touches in full: a partition whose values start in the middle of one chunk and
end in the middle of the next fetches two chunks for one chunk's worth of values, and the next partition fetches
the same two chunks again. For the plain layouts :func:`._chunks.chunk_layout` reads directly on a local disk
(zarr format 3, regular chunks, the default chunk keys, little-endian bytes followed by at most one Blosc
compressor), :func:`read_range` asks the filesystem for exactly the bytes of the range in each uncompressed chunk
(one ranged GET per chunk, all concurrently, each body written into its place in the result as its pieces arrive)
and for a compressed chunk whole (one GET, no size request), and decodes each into its place. Anything else is
read through zarr, whose result is the same.

A chunk object that does not exist reads as the fill value, as in zarr (the store's readers detect lost chunks
from it); an uncompressed chunk that holds fewer bytes than the range needs, or a compressed one whose header does
not give the chunk's size, raises :class:`ValueError`. Which chunks are requested, and how many bytes of each,
follows from the range alone (for a partition: its public extents), never from the values.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
import zarr

__all__ = ["Identity", "RemoteLayout", "read_range", "remote_layout"]

_T = TypeVar("_T")


@dataclass(frozen=True)
class RemoteLayout:
    """Where the chunks of a 1-D array in object storage are and how to decode them."""

    fs: Any
    """The array's asynchronous fsspec filesystem (zarr's own: its sessions live on zarr's event loop)."""
    directory: str
    """The array's path in the filesystem (its chunk objects are ``c/<i>`` below it)."""
    length: int
    chunk: int
    """Elements per chunk."""
    dtype: np.dtype[Any]
    fill_value: Any
    compressor: str | None
    """``"blosc"`` or ``None`` (uncompressed chunks)."""

    def chunk_key(self, index: int) -> str:
        return f"{self.directory}/c/{index}"


def remote_layout(array: zarr.Array) -> RemoteLayout | None:
    """The :class:`RemoteLayout` of ``array`` when it is in an asynchronous fsspec store and its chunks can be read
    directly, else ``None``."""
    from zarr.codecs import BloscCodec, BytesCodec
    from zarr.core.chunk_grids import RegularChunkGrid
    from zarr.core.chunk_key_encodings import DefaultChunkKeyEncoding
    from zarr.storage import FsspecStore

    store, meta = array.store, array.metadata
    if not isinstance(store, FsspecStore) or not getattr(store.fs, "async_impl", False):
        return None
    if meta.zarr_format != 3 or array.ndim != 1 or meta.storage_transformers:
        return None
    if not isinstance(meta.chunk_grid, RegularChunkGrid) or not isinstance(meta.chunk_key_encoding,
                                                                            DefaultChunkKeyEncoding):
        return None
    codecs = tuple(meta.codecs)
    if meta.chunk_key_encoding.separator != "/" or not codecs or not isinstance(codecs[0], BytesCodec):
        return None
    dtype = np.dtype(array.dtype)
    if dtype.itemsize > 1 and (codecs[0].endian is None or codecs[0].endian.value != "little"):
        return None
    if dtype.byteorder == ">" or dtype.kind not in "iuf" or len(codecs) > 2:
        return None
    if len(codecs) == 2 and not isinstance(codecs[1], BloscCodec):
        return None
    directory = "/".join(part for part in (store.path.rstrip("/"), array.path) if part)
    return RemoteLayout(fs=store.fs, directory=directory, length=int(array.shape[0]),
                        chunk=int(meta.chunk_grid.chunk_shape[0]),
                        dtype=dtype.newbyteorder("<") if dtype.itemsize > 1 else dtype, fill_value=array.fill_value,
                        compressor="blosc" if len(codecs) == 2 else None)


async def read_range(layout: RemoteLayout, start: int, stop: int) -> tuple[np.ndarray, list[Identity | None]]:
    """Elements ``[start, stop)`` of the array described by ``layout``, as a new array, and the :data:`Identity` of
    each chunk object read, in order (``None`` where it is not known: a missing chunk, a filesystem that does not
    say). Run on zarr's event loop: every chunk of the range is requested concurrently."""
    if not 0 <= start <= stop <= layout.length:
        raise ValueError(f"range [{start}, {stop}) outside the array's {layout.length} elements")
    out = np.empty(stop - start, dtype=layout.dtype)
    chunk = layout.chunk
    reads = []
    for index in range(start // chunk, -(-stop // chunk)):
        lo = index * chunk
        a, b = max(lo, start), min(lo + chunk, stop)
        reads.append(_read_chunk(layout, index, a - lo, b - lo, out[a - start : b - start]))
    identities = await asyncio.gather(*reads)
    return out, list(identities)


#: What identifies a chunk object's contents without reading them, in the shape of a local file's identity (five
#: integers, see :data:`._chunks.FileIdentity`): a marker, the two halves of a hash of the object's ETag (which
#: object stores derive from the contents: any write of other bytes changes it), then zeros (no change time: an
#: ETag needs no settling).
Identity = tuple[int, int, int, int, int]


def _identity(etag: Any) -> Identity | None:
    if not etag:
        return None
    import hashlib

    digest = hashlib.blake2b(str(etag).encode(), digest_size=16).digest()
    return (1, int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little"), 0, 0)


async def _get(layout: RemoteLayout, key: str, start: int, end: int | None) -> tuple[bytes, Identity | None]:
    """Bytes ``[start, end)`` of object ``key`` and its identity (:func:`_request`)."""
    return await _request(layout, key, start, end, lambda body: body.read(), lambda raw: raw)


async def _get_into(layout: RemoteLayout, key: str, start: int, end: int,
                    into: np.ndarray) -> tuple[int, Identity | None]:
    """Bytes ``[start, end)`` of object ``key`` written into ``into`` (an array of ``end - start`` bytes) as they
    arrive: the count of bytes received (written only while they fit) and the object's identity. The bytes are
    copied once, where reading the body whole joins its pieces first."""
    return await _request(layout, key, start, end, lambda body: _read_into(body, into),
                          lambda raw: _copy_into(raw, into))


async def _request(layout: RemoteLayout, key: str, start: int, end: int | None,
                   read: Callable[[Any], Awaitable[_T]], convert: Callable[[bytes], _T]) -> tuple[_T, Identity | None]:
    """``read(body)`` of one ranged GET of bytes ``[start, end)`` of object ``key`` and its identity (s3fs: the ETag
    from the same response), else ``convert`` of the filesystem's ``_cat_file`` (no identity)."""
    fs = layout.fs
    if not hasattr(fs, "_call_s3") or not hasattr(fs, "split_path"):
        return convert(await fs._cat_file(key, start=start, end=end)), None
    bucket, inner, _version = fs.split_path(key)

    async def get_and_read() -> tuple[_T, Identity | None]:
        try:
            response = await fs._call_s3("get_object", Bucket=bucket, Key=inner,
                                         Range=f"bytes={start}-{'' if end is None else end - 1}")
        except Exception as exc:  # retried already (s3fs's and botocore's own retries): not again below
            raise _Retried(exc) from None
        try:
            return await read(response["Body"]), _identity(response.get("ETag"))
        finally:
            response["Body"].close()

    try:  # s3fs's retries of a body cut short and its translation of errors, as for its own reads
        from s3fs.core import _error_wrapper
    except ImportError:
        _error_wrapper = None
    try:
        if _error_wrapper is None:
            return await get_and_read()
        return cast("tuple[_T, Identity | None]",
                    await _error_wrapper(get_and_read, retries=getattr(fs, "retries", 5)))
    except _Retried as retried:
        raise retried.error from None


class _Retried(Exception):
    """An error of the request itself, which the file system's call retried already: the retries of a body read
    (around it) must not retry it again (nested, they made a connection that fails before its response headers
    take minutes to report)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(type(error).__name__)
        self.error = error


def _copy_into(raw: bytes, into: np.ndarray) -> int:
    if len(raw) == into.nbytes:
        into.view(np.uint8)[:] = np.frombuffer(raw, dtype=np.uint8)
    return len(raw)


async def _read_into(body: Any, into: np.ndarray) -> int:
    """The response ``body`` written into ``into`` piece by piece as the connection delivers them (aiohttp's
    ``readchunk``, no copy of its own); the count of bytes the body held (written only while they fit). Errors of
    the connection are raised as the client's own body reads raise them (which s3fs retries)."""
    content = getattr(getattr(body, "raw_stream", None), "content", None)
    if content is None or not hasattr(content, "readchunk"):  # another HTTP backend: the body whole
        return _copy_into(await body.read(), into)
    import aiohttp
    from botocore.exceptions import ReadTimeoutError, ResponseStreamingError

    target, position = into.view(np.uint8), 0
    try:
        while True:
            piece, _ = await content.readchunk()
            if not piece:
                return position
            stop = position + len(piece)
            if stop <= target.size:
                target[position:stop] = np.frombuffer(piece, dtype=np.uint8)
            position = stop
    except asyncio.TimeoutError as exc:
        raise ReadTimeoutError(endpoint_url=str(getattr(body.raw_stream, "url", "")), error=exc) from exc
    except aiohttp.ClientPayloadError:
        raise
    except aiohttp.ClientConnectionError as exc:
        raise ResponseStreamingError(error=exc) from exc


async def _read_chunk(layout: RemoteLayout, index: int, lo: int, hi: int, target: np.ndarray) -> Identity | None:
    """Elements ``[lo, hi)`` of chunk ``index`` into ``target``; the chunk object's identity."""
    key, size = layout.chunk_key(index), layout.dtype.itemsize
    try:
        if layout.compressor is None:  # only the range's bytes, straight into their place
            got, identity = await _get_into(layout, key, lo * size, hi * size, target)
            if got != target.nbytes:
                raise ValueError(f"chunk '{key}' holds {got} bytes at offset {lo * size}, expected {target.nbytes}")
            return identity
        # from byte 0: a ranged GET, where a plain one costs a size request first
        raw, identity = await _get(layout, key, 0, None)
    except FileNotFoundError:  # never written: zarr's fill value
        target.fill(layout.fill_value)
        return None
    from numcodecs import blosc

    whole = np.empty(layout.chunk, dtype=layout.dtype)
    # Blosc's 16-byte header: version, format version, flags, type size, then the decoded and the encoded sizes.
    nbytes = int.from_bytes(raw[4:8], "little") if len(raw) >= 16 else -1
    cbytes = int.from_bytes(raw[12:16], "little") if len(raw) >= 16 else -1
    if nbytes != whole.nbytes or cbytes != len(raw):
        raise ValueError(f"chunk '{key}' is damaged: its header gives {nbytes} bytes in {cbytes}, expected "
                         f"{whole.nbytes} in the object's {len(raw)}")
    blosc.decompress(raw, whole)
    target[:] = whole[lo:hi]
    return identity
