"""On-disk format of a dppca_dask matrix store (format version 1).

A store is a zarr v3 group::

    STORE/                    group; attribute "dppca_dask" holds the metadata below (the commit point)
      X/                      the matrix in AnnData's on-disk encoding:
        data, indices, indptr   csr_matrix (encoding-type "csr_matrix", encoding-version "0.1.0", shape), or
      X                       a dense 2-D array (encoding-type "array", encoding-version "0.2.0")
      obs/                    AnnData's obs dataframe (encoding-type "dataframe"): one entry per row
        row_norms               float64, one L2 norm per row, computed at ingest (a column of obs)
        obs_ids                 optional id map (warehouse ids of the rows, in matrix order): obs's index, or
        _index                  the row numbers as strings (AnnData's default index) when there is no id map
      var/                    AnnData's var dataframe: var_ids (ids of the columns) as its index, else _index

Everything at the root is an element AnnData knows (``X``, ``obs``, ``var``), so ``anndata.read_zarr(STORE)`` opens
a store (row norms appear as ``obs["row_norms"]``, the id maps as ``obs_names`` and ``var_names``). Stores written
before this layout keep ``row_norms``, ``obs_ids`` and ``var_ids`` at the root; readers look for each array at its
current path, then at the old one (:func:`locate`), and appends keep an old store's layout.

The ``dppca_dask`` attribute of the root group is the single source of truth: ``format_version``, ``layout``,
``n_rows``, ``n_cols``, ``nnz``, ``dtype``, ``codec`` (how the arrays' chunks are compressed, :data:`CODECS`; absent in
stores written before it was recorded, which use Blosc lz4), the partition table (row range, nnz range and optional timestamp of each
partition), ``store_id`` (random, assigned at creation) and ``generation`` (incremented by every append). Arrays may
be longer than the committed extents after an interrupted append; readers only look inside the committed extents and
writers trim the rest before writing.

Fill values are chosen so that valid data never contains them (``NaN`` for values and norms, ``-1`` for indices and
``indptr``): zarr returns the fill value for a chunk that is missing on disk, so a reader detects a lost chunk by
checking one element per chunk instead of silently reading it as zeros.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import zarr
import zarr.codecs

from dppca_dask.errors import InvalidParameterError

#: Version of the layout above. Readers refuse other versions.
FORMAT_VERSION = 1
#: Root-group attribute holding the store metadata.
ATTR_KEY = "dppca_dask"

#: Elements per chunk of the 1-D arrays ``data`` and ``indices`` of a store on a local or shared file system (256 Ki
#: elements: 1-2 MiB per chunk). A store records its own size (``nnz_chunk`` in the metadata), which appends keep.
NNZ_CHUNK = 2**18
#: Elements per chunk of ``data`` and ``indices`` of a store written to object storage (``ingest --out s3://...``):
#: every chunk a read touches is one request, which costs client and server time of its own, so fewer, larger
#: objects read faster there (see docs/guide/several-machines.md for the measurements).
OBJECT_NNZ_CHUNK = 2**21
#: Bounds of a chosen ``nnz_chunk``: at least 4 Ki elements (smaller chunks are many tiny files or requests), at most
#: 16 Mi (64-128 MiB per chunk: an append rewrites the last partly filled chunk, and a compressed chunk is decoded
#: whole).
MIN_NNZ_CHUNK = 2**12
MAX_NNZ_CHUNK = 2**24


def check_nnz_chunk(value: Any) -> int:
    """``value`` as a count of elements per chunk of ``data`` and ``indices``, or :class:`InvalidParameterError`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or not MIN_NNZ_CHUNK <= int(value) <= MAX_NNZ_CHUNK:
        raise InvalidParameterError(
            f"nnz_chunk (--nnz-chunk) must be a whole number of entries per chunk from {MIN_NNZ_CHUNK} (2**12) to "
            f"{MAX_NNZ_CHUNK} (2**24); got {value!r}: pass e.g. {NNZ_CHUNK} (the default on a file system) or "
            f"{OBJECT_NNZ_CHUNK} (the default in object storage)")
    return int(value)

#: Largest chunk (in rows) of the per-row arrays ``indptr`` and ``row_norms``.
MAX_ROW_CHUNK = 2**20
#: Rows per chunk of per-row arrays when partitions are larger than ``MAX_ROW_CHUNK``.
LARGE_ROW_CHUNK = 2**18
#: Largest count of stored entries (and width) 32-bit row pointers (and column indices) hold: a store's ``indices``
#: and ``indptr`` are both int32 up to it, as scipy makes them, so that AnnData's view of the store reaches
#: scikit-learn's and scanpy's sparse kernels with one index type; ``indptr`` is int64 beyond it. Stores written
#: before kept int64 ``indptr`` with int32 ``indices``; they are read as they are.
INT32_MAX = 2**31 - 1
#: Target size of a dense chunk in bytes.
DENSE_CHUNK_BYTES = 16 * 2**20

#: Default target size of one row partition (one Dask task) in bytes of stored values, indices and row pointers.
TARGET_PARTITION_BYTES = 128 * 2**20
#: Partitions chosen automatically stay within these bounds (bytes).
MIN_PARTITION_BYTES = 64 * 2**20
MAX_PARTITION_BYTES = 256 * 2**20

