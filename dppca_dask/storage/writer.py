"""Writing matrix stores: a sequential writer for ingestion, and crash-safe appends for streaming data.

Both follow one rule: data chunks first, metadata last. ``StoreWriter`` builds the whole store in a hidden
sibling directory and renames it into place on ``commit``, so a failed or interrupted ingest leaves nothing
behind. ``append_partition`` writes the new rows beyond the committed extents and then rewrites the root
``zarr.json`` (one atomic file replacement), which holds dppca_dask's metadata and, consolidated, the shape and
attributes of every array AnnData reads (:mod:`._commit`), so an interrupted append leaves the store as it was
for every reader.

A single writer per store: zarr loses data when concurrent tasks write unaligned slices of the same array
(dask-zarr spec), and the partition table is read-modify-written. Appends take an exclusive lock file.
What an append writes (the lock file, new chunks, rewritten metadata) gets the modes ingest gives a store: owner-only
unless ``DPPCA_DASK_FILE_MODE=umask``.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import math
import os
import stat
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, cast

import numpy as np
import scipy.sparse as sp
import zarr

from dppca_dask._urls import is_url, local_output
from dppca_dask.errors import InvalidInputError, InvalidParameterError, StoreCorruptError, format_location
from dppca_dask.storage import _format
from dppca_dask.storage._commit import Changes, consolidate, direct_grow, is_consolidated, sync_nodes
from dppca_dask.storage._remote import remote_lock
from dppca_dask.storage._files import (
    FILE_MODE,
    check_replaceable,
    finish_private_tree,
    make_directories,
    make_private_directory,
    mark_owner,
    private_files,
    private_writes,
    remove_stale_temporaries,
    remove_tree,
)
from dppca_dask.storage.store import MatrixStore, Partition, open_matrix, row_norms_of
from dppca_dask.storage.validate import (
    DuplicatePolicy,
    as_csr,
    check_sparse_structure,
    validate_csr_block,
    validate_dense_block,
)

__all__ = ["StoreWriter", "append_partition", "write_matrix"]

log = logging.getLogger(__name__)

Layout = Literal["csr", "dense"]
Schema = Literal["declared", "inferred"]


def _store_dtype(dtype: Any) -> np.dtype[Any]:
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise InvalidParameterError(f"dtype must be float32 or float64; got {dt}")
    return dt


class StoreWriter:
    """Write a new matrix store sequentially, block by block.

    Rows arrive in blocks of any size (``append``); the writer cuts them into partitions of
    ``rows_per_partition`` rows (by default: enough rows for about 128 MB, decided from the first rows seen) and
    writes each partition once. Memory use is bounded by one partition plus the block being appended.

    Parameters
    ----------
    path
        Where the store will be; it appears there only when :meth:`commit` succeeds.
    n_cols
        Number of columns.
    dtype
        Stored value type, ``float32`` or ``float64``.
    layout
        ``"csr"`` (sparse, AnnData csr_matrix encoding) or ``"dense"``.
    rows_per_partition
        Rows per partition; ``None`` picks about ``target_partition_bytes`` per partition.
    on_duplicate
        ``"sum"`` or ``"reject"`` for repeated (row, column) entries.
    overwrite
        Replace an existing store at ``path`` on commit (the old one stays intact until then).
    source
        A JSON-serialisable description of where the data came from, stored in the metadata.
    progress
        Called with the number of rows written after each partition.
    schema
        ``"declared"`` when the shape (the number of columns) was given by the data owner as public input,
        ``"inferred"`` when it was read off the data; recorded in the metadata (see :attr:`MatrixStore.schema`).
    codec
        How chunks are compressed, recorded in the metadata: ``"none"`` (the default: the fastest to read, and
        every out-of-core step re-reads every partition), ``"lz4"`` (Blosc lz4, about 2x smaller on disk) or
        ``"zstd"`` (Blosc zstd, smaller still, slower to read). See :data:`dppca_dask.storage._format.CODECS`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        n_cols: int,
        dtype: Any = np.float64,
        layout: Layout = "csr",
        rows_per_partition: int | None = None,
        on_duplicate: DuplicatePolicy = "sum",
        overwrite: bool = False,
        source: Mapping[str, Any] | None = None,
        target_partition_bytes: int = _format.TARGET_PARTITION_BYTES,
        progress: Callable[[int], None] | None = None,
        schema: Schema = "inferred",
        codec: str = _format.DEFAULT_CODEC,
        nnz_chunk: int | None = None,
    ) -> None:
        self.path = os.path.abspath(local_output(path))
        if codec not in _format.CODECS:
            raise InvalidParameterError(f"codec must be one of {', '.join(map(repr, _format.CODECS))}; got {codec!r}")
        self.codec = codec
        self.nnz_chunk = _format.NNZ_CHUNK if nnz_chunk is None else _format.check_nnz_chunk(nnz_chunk)
        if schema not in ("declared", "inferred"):
            raise InvalidParameterError(f"schema must be 'declared' or 'inferred'; got {schema!r}")
        self.schema: Schema = schema
        if n_cols < 1:
            raise InvalidParameterError(f"n_cols must be >= 1; got {n_cols}")
        if layout not in ("csr", "dense"):
            raise InvalidParameterError(f"layout must be 'csr' or 'dense'; got {layout!r}")
        if rows_per_partition is not None and rows_per_partition < 1:
            raise InvalidParameterError(f"rows_per_partition must be >= 1; got {rows_per_partition}")
        if on_duplicate not in ("sum", "reject"):
            raise InvalidParameterError(f"on_duplicate must be 'sum' or 'reject'; got {on_duplicate!r}")
        if target_partition_bytes < 1:
            raise InvalidParameterError(f"target_partition_bytes must be >= 1; got {target_partition_bytes}")
        if os.path.lexists(self.path):
            if not overwrite:
                raise InvalidParameterError(
                    f"'{self.path}' already exists; choose another output path or pass overwrite=True (--overwrite)"
                )
            check_replaceable(self.path)
        self.n_cols = int(n_cols)
        self.dtype = _store_dtype(dtype)
        self.layout: Layout = layout
        self.rows_per_partition = rows_per_partition
        self.on_duplicate: DuplicatePolicy = on_duplicate
        self.overwrite = overwrite
        self.source = dict(source or {})
        self.target_partition_bytes = int(target_partition_bytes)
        self.progress = progress
        parent, name = os.path.split(self.path)
        make_directories(parent or ".")  # missing parents: owner-only unless configured otherwise
        remove_stale_temporaries(self.path)
        self._tmp = os.path.join(parent, f".{name}.partial-{uuid.uuid4().hex[:12]}")
        make_private_directory(self._tmp)  # owner-only unless configured otherwise
        self._group: zarr.Group | None = zarr.open_group(self._tmp, mode="w-", zarr_format=3)
        mark_owner(self._tmp)  # a later ingest removes it if this process dies without cleaning up
        self._pending: list[Any] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._rows_in = 0
        self._partitions: list[Partition] = []
        self._n_rows = 0
        self._nnz = 0
        self._row_chunk: int | None = None
        self._arrays: dict[str, zarr.Array] = {}
        self._extra: dict[str, Any] = {}
        self._closed = False

    # ------------------------------------------------------------------------------------------- public API
    def __enter__(self) -> StoreWriter:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None or not self._closed:
            self.abort()

    @property
    def nnz_written(self) -> int:
        """Stored entries of the partitions written so far."""
        return self._nnz

    @property
    def n_rows(self) -> int:
        """Rows received so far."""
        return self._rows_in

    def append(self, block: Any, *, source: object | None = None) -> None:
        """Validate a block of rows and queue it; full partitions are written as soon as they are complete."""
        self._check_open()
        if sp.issparse(block):
            block = block.toarray() if self.layout == "dense" else as_csr(block)
        else:
            block = np.asarray(block)
        if self._row_chunk is None and self.rows_per_partition is not None:
            self._create_arrays(self.rows_per_partition)  # fixes the (possibly rounded) partition size
        rpp = self.rows_per_partition if self._row_chunk is not None else None
        rows_in = int(block.shape[0]) if block.ndim == 2 else 0
        if rpp is not None and rows_in > rpp - self._rows_in % rpp:
            # Validate each partition's rows separately, so that errors name the right partition.
            cuts = [0, *range(rpp - self._rows_in % rpp, rows_in, rpp), rows_in]
            for start, stop in zip(cuts[:-1], cuts[1:]):
                self.append(block[start:stop], source=source)
            return
        partition = self._rows_in // rpp if rpp is not None else len(self._partitions)
        if self.layout == "csr":
            if not sp.issparse(block):
                block = sp.csr_array(validate_dense_block(block, n_cols=self.n_cols, first_row=self._rows_in,
                                                          partition=partition, source=source))
            checked = validate_csr_block(
                block,
                n_cols=self.n_cols,
                on_duplicate=self.on_duplicate,
                first_row=self._rows_in,
                partition=partition,
                source=source,
            )
            checked = _cast(checked, self.dtype, first_row=self._rows_in, partition=partition, source=source)
            nbytes = checked.nnz * (self.dtype.itemsize + 4) + checked.shape[0] * 16
        else:
            checked = validate_dense_block(
                block, n_cols=self.n_cols, first_row=self._rows_in, partition=partition, source=source
            )
            checked = _cast(checked, self.dtype, first_row=self._rows_in, partition=partition, source=source)
            nbytes = checked.shape[0] * (self.n_cols * self.dtype.itemsize + 8)
        rows = int(checked.shape[0])
        if rows == 0:
            return
        self._pending.append(checked)
        self._pending_rows += rows
        self._pending_bytes += nbytes
        self._rows_in += rows
        self._flush(final=False)

    def set_attribute(self, key: str, value: Any) -> None:
        """Add a JSON-serialisable entry to the store metadata (e.g. id-map descriptions)."""
        self._check_open()
        self._extra[key] = value

    def write_array(self, name: str, values: np.ndarray | Sequence[Any]) -> None:
        """Store an auxiliary 1-D array beside the matrix (e.g. ``obs_ids``/``var_ids`` id maps)."""
        self._check_open()
        assert self._group is not None
        arr = np.asarray(values)
        parent, key = self._group, name
        if name in _format.ID_MAPS:  # the index of AnnData's obs or var dataframe (see _format)
            axis, key = _format.ID_MAPS[name].split("/")
            parent = self._group.require_group(axis)
        encoding = _format.array_encoding(arr.dtype)
        if arr.dtype.kind in "OU":
            arr = arr.astype(str)
            out = parent.create_array(key, shape=arr.shape, dtype=str, chunks=(max(min(arr.size, 2**20), 1),),
                                      attributes=dict(encoding))
        else:
            out = parent.create_array(
                key, shape=arr.shape, dtype=arr.dtype, chunks=(max(min(arr.size, 2**20), 1),),
                compressors=_format.compressors(self.codec), attributes=dict(encoding),
            )
        if arr.size:
            out[:] = arr

    def commit(self) -> MatrixStore:
        """Write the remaining rows and the metadata, and move the store into place. Returns the opened store."""
        self._check_open()
        self._flush(final=True)
        if self._row_chunk is None:  # no rows at all: an empty matrix
            self._create_arrays(self.rows_per_partition or 1)
        group = self._group
        assert group is not None
        shape = [self._n_rows, self.n_cols]
        if self.layout == "csr":
            group["X"].attrs.update({**_format.CSR_ENCODING, "shape": shape})
        _format.write_annotations(group, self._n_rows, self.n_cols)
        meta = {
            "format_version": _format.FORMAT_VERSION,
            "layout": self.layout,
            "n_rows": self._n_rows,
            "n_cols": self.n_cols,
            "nnz": self._nnz,
            "dtype": str(self.dtype),
            "partitions": [p.to_json() for p in self._partitions],
            "store_id": uuid.uuid4().hex,
            "generation": 0,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "source": self.source,
            "on_duplicate": self.on_duplicate,
            "schema": self.schema,
            "rows_per_partition": self.rows_per_partition,
            "nnz_chunk": self.nnz_chunk,
            "row_chunk": self._row_chunk,
            "codec": self.codec,
            **self._extra,
        }
        group.attrs.update({_format.ATTR_KEY: meta})
        consolidate(group)  # the nodes' metadata in the root document too: later appends' commit point
        self._group = None
        self._closed = True
        finish_private_tree(self._tmp)
        if os.path.lexists(self.path):
            if not self.overwrite:
                shutil.rmtree(self._tmp, ignore_errors=True)
                raise InvalidParameterError(
                    f"'{self.path}' appeared while writing; choose another output path or pass overwrite=True"
                )
            try:
                check_replaceable(self.path)
            except InvalidParameterError:
                shutil.rmtree(self._tmp, ignore_errors=True)
                raise
            trash = f"{self._tmp}.old"
            os.replace(self.path, trash)
            os.replace(self._tmp, self.path)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(self._tmp, self.path)
        log.info("wrote store %s: %d partitions", self.path, len(self._partitions))
        return open_matrix(self.path)

    def abort(self) -> None:
        """Discard everything written so far; the destination path is left untouched.

        Safe after an interruption (Ctrl-C, SIGTERM): zarr's pending asynchronous writes are waited for first, so
        that none of them recreates a chunk file after the temporary directory is removed.
        """
        if not self._closed:
            self._closed = True
            self._group = None
        remove_tree(self._tmp)

    # ---------------------------------------------------------------------------------------------- internals
    def _check_open(self) -> None:
        if self._closed:
            raise InvalidParameterError("this StoreWriter is already committed or aborted; create a new one")

    def _flush(self, *, final: bool) -> None:
        if self.rows_per_partition is None:
            if not final and self._pending_bytes < self.target_partition_bytes:
                return
            per_row = self._pending_bytes / max(self._pending_rows, 1)
            rows = max(int(self.target_partition_bytes // max(per_row, 1.0)), 1)
            self.rows_per_partition = rows if not final or self._pending_bytes >= self.target_partition_bytes \
                else max(self._pending_rows, 1)
        rpp = self.rows_per_partition
        if self._row_chunk is None:
            rpp = self._create_arrays(rpp)
        while self._pending_rows >= rpp or (final and self._pending_rows > 0):
            take = min(rpp, self._pending_rows)
            block = self._take(take)
            self._write_partition(block)

    def _take(self, rows: int) -> Any:
        out: list[Any] = []
        need = rows
        while need:
            head = self._pending[0]
            n = int(head.shape[0])
            if n <= need:
                out.append(self._pending.pop(0))
                need -= n
            else:
                out.append(head[:need])
                self._pending[0] = head[need:]
                need = 0
        self._pending_rows -= rows
        total = sum(self._block_bytes(b) for b in self._pending)
        self._pending_bytes = total
        if self.layout == "csr":
            return sp.csr_array(sp.vstack(out, format="csr")) if len(out) > 1 else sp.csr_array(out[0])
        return np.concatenate(out, axis=0) if len(out) > 1 else out[0]

    def _block_bytes(self, block: Any) -> int:
        if self.layout == "csr":
            return int(block.nnz * (self.dtype.itemsize + 4) + block.shape[0] * 16)
        return int(block.shape[0] * (self.n_cols * self.dtype.itemsize + 8))

    def _create_arrays(self, rpp: int) -> int:
        """Create the arrays once the partition size is known; returns the (possibly rounded) partition size."""
        group = self._group
        assert group is not None
        if self.layout == "csr":
            if rpp > _format.MAX_ROW_CHUNK:
                rpp = math.ceil(rpp / _format.LARGE_ROW_CHUNK) * _format.LARGE_ROW_CHUNK
                row_chunk = _format.LARGE_ROW_CHUNK
            else:
                row_chunk = rpp
            self.rows_per_partition = rpp
            x = group.create_group("X", attributes={**_format.CSR_ENCODING, "shape": [0, self.n_cols]})
            # One index type for column indices and row pointers, as scipy (and scikit-learn's and scanpy's sparse
            # kernels, on AnnData's view of the store) want: 32-bit while the width and the entries fit, the row
            # pointers widened to 64 bits once the entries pass 2**31 - 1 (:meth:`_widen_indptr`).
            index_dtype = np.int32 if self.n_cols <= _format.INT32_MAX else np.int64
            self._arrays["data"] = x.create_array(
                "data", shape=(0,), dtype=self.dtype, chunks=(self.nnz_chunk,), fill_value=np.nan,
                compressors=_format.compressors(self.codec),
            )
            self._arrays["indices"] = x.create_array(
                "indices", shape=(0,), dtype=index_dtype, chunks=(self.nnz_chunk,), fill_value=-1,
                compressors=_format.compressors(self.codec),
            )
            self._arrays["indptr"] = x.create_array(
                "indptr", shape=(1,), dtype=index_dtype, chunks=(row_chunk,), fill_value=-1,
                compressors=_format.compressors(self.codec),
            )
            self._arrays["indptr"][0:1] = np.zeros(1, dtype=index_dtype)
        else:
            row_bytes = self.n_cols * self.dtype.itemsize
            row_chunk = max(1, min(rpp, _format.DENSE_CHUNK_BYTES // max(row_bytes, 1)))
            rpp = math.ceil(rpp / row_chunk) * row_chunk
            self.rows_per_partition = rpp
            self._arrays["X"] = group.create_array(
                "X", shape=(0, self.n_cols), dtype=self.dtype, chunks=(row_chunk, self.n_cols), fill_value=np.nan,
                compressors=_format.compressors(self.codec), attributes=dict(_format.DENSE_ENCODING),
            )
        self._arrays["row_norms"] = group.require_group("obs").create_array(
            "row_norms", shape=(0,), dtype=np.float64, chunks=(row_chunk,), fill_value=np.nan,
            compressors=_format.compressors(self.codec), attributes=dict(_format.DENSE_ENCODING),
        )
        self._row_chunk = row_chunk
        return rpp

    def _widen_indptr(self) -> None:
        """Rewrite the 32-bit row pointers as 64-bit ones (the entries pass 2**31 - 1; the store is not in place
        yet, so no reader sees the change)."""
        old = self._arrays["indptr"]
        values = np.asarray(old[:], dtype=np.int64)
        assert self._group is not None
        group = cast(zarr.Group, self._group["X"])
        new = group.create_array("indptr", shape=values.shape, dtype=np.int64, chunks=old.chunks, fill_value=-1,
                                 compressors=_format.compressors(self.codec), overwrite=True)
        new[:] = values
        self._arrays["indptr"] = new

    def _write_partition(self, block: Any) -> None:
        check_partition_count(len(self._partitions) + 1, rows_per_partition=self.rows_per_partition,
                              source=self.path)
        if self.layout == "csr" and self._arrays["indptr"].dtype == np.int32 \
                and self._nnz + int(block.nnz) > _format.INT32_MAX:
            self._widen_indptr()
        part = _write_rows(self._arrays, self.layout, block, self._n_rows, self._nnz, len(self._partitions), None,
                           grow=direct_grow)
        self._partitions.append(part)
        self._n_rows, self._nnz = part.row_stop, self._nnz + part.nnz
        if self.progress is not None:
            self.progress(self._n_rows)


#: Partitions a store may have: each is a task of every step (scheduling costs grow with the count), and a partition
#: table past this is a mistake (``--rows-per-partition 1``) rather than a layout.
MAX_PARTITIONS = 10_000


def check_partition_count(count: int, *, rows_per_partition: int | None, source: object) -> None:
    """Refuse a store of more than :data:`MAX_PARTITIONS` partitions (before writing when the count is known)."""
    if count > MAX_PARTITIONS:
        given = f"rows_per_partition={rows_per_partition} " if rows_per_partition is not None else ""
        raise InvalidParameterError(
            f"'{source}' would have {count} partitions with {given}(at most {MAX_PARTITIONS}); raise "
            "rows_per_partition (--rows-per-partition), or leave it unset for partitions of about 128 MB"
        )


def _cast(block: Any, dtype: np.dtype[Any], *, first_row: int, partition: int | None, source: object | None) -> Any:
    """Convert a validated block's values to the stored dtype; values too large for float32 are an error."""
    values = block.data if sp.issparse(block) else block
    with np.errstate(over="ignore"):
        cast = values.astype(dtype, copy=False)
    if cast is not values and cast.size and not np.isfinite(cast).all():
        pos = int(np.flatnonzero(~np.isfinite(cast.ravel()))[0])
        if sp.issparse(block):
            row = first_row + int(np.searchsorted(block.indptr, pos, side="right")) - 1
            col = int(block.indices[pos])
        else:
            row, col = first_row + pos // block.shape[1], pos % block.shape[1]
        where = format_location(source=source, partition=partition, row=row)
        raise InvalidInputError(
            f"value {float(values.ravel()[pos])!r} at {where} (column {col}) does not fit in {dtype} (largest "
            f"{np.finfo(dtype).max:.4g}); store it as float64 (dtype=float64, --dtype float64) or rescale the data",
            source=source,
            partition=partition,
            row=row,
        )
    if sp.issparse(block):
        return sp.csr_array((cast, block.indices, block.indptr), shape=block.shape)
    return cast


def _write_rows(
    arrays: dict[str, zarr.Array],
    layout: str,
    block: Any,
    row0: int,
    nnz0: int,
    index: int,
    timestamp: float | None,
    *,
    grow: Callable[[zarr.Array, tuple[int, ...]], zarr.Array],
) -> Partition:
    """Write one partition's rows after the given extents and return its table entry. ``grow`` gives each array's
    handle at its new length (``arrays`` is updated with them): :func:`direct_grow` for a new store,
    :meth:`Changes.grow` for an append, whose arrays' stored shapes wait for its commit."""
    rows = int(block.shape[0])
    norms = row_norms_of(block)
    if layout == "csr":
        nnz = int(block.nnz)
        for name, length in (("data", nnz0 + nnz), ("indices", nnz0 + nnz), ("indptr", row0 + rows + 1)):
            arrays[name] = grow(arrays[name], (length,))
        if nnz:
            arrays["data"][nnz0 : nnz0 + nnz] = block.data
            arrays["indices"][nnz0 : nnz0 + nnz] = block.indices.astype(arrays["indices"].dtype, copy=False)
        pointers = block.indptr[1:].astype(np.int64) + nnz0
        arrays["indptr"][row0 + 1 : row0 + rows + 1] = pointers.astype(arrays["indptr"].dtype, copy=False)
        stop = nnz0 + nnz
    else:
        nnz = int(np.count_nonzero(block))
        arrays["X"] = grow(arrays["X"], (row0 + rows, int(block.shape[1])))
        arrays["X"][row0 : row0 + rows] = block
        stop = 0
    arrays["row_norms"] = grow(arrays["row_norms"], (row0 + rows,))
    arrays["row_norms"][row0 : row0 + rows] = norms
    start = nnz0 if layout == "csr" else 0
    return Partition(index, row0, row0 + rows, start, stop if layout == "csr" else nnz, timestamp)


def write_matrix(
    path: str | os.PathLike[str],
    matrix: Any,
    *,
    rows_per_partition: int | None = None,
    dtype: Any = None,
    layout: Layout | None = None,
    on_duplicate: DuplicatePolicy = "sum",
    overwrite: bool = False,
    source: Mapping[str, Any] | None = None,
    schema: Schema = "inferred",
    codec: str = _format.DEFAULT_CODEC,
    nnz_chunk: int | None = None,
) -> MatrixStore:
    """Write an in-memory scipy sparse matrix or numpy array to a new store and open it.

    ``layout`` defaults to ``"csr"`` for sparse input and ``"dense"`` for numpy input; ``dtype`` defaults to the
    input's float type (float32 stays float32, everything else becomes float64). ``schema="declared"`` records
    that the matrix's number of columns is public input (see :attr:`MatrixStore.schema`); ``codec`` is the
    compression of the chunks and ``nnz_chunk`` the entries per chunk of a sparse store's arrays (see
    :class:`StoreWriter`).
    """
    if layout is None:
        layout = "csr" if sp.issparse(matrix) else "dense"
    if not sp.issparse(matrix):
        matrix = np.asarray(matrix)
    else:  # row slices below need CSR; COO duplicates are kept for the validation
        check_sparse_structure(matrix, source=(source or {}).get("path"))  # before scipy slices or converts it
        if matrix.format != "csr":
            matrix = as_csr(matrix)
    if matrix.ndim != 2:
        raise InvalidInputError(f"expected a 2-D matrix; got {matrix.ndim} dimensions")
    if dtype is None:
        dtype = np.float32 if matrix.dtype == np.float32 else np.float64
    step = rows_per_partition or max(int(matrix.shape[0]), 1)
    with StoreWriter(
        path,
        n_cols=int(matrix.shape[1]),
        dtype=dtype,
        layout=layout,
        rows_per_partition=rows_per_partition,
        on_duplicate=on_duplicate,
        overwrite=overwrite,
        source=dict(source or {"kind": "in-memory", "type": type(matrix).__name__}),
        schema=schema,
        codec=codec,
        nnz_chunk=nnz_chunk,
    ) as writer:
        name = (source or {}).get("path")
        for start in range(0, int(matrix.shape[0]), step):
            writer.append(matrix[start : start + step], source=name)
        return writer.commit()


# ------------------------------------------------------------------------------------------------- appending
def append_lock_path(path: str) -> str:
    """The store's append lock file: beside the store (``.NAME.append.lock``), where ingest and append keep their
    temporaries, not inside it, where AnnData's reader warned about an object zarr does not know. From the store's
    real path, so that every path to one store (a symbolic link among them) takes the same lock."""
    parent, name = os.path.split(os.path.realpath(path))
    return os.path.join(parent, f".{name}.append.lock")


@contextlib.contextmanager
def _append_lock(path: str, storage_options: Mapping[str, Any] | None = None) -> Iterator[None]:
    """Hold the store's append lock; what is written meanwhile gets the store's modes (:func:`private_writes`, inside
    the lock: its walks see no other append's writes).

    A store appended to by an earlier release has its lock inside (``NAME/.append.lock``): while that file exists it
    is taken too, after this one (as it is, without changing its mode), so that appends by both releases take turns.
    An earlier release appending to a store that has no such file yet would create it after this one looked: every
    process appending to one store must then run this release or a later one (docs/guide/files.md)."""
    from filelock import FileLock  # portable (fcntl is POSIX-only)

    if is_url(path):  # object storage: a lock object, and the objects' access is the bucket's
        with remote_lock(path, storage_options):
            yield
        return
    outer = append_lock_path(path)
    legacy = os.path.join(path, ".append.lock")
    with FileLock(outer, mode=FILE_MODE) if private_files() else FileLock(outer):
        with _existing_lock(FileLock, legacy):
            with private_writes(path):
                yield


def _existing_lock(lock_type: Any, path: str) -> Any:
    """``path``'s lock, with the mode the file has (some filelock releases reset it to their ``mode`` on every
    acquisition, which would lock out another user's appender), or no lock when the file does not exist."""
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return contextlib.nullcontext()
    return lock_type(path, mode=mode)


def _open_for_append(store: MatrixStore, group: zarr.Group | None = None) -> dict[str, zarr.Array]:
    group = store.open_group("r+") if group is None else group
    names = ("data", "indices", "indptr") if store.layout == "csr" else ()
    arrays: dict[str, zarr.Array] = {n: group[f"X/{n}"] for n in names}  # type: ignore[misc]
    if store.layout == "dense":
        arrays["X"] = group["X"]  # type: ignore[assignment]
    arrays["row_norms"] = group[_format.locate(group, _format.ROW_NORMS) or _format.ROW_NORMS]  # type: ignore[assignment]
    ids = _format.locate(group, _format.ID_MAPS["obs_ids"])
    if ids is not None:
        arrays["obs_ids"] = group[ids]  # type: ignore[assignment]
    if "labels" in group:
        arrays["labels"] = group["labels"]  # type: ignore[assignment]
    return arrays


def _prepare(store: MatrixStore) -> zarr.Group:
    """The store's root opened for an append (under the lock), consolidated (see :mod:`._commit`): a consolidated
    store's nodes brought up to their consolidated metadata (an append killed after its commit); a store of an
    earlier release cut back to its committed extents (one of its appends interrupted), then consolidated."""
    group = store.open_group("r+")
    if is_consolidated(group):
        if sync_nodes(group):
            log.info("store %s: brought the nodes' metadata files up to the committed metadata", store.path)
        return group
    _trim(store, _open_for_append(store, group))
    return consolidate(group)


def _trim(store: MatrixStore, arrays: Mapping[str, zarr.Array]) -> None:
    """Cut arrays back to the committed extents (after an interrupted append of a store that is not consolidated,
    written by an earlier release) and restore X's shape attribute."""
    if store.layout == "csr":
        extents = {"data": store.nnz, "indices": store.nnz, "indptr": store.n_rows + 1, "row_norms": store.n_rows}
    else:
        extents = {"row_norms": store.n_rows}
        if arrays["X"].shape[0] != store.n_rows:
            arrays["X"].resize((store.n_rows, store.n_cols))
    for name in ("obs_ids", "labels"):  # one entry per row (shorter: written before they were kept; left alone)
        if name in arrays and arrays[name].shape[0] > store.n_rows:
            extents[name] = store.n_rows
    for name, length in extents.items():
        if arrays[name].shape[0] != length:
            log.warning("store %s: trimming '%s' from %d to the committed %d entries (an earlier append did not "
                        "finish)", store.path, name, arrays[name].shape[0], length)
            arrays[name].resize((length,))
    if store.layout == "csr":
        x = store.open_group("r+")["X"]
        if list(cast(list[int], x.attrs.get("shape", []))) != [store.n_rows, store.n_cols]:
            x.attrs.update({"shape": [store.n_rows, store.n_cols]})


def _commit_metadata(store: MatrixStore, changes: Changes, partitions: Sequence[Partition], n_rows: int,
                     nnz: int) -> None:
    """The commit point of an append: X's shape attribute, the ``obs`` dataframe, every array's new shape and the
    root metadata, all in the root ``zarr.json`` (one atomic file write; one PUT of ``zarr.json`` in object storage):
    both AnnData's view and dppca_dask's change at once."""
    group = changes.group
    if store.layout == "csr":
        changes.set_attributes(group["X"], {"shape": [n_rows, store.n_cols]})
    _format.write_annotations(group, n_rows, store.n_cols, changes)
    meta = dict(group.attrs[_format.ATTR_KEY])  # type: ignore[arg-type]
    meta.update(
        {
            "n_rows": n_rows,
            "nnz": nnz,
            "partitions": [p.to_json() for p in partitions],
            "generation": store.generation + 1,
        }
    )
    changes.commit({_format.ATTR_KEY: meta})


def append_partition(
    path: str | os.PathLike[str],
    block: Any,
    *,
    timestamp: float | _dt.datetime | None = None,
    on_duplicate: DuplicatePolicy | None = None,
    row_ids: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> MatrixStore:
    """Append rows to a store as one new partition (several if the block is larger than a partition).

    New chunks are written first, beyond the arrays' committed shapes, and the metadata last, in one write of the
    root ``zarr.json`` that holds both dppca_dask's metadata and every array's shape (:mod:`._commit`): if the
    process dies or an error occurs before it, the store reads exactly as before, through dppca_dask as through
    ``anndata.read_zarr``; after it, both read the grown store.

    Parameters
    ----------
    path
        A dppca_dask store.
    block
        Rows to add: a scipy sparse matrix (CSR stores) or a 2-D array, with the store's number of columns.
    timestamp
        Optional time of these rows (POSIX seconds or an aware ``datetime``), kept in the partition table for
        time-windowed analyses.
    on_duplicate
        Policy for duplicate entries; defaults to the policy the store was ingested with.
    row_ids
        The new rows' ids (one per row, of the kind of the store's): required when the store maps its rows to ids
        (``obs_ids``, a Parquet store: the AnnData view's ``obs_names``), refused otherwise. Written before the
        commit point, as the rows are.
    labels
        The new rows' labels (float64, one per row): required when the store keeps a label per row (``labels``, an
        svmlight store ingested with ``store_labels``), refused otherwise. Written under the lock, before the commit
        point.
    storage_options
        For a store at a URL (``s3://...``): fsspec options of its file system (see :func:`open_matrix`). In object
        storage appends take turns through a lock object beside the store (``.NAME.append.lock``).

    Returns
    -------
    MatrixStore
        The store reopened after the append.
    """
    store = open_matrix(path, storage_options=storage_options)
    storage_options = store.storage_options
    if store.format_version is None:
        raise InvalidParameterError(
            f"'{store.path}' is an AnnData store; appending needs a dppca_dask store: "
            f"`dppca-dask ingest {store.path} --out STORE`"
        )
    if isinstance(timestamp, _dt.datetime):
        if timestamp.tzinfo is None:
            raise InvalidParameterError(f"timestamp must be timezone-aware; got naive {timestamp.isoformat()}")
        timestamp = timestamp.timestamp()
    policy: DuplicatePolicy = on_duplicate or store.metadata.get("on_duplicate", "sum")
    if store.layout == "csr":
        if not sp.issparse(block):
            block = sp.csr_array(validate_dense_block(block, n_cols=store.n_cols, first_row=store.n_rows,
                                                      partition=store.n_partitions, source=store.path))
        checked: Any = validate_csr_block(
            block, n_cols=store.n_cols, on_duplicate=policy, first_row=store.n_rows,
            partition=store.n_partitions, source=store.path,
        )
    else:
        dense = block.toarray() if sp.issparse(block) else block
        checked = validate_dense_block(dense, n_cols=store.n_cols, first_row=store.n_rows,
                                       partition=store.n_partitions, source=store.path)
    checked = _cast(checked, np.dtype(store.dtype), first_row=store.n_rows, partition=store.n_partitions,
                    source=store.path)
    with _append_lock(store.path, storage_options):
        store = open_matrix(store.path, storage_options=storage_options)  # re-read under the lock
        group = _prepare(store)
        arrays = _open_for_append(store, group)
        ids = _checked_row_ids(store, arrays.get("obs_ids"), row_ids, int(checked.shape[0]))
        new_labels = _checked_labels(store, arrays.get("labels"), labels, int(checked.shape[0]))
        _check_pointer_room(store, arrays, checked)
        step = int(store.metadata.get("rows_per_partition") or max(int(checked.shape[0]), 1))
        check_partition_count(store.n_partitions + -(-max(int(checked.shape[0]), 1) // step),
                              rows_per_partition=step, source=store.path)
        partitions = list(store.partitions)
        n_rows, nnz = store.n_rows, store.nnz
        changes = Changes(group)  # nothing a reader sees changes before its commit
        for start in range(0, max(int(checked.shape[0]), 1), step):
            piece = checked[start : start + step]
            part = _write_rows(arrays, store.layout, piece, n_rows, nnz, len(partitions), timestamp,
                               grow=changes.grow)
            partitions.append(part)
            n_rows, nnz = part.row_stop, nnz + part.nnz
        for name, values in (("obs_ids", ids), ("labels", new_labels)):
            if values is not None:
                arrays[name] = changes.grow(arrays[name], (n_rows,))
                arrays[name][store.n_rows:] = values
        _commit_metadata(store, changes, partitions, n_rows, nnz)
    reopened = open_matrix(store.path, storage_options=storage_options)
    if reopened.n_rows != n_rows:
        raise StoreCorruptError(f"append to '{store.path}' did not commit", source=store.path)
    return reopened


def _check_pointer_room(store: MatrixStore, arrays: Mapping[str, zarr.Array], block: Any) -> None:
    """Refuse an append that would take a store with 32-bit row pointers past 2**31 - 1 stored entries (before
    anything is written): the pointers cannot be widened in place under one commit."""
    if store.layout != "csr" or np.dtype(arrays["indptr"].dtype).itemsize > 4:
        return
    if store.nnz + int(block.nnz) > _format.INT32_MAX:
        raise InvalidParameterError(
            f"appending to '{store.path}' would take it past {_format.INT32_MAX} stored entries, the most its 32-bit "
            "row pointers hold; write it anew with 64-bit pointers (`dppca-dask ingest STORE --out NEW`, which widens "
            "them past that count) and append to the new store"
        )


def drop_tail_partitions(path: str | os.PathLike[str], indices: Sequence[int]) -> MatrixStore:
    """Remove the last partitions of a store (``indices``: the partition table's tail), as the first of the two
    commits that replace a day: one write of the root metadata under the append lock, the arrays' shapes cut back
    in it (:mod:`._commit`). The store then reads as if those partitions had never been appended."""
    store = open_matrix(path)
    with _append_lock(store.path):
        store = open_matrix(path)  # re-read under the lock
        wanted = list(range(store.n_partitions - len(indices), store.n_partitions))
        if not indices or sorted(int(i) for i in indices) != wanted or wanted[0] < 1:
            raise InvalidParameterError(
                f"partitions {list(indices)} of '{store.path}' are not the end of its partition table (or are all "
                "of it); only the newest-arrived partitions can be removed"
            )
        kept = list(store.partitions[: wanted[0]])
        n_rows, nnz = kept[-1].row_stop, (kept[-1].nnz_stop if store.layout == "csr" else sum(p.nnz for p in kept))
        group = _prepare(store)
        arrays = _open_for_append(store, group)
        changes = Changes(group)
        lengths = {"row_norms": n_rows, **({"data": nnz, "indices": nnz, "indptr": n_rows + 1}
                                           if store.layout == "csr" else {})}
        for name in ("obs_ids", "labels"):  # one entry per row (shorter: written before they were kept)
            if name in arrays and arrays[name].shape[0] > n_rows:
                lengths[name] = n_rows
        for name, length in lengths.items():
            changes.grow(arrays[name], (length,))
        if store.layout == "dense":
            changes.grow(arrays["X"], (n_rows, store.n_cols))
        _commit_metadata(store, changes, kept, n_rows, nnz)
    return open_matrix(path)


def _checked_row_ids(store: MatrixStore, stored: zarr.Array | None, row_ids: np.ndarray | None,
                     n_new: int) -> np.ndarray | None:
    """The new rows' ids to write after the store's (None: nothing to write), or an error before anything is."""
    if stored is None:
        if row_ids is not None:
            raise InvalidParameterError(f"'{store.path}' has no row ids (obs_ids) to extend; append without row_ids")
        return None
    if int(stored.shape[0]) != store.n_rows:  # an earlier append without ids: the map no longer lines up
        log.warning("store %s: its row ids do not cover its rows (days appended before ids were kept): the AnnData "
                    "view names rows by number, and new rows' ids are not kept", store.path)
        return None
    if row_ids is None:
        raise InvalidParameterError(
            f"'{store.path}' maps its rows to ids (obs_ids, the AnnData view's obs_names) and the appended rows have "
            "none; append a Parquet file with the store's row id column"
        )
    ids = np.asarray(row_ids)
    if ids.shape != (n_new,):
        raise InvalidParameterError(f"row_ids has shape {ids.shape} for {n_new} new rows")
    if (ids.dtype.kind in "iu") != (np.dtype(stored.dtype).kind in "iu"):
        raise InvalidParameterError(
            f"the appended rows' ids are {'integers' if ids.dtype.kind in 'iu' else 'strings'} and "
            f"'{store.path}''s are not; append a file whose row id column has the store's type"
        )
    return ids


def _checked_labels(store: MatrixStore, stored: zarr.Array | None, labels: np.ndarray | None,
                    n_new: int) -> np.ndarray | None:
    """The new rows' labels to write after the store's (None: nothing to write), or an error before anything is."""
    if stored is None:
        if labels is not None:
            raise InvalidParameterError(f"'{store.path}' keeps no labels; append without labels")
        return None
    if labels is None:
        raise InvalidParameterError(
            f"'{store.path}' stores a label per row and the appended rows have none; append a LIBSVM file with labels"
        )
    values = np.asarray(labels, dtype=np.float64)
    if values.shape != (n_new,):
        raise InvalidParameterError(f"labels has shape {values.shape} for {n_new} new rows")
    if int(stored.shape[0]) != store.n_rows:
        raise StoreCorruptError(f"'{store.path}': its labels do not cover its rows; re-ingest it with "
                                "--store-labels", source=store.path)
    return values


def stamp_partitions(path: str | os.PathLike[str], timestamp: float | _dt.datetime, *,
                     storage_options: Mapping[str, Any] | None = None) -> MatrixStore:
    """Set the timestamp of every partition that has none (a new store's: ``ingest(..., timestamp=)``).

    One metadata write under the append lock; partitions already stamped keep their time.
    """
    if isinstance(timestamp, _dt.datetime):
        if timestamp.tzinfo is None:
            raise InvalidParameterError(f"timestamp must be timezone-aware; got naive {timestamp.isoformat()}")
        timestamp = timestamp.timestamp()
    store = open_matrix(path, storage_options=storage_options)
    if store.format_version is None:
        raise InvalidParameterError(f"'{store.path}' is an AnnData store; only a dppca_dask store can be stamped")
    with _append_lock(store.path, store.storage_options):
        store = open_matrix(store.path, storage_options=store.storage_options)
        stamped = [p if p.timestamp is not None else
                   Partition(p.index, p.row_start, p.row_stop, p.nnz_start, p.nnz_stop, float(timestamp))
                   for p in store.partitions]
        group = store.open_group("r+")
        meta = dict(group.attrs[_format.ATTR_KEY])  # type: ignore[arg-type]
        meta["partitions"] = [p.to_json() for p in stamped]
        group.attrs.update({_format.ATTR_KEY: meta})
    return open_matrix(store.path, storage_options=store.storage_options)