CSR_ENCODING = {"encoding-type": "csr_matrix", "encoding-version": "0.1.0"}
DENSE_ENCODING = {"encoding-type": "array", "encoding-version": "0.2.0"}


#: Codecs a store's arrays can be written with (recorded as ``codec`` in the metadata). Measured on a generated store
#: (16.6·10⁶ float32 values and int32 indices per partition, one core, chunks read straight into the result):
#: uncompressed chunks read at page-cache speed, 1.4-2.9x faster than Blosc lz4 with byte shuffle, which takes 2.3x
#: less disk; Blosc zstd takes 2.7x less disk and reads 2-3x slower than lz4
#: (``benchmarks/bench_read_path.py``). Every codec here is read by zarr and AnnData alike.
CODECS = ("none", "lz4", "zstd")
#: Codec of new stores: the fastest to read, since every out-of-core step re-reads every partition.
DEFAULT_CODEC = "none"
#: Codec of stores written before the metadata recorded one.
LEGACY_CODEC = "lz4"


def compressors(codec: str = DEFAULT_CODEC) -> list[zarr.codecs.BloscCodec] | None:
    """zarr compressors of ``codec`` (one of :data:`CODECS`): none, Blosc lz4 or Blosc zstd with byte shuffle."""
    if codec == "none":
        return None
    if codec == "lz4":
        return [zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")]
    if codec == "zstd":
        return [zarr.codecs.BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")]
    raise ValueError(f"unknown codec {codec!r}; expected one of {', '.join(CODECS)}")


DATAFRAME_ENCODING = {"encoding-type": "dataframe", "encoding-version": "0.2.0"}
STRING_ENCODING = {"encoding-type": "string-array", "encoding-version": "0.2.0"}
#: Paths of the per-row and per-column arrays, and where stores written before the AnnData-compatible layout kept
#: them.
ROW_NORMS = "obs/row_norms"
ID_MAPS = {"obs_ids": "obs/obs_ids", "var_ids": "var/var_ids"}
LEGACY_PATHS = {"obs/row_norms": "row_norms", "obs/obs_ids": "obs_ids", "var/var_ids": "var_ids"}
#: Name of AnnData's default index array (row or column numbers as strings).
DEFAULT_INDEX = "_index"
#: Entries of a default index written at a time.
INDEX_CHUNK = 2**20


def locate(group: zarr.Group, path: str) -> str | None:
    """Where the array of ``path`` (e.g. :data:`ROW_NORMS`) is in ``group``: its path, its old path, or None."""
    for candidate in (path, LEGACY_PATHS.get(path)):
        if candidate is not None and candidate in group:
            return candidate
    return None


def array_encoding(dtype: Any) -> dict[str, str]:
    """AnnData's encoding attributes of a 1-D array of ``dtype``."""
    return dict(STRING_ENCODING) if np.dtype(dtype).kind in "OUT" else dict(DENSE_ENCODING)


def write_annotations(group: zarr.Group, n_rows: int, n_cols: int, changes: Any = None) -> None:
    """Write (or extend after an append) the ``obs`` and ``var`` dataframes that make the store an AnnData store.

    Each dataframe's index is its id map when the map has one entry per row (column), else a default index of
    row (column) numbers, extended to ``n_rows`` here. A store in the old layout (arrays at the root) is left
    as it is. With ``changes`` (a :class:`dppca_dask.storage._commit.Changes` of an append), new shapes and
    attributes wait for its commit.
    """
    if "row_norms" in group and "obs" not in group:  # old layout: keep it readable as it was
        return
    for axis, n, ids in (("obs", n_rows, "obs_ids"), ("var", n_cols, "var_ids")):
        frame = cast(zarr.Group, group[axis]) if axis in group else group.create_group(axis)
        if changes is not None:
            meta = changes.node_metadata(f"{axis}/{ids}")
            covers = meta is not None and tuple(meta.shape) == (n,)
        else:
            covers = ids in frame and cast(zarr.Array, frame[ids]).shape == (n,)
        index = ids if covers else DEFAULT_INDEX
        if index == DEFAULT_INDEX:
            _extend_default_index(frame, n, changes)
        columns = ["row_norms"] if axis == "obs" and "row_norms" in frame else []
        attributes = {**DATAFRAME_ENCODING, "_index": index, "column-order": columns}
        if changes is not None:
            if {k: frame.attrs.get(k) for k in attributes} != attributes:
                changes.set_attributes(frame, attributes)
        else:
            frame.attrs.update(attributes)


def _extend_default_index(frame: zarr.Group, n: int, changes: Any = None) -> None:
    if DEFAULT_INDEX in frame:
        array = cast(zarr.Array, frame[DEFAULT_INDEX])
        start = int(array.shape[0])
        if start == n:
            return
        if changes is None:
            array.resize((n,))
        else:
            array = changes.grow(array, (n,))
        if start > n:  # cut back (an interrupted append's leftovers, or a day removed)
            return
    else:
        create = frame.create_array if changes is None else (lambda name, **kw: changes.create(frame, name, **kw))
        array = create(DEFAULT_INDEX, shape=(n,), dtype=str, chunks=(max(min(n, INDEX_CHUNK), 1),),
                       attributes=dict(STRING_ENCODING))
        start = 0
    for lo in range(start, n, INDEX_CHUNK):
        hi = min(lo + INDEX_CHUNK, n)
        array[lo:hi] = np.arange(lo, hi).astype(str)
