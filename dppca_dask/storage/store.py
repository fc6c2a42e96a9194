"""Read access to a matrix store: a lazy, picklable handle whose partitions are read by Dask tasks.

``open_matrix(path)`` reads only metadata. ``MatrixStore.read_partition(i)`` reads one row partition (a
``scipy.sparse.csr_array`` or a dense block) and is meant to run inside a Dask task on a worker; the whole matrix
is never loaded on the client unless ``to_scipy`` is called explicitly for a small store.

The read path of an out-of-core step (``read_partition_with_norms``) streams: chunk files of a store's own layout are
decoded straight into the partition's arrays (:mod:`._chunks`), values are converted to float64 and their rows'
sums of squares taken chunk by chunk while still in cache, the arrays are reused from the previous partition once it
is released, and the operating system is asked to read the next partition ahead. Every check stays: row pointers
against the partition table, one probe per chunk for lost chunks, column indices in range, canonical form, finite
values and norms computed from the values read (never the stored ones). A re-read whose chunk files are all the ones
a checked read of this process opened (:class:`CheckedReads`) skips the two checks that follow from the bytes alone
and cost most (the canonical-form scan, the sums of squares: their norms are kept; the finiteness check rides on the
sums, so it is skipped with them) and runs the others.
"""

from __future__ import annotations

import functools
import json
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np
import scipy.sparse as sp
import zarr

from dppca_dask.errors import (
    DppcaError,
    InvalidInputError,
    InvalidParameterError,
    StoreCorruptError,
    StoreNotFoundError,
    UnsupportedStoreVersionError,
)
from dppca_dask.storage import _format
from dppca_dask.storage._remote import open_group, options_key
from dppca_dask.storage._chunks import ChunkLayout, FileIdentity, chunk_layout, prefetch_range, read_range
from dppca_dask.storage import _remote_chunks
from dppca_dask.storage._read_ahead import ReadAhead
from dppca_dask.storage._remote_chunks import RemoteLayout, remote_layout
from dppca_dask.storage.validate import (
    canonical_csr,
    check_csr_arrays,
    check_row_norms,
    safe_row_norms,
    squared_row_sums,
)

__all__ = ["MatrixStore", "Partition", "open_matrix"]

Layout = Literal["csr", "dense"]


@dataclass(frozen=True, slots=True)
class Partition:
    """One row partition: the unit of work of one Dask task."""

    index: int
    """Position in the partition table."""
    row_start: int
    """First row (inclusive)."""
    row_stop: int
    """Last row (exclusive)."""
    nnz_start: int
    """Offset of the partition's first stored value in ``data``/``indices`` (0 for dense stores)."""
    nnz_stop: int
    """Offset one past the partition's last stored value."""
    timestamp: float | None = None
    """Optional time of the partition (POSIX seconds), set by ``append_partition`` for streaming data."""

    @property
    def n_rows(self) -> int:
        return self.row_stop - self.row_start

    @property
    def nnz(self) -> int:
        return self.nnz_stop - self.nnz_start

    def to_json(self) -> list[Any]:
        return [self.row_start, self.row_stop, self.nnz_start, self.nnz_stop, self.timestamp]


@dataclass(frozen=True, slots=True)
class MatrixStore:
    """A lazy handle on a row-partitioned matrix stored in zarr.

    Cheap to pickle (path and metadata only): send it to Dask tasks, which call :meth:`read_partition`.
    Obtain one with :func:`open_matrix`.
    """

    path: str
    """Filesystem path of the zarr group."""
    layout: Layout
    """``"csr"`` (AnnData csr_matrix encoding) or ``"dense"``."""
    n_rows: int
    n_cols: int
    nnz: int
    """Stored entries (CSR) or nonzero entries (dense)."""
    dtype: str
    """dtype of the stored values (``"float32"`` or ``"float64"``)."""
    partitions: tuple[Partition, ...]
    """The partition table."""
    format_version: int | None
    """Format version of a dppca_dask store; ``None`` for an AnnData store opened directly."""
    store_id: str | None = None
    """Random identifier assigned when the store was created (public; used in result provenance)."""
    generation: int = 0
    """Number of appends since creation."""
    has_row_norms: bool = False
    """Whether row norms were stored at ingest (otherwise they are computed when a partition is read)."""
    matrix_key: str = "X"
    schema: Literal["declared", "inferred"] = "inferred"
    """Whether the shape is public input: ``"declared"`` when the data owner gave the number of columns at ingest
    (``n_features=`` / ``--n-features``; for Parquet the column-id universe, ``column_ids=`` / ``--column-ids``),
    ``"inferred"`` when it was read off the data (largest index, distinct ids, a file's own header). An AnnData store
    opened directly, and a store written before this attribute existed, are ``"inferred"``: nothing records that
    their shape was chosen independently of the data. A private release treats only a declared shape as public."""
    metadata: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    """The full metadata attribute (creation time, source, id maps, chunking)."""
    storage_options: Mapping[str, Any] | None = field(default=None, repr=False, compare=False, hash=False)
    """fsspec options of a store at a URL (``endpoint_url``, ``key``, ``secret``, ...), as given to
    :func:`open_matrix`; they travel with the handle to the workers that read it and are never shown (they may hold
    secrets). ``None``: the scheme's package reads the environment and its configuration files."""

    def __repr__(self) -> str:
        # No data-dependent counts (rows, entries, partitions): a repr ends up in logs and error reports of private
        # runs. The number of columns is shown only when it is public (a declared schema).
        width = f", n_cols={self.n_cols}" if self.schema == "declared" else ""
        return (
            f"MatrixStore(path={self.path!r}, layout={self.layout!r}{width}, dtype={self.dtype!r}, "
            f"schema={self.schema!r}, format_version={self.format_version!r}, store_id={self.store_id!r}, "
            f"generation={self.generation})"
        )

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, self.n_cols)

    @property
    def _options(self) -> str:
        return options_key(self.storage_options)

    def open_group(self, mode: str = "r") -> zarr.Group:
        """The store's zarr group (local or at its URL, with its storage options)."""
        return open_group(self.path, self.storage_options, mode=mode)

    @property
    def n_partitions(self) -> int:
        return len(self.partitions)

    @property
    def fingerprint(self) -> str:
        """Identifies this version of the store without revealing anything about its contents.

        It is the random ``store_id`` and the append ``generation``; for an AnnData store opened directly, a hash
        of its real path (links resolved) and metadata files' modification times. It never depends on data values
        or counts.
        """
        if self.store_id is not None:
            return f"{self.store_id}:{self.generation}"
        stamp = _foreign_stamp(self.path, self.matrix_key)
        return f"anndata:{stamp}"

    # ------------------------------------------------------------------------------------------------ reading
    def read_partition(self, index: int, *, dtype: np.dtype[Any] | type | None = None) -> Any:
        """Read partition ``index``: a canonical ``scipy.sparse.csr_array`` (CSR) or a 2-D ``numpy.ndarray`` (dense).

        Every read checks the partition before anything trusts it: the CSR structure (row pointers monotone and in
        bounds, column indices in range, consistent lengths) before any scipy routine touches it, and finite values.
        CSR blocks come back canonical (column indices sorted, duplicate entries summed), whatever wrote the store,
        so that the norms a kernel clips with are the norms of the values it multiplies. Values are converted to
        ``dtype`` first when given (kernels use float64).

        Raises
        ------
        StoreCorruptError
            A chunk is missing or damaged, or the structure is malformed; the message names the partition.
        InvalidInputError
            A NaN or infinite value in an AnnData store opened directly (a dppca_dask store never holds one: there
            it is damage, :class:`StoreCorruptError`).
        """
        part = self._partition(index)
        block = self._read_raw(part, dtype)
        self._check_finite(part, block)
        if self.layout == "csr":
            block = canonical_csr(block)
        return block

    def read_partition_with_norms(self, index: int, *, dtype: np.dtype[Any] | type | None = None
                                  ) -> tuple[Any, np.ndarray]:
        """Partition ``index`` as :meth:`read_partition` gives it, with its checked row norms
        (:meth:`read_checked_norms`), in fewer passes over the values: what a worker calls for every step.

        The finiteness check rides on the norms: a NaN or infinite value makes its row's sum of squares non-finite,
        and only then are the values scanned again (to name the value, or to tell an overflowing norm from a
        non-finite value). The checks and their errors are those of :meth:`read_partition` and
        :meth:`read_checked_norms`. A read whose chunk files are all unchanged since a read of this process that
        passed them (:data:`CHECKED`) returns that read's norms and skips the canonical-form scan and the sums of
        squares (and so the finiteness check); the row pointers are checked and the column indices bounded during
        every read.
        """
        part = self._partition(index)
        if self.layout != "csr":
            raw = self._read_raw(part, dtype)
            self._check_finite(part, raw)
            return raw, self.read_checked_norms(index, raw)
        # The partition's whole extent, not its position: an AnnData store's partition table is the reader's choice
        # (``rows_per_partition``), and another table's partition at that position may read the same chunk files.
        key = (self.path, self.fingerprint, part.row_start, part.row_stop, part.nnz_start, part.nnz_stop,
               np.dtype(self.dtype if dtype is None else dtype).str)
        known = CHECKED.get(key)
        read = _Read(known)
        # Squares during the read, unless the partition was checked before (then only if its files changed since).
        squares = _SquaredRowSums() if known is None else None
        raw = self._read_raw(part, dtype, squares, read)
        if read.unchanged and known is not None:
            CHECKED.hits += 1
            return raw, known.norms.copy()
        block = canonical_csr(raw)
        # Sums of the values as read are the canonical rows' sums when nothing had to be summed or sorted.
        sums = squares.result() if squares is not None and block is raw else squared_row_sums(block)
        if np.isfinite(sums).all():
            norms = np.sqrt(sums)
            if block is raw:
                CHECKED.put(key, read.seen, norms, started=read.started)
            return block, norms
        self._check_finite(part, raw)  # raises on a NaN or infinite value
        return block, self.read_checked_norms(index, block)  # raises on a norm that overflows

    def read_checked_norms(self, index: int, block: Any) -> np.ndarray:
        """L2 norms of the rows of ``block`` (partition ``index`` as read), refusing rows whose norm overflows.

        These are the norms used for clipping: computed from the values the kernels multiply, never read from the
        stored ``row_norms`` (which a modified store may leave stale).
        """
        part = self._partition(index)
        error = StoreCorruptError if self.format_version is not None else InvalidInputError
        return check_row_norms(safe_row_norms(block), source=self.path, partition=part.index,
                               first_row=part.row_start, error=error)

    def read_row_norms(self, index: int, *, block: Any | None = None) -> np.ndarray:
        """The row norms stored at ingest for partition ``index`` (float64), for ``info --check``.

        Private computations never use these (see :meth:`read_checked_norms`). For an AnnData store opened
        directly, which stores none, they are computed from ``block`` (or from a fresh read of the partition).
        """
        part = self._partition(index)
        if self.has_row_norms:
            try:
                key = _format.locate(self.open_group(), _format.ROW_NORMS) or _format.ROW_NORMS
                norms = np.asarray(_open(self.path, key, self.fingerprint, self._options)[part.row_start :
                                                                                           part.row_stop])
            except Exception as exc:
                raise StoreCorruptError(
                    f"cannot read the row norms of partition {part.index} of store '{self.path}': {exc}; "
                    "the store is damaged, re-ingest it from its source",
                    source=self.path,
                    partition=part.index,
                ) from exc
            if norms.size and not np.isfinite(norms).all():
                bad = int(np.flatnonzero(~np.isfinite(norms))[0])
                row = part.row_start + bad
                what = "missing (a chunk of 'row_norms' is absent)" if np.isnan(norms[bad]) else "not finite"
                raise StoreCorruptError(
                    f"the stored row norm of row {row} (partition {part.index}) in store '{self.path}' is {what}; "
                    "re-ingest the store from its source",
                    source=self.path,
                    partition=part.index,
                    row=row,
                )
            return norms.astype(np.float64, copy=False)
        if block is None:
            block = self.read_partition(index)
        return row_norms_of(block)

    def _read_raw(self, part: Partition, dtype: np.dtype[Any] | type | None = None,
                  squares: _SquaredRowSums | None = None, read: _Read | None = None) -> Any:
        """The partition as stored (structure checked, not canonicalised), values converted to ``dtype`` when given
        (and their squared row sums accumulated into ``squares``, CSR only; ``read`` collects the chunk files'
        identities); read errors become StoreCorruptError."""
        try:
            if self.layout == "csr":
                block = self._read_csr(part, dtype, squares, read)
            else:
                block = self._read_dense(part)
                block = block if dtype is None else block.astype(dtype, copy=False)
        except Exception as exc:
            self._check_not_replaced(part)  # a read during a replacement is said to be one, not damage
            if isinstance(exc, DppcaError):  # (damage named as such, a setting, the local disk cache)
                raise
            from dppca_dask._urls import storage_error  # zarr/codec errors on damaged chunks

            # a connection that failed, lost credentials: not damage
            reached = storage_error(exc, self.path, partition=part.index)
            if reached is not exc:
                raise reached from None
            raise StoreCorruptError(
                f"cannot read partition {part.index} of store '{self.path}': {type(exc).__name__}: {exc}; the store "
                "is damaged, re-ingest it from its source",
                source=self.path,
                partition=part.index,
            ) from exc
        if self.layout != "csr":  # a CSR partition's fetch ended with the check (:meth:`_fetch_remote`)
            self._check_not_replaced(part)
        return block

    def verify_partition(self, index: int) -> None:
        """Check every chunk of partition ``index`` (``dppca-dask info --check``); raise on the first problem.

        Beyond what every read checks (structure, finite values, norms that fit in float64), a dppca_dask store must
        hold exactly what ingest wrote: canonical CSR (ingest sums or refuses duplicates) and stored row norms equal
        to the norms of the stored values. Anything else means the store was modified or damaged after ingest.

        Raises
        ------
        StoreCorruptError
            Naming the partition (and the row where one is known) and how to fix it.
        InvalidInputError
            Invalid values in an AnnData store opened directly.
        """
        part = self._partition(index)
        if self.layout == "csr" and self.format_version is not None:
            raw = self._read_raw(part)
            if not raw.has_canonical_format:
                raise StoreCorruptError(
                    f"partition {part.index} of store '{self.path}' is damaged: its column indices are unsorted or "
                    "repeated (ingest writes them sorted and unique); re-ingest the store from its source",
                    source=self.path,
                    partition=part.index,
                )
        block = self.read_partition(index, dtype=np.float64)
        norms = self.read_checked_norms(index, block)
        if self.has_row_norms:
            stored = self.read_row_norms(index)
            tolerance = 1e-5 if self.dtype == "float32" else 1e-9
            bad = ~np.isclose(stored, norms, rtol=tolerance, atol=0.0)
            if stored.shape != norms.shape or bad.any():
                row = part.row_start + (int(np.argmax(bad)) if stored.shape == norms.shape else 0)
                raise StoreCorruptError(
                    f"partition {part.index} of store '{self.path}' is damaged: the stored row norm of row {row} "
                    "does not match the row's values (the values or the norms were changed after ingest); "
                    "re-ingest the store from its source",
                    source=self.path,
                    partition=part.index,
                    row=row,
                )

    def _check_finite(self, part: Partition, block: Any) -> None:
        values = block.data if sp.issparse(block) else block
        with np.errstate(over="ignore", invalid="ignore"):
            if np.isfinite(values.sum(dtype=np.float64)):  # one reduction: a NaN or inf makes the sum non-finite
                return
        finite = np.isfinite(values)
        if finite.all():  # finite values whose sum overflows
            return
        pos = int(np.argmax(~finite.ravel()))
        if sp.issparse(block):
            row = part.row_start + int(np.searchsorted(block.indptr, pos, side="right")) - 1
            col = int(block.indices[pos])
        else:
            row, col = part.row_start + pos // block.shape[1], pos % block.shape[1]
        if self.format_version is not None:
            raise StoreCorruptError(
                f"partition {part.index} of store '{self.path}' is damaged: a non-finite value at row {row}, column "
                f"{col} (ingest never stores one; a chunk was modified or lost); re-ingest the store from its source",
                source=self.path,
                partition=part.index,
                row=row,
            )
        raise InvalidInputError(
            f"a NaN or infinite value at row {row} (partition {part.index}), column {col} of AnnData store "
            f"'{self.path}'; remove or impute it, or ingest the store with `dppca-dask ingest {self.path} --out STORE`"
            " (which names every bad value)",
            source=self.path,
            partition=part.index,
            row=row,
        )

    def to_scipy(self, *, max_bytes: int = 2 * 2**30) -> sp.csr_array:
        """The whole matrix in memory as CSR (for small stores, tests and exact baselines)."""
        estimate = self.nnz * 16 + self.n_rows * 8 if self.layout == "csr" else self.n_rows * self.n_cols * 8
        if estimate > max_bytes:
            raise InvalidParameterError(
                f"loading store '{self.path}' would need about {estimate / 2**30:.1f} GiB; got max_bytes="
                f"{max_bytes}; process it partition by partition instead, or raise max_bytes"
            )
        blocks = [sp.csr_array(self.read_partition(p.index)) for p in self.partitions]
        if not blocks:
            return sp.csr_array((0, self.n_cols))
        return sp.csr_array(sp.vstack(blocks, format="csr"))

    def size_on_disk(self) -> int:
        """Bytes used by the store's files (objects, for a store at a URL)."""
        from dppca_dask._urls import filesystem, is_url

        if is_url(self.path):
            fs, inner = filesystem(self.path, self.storage_options)
            return int(fs.du(inner, total=True))
        total = 0
        for root, _dirs, files in os.walk(self.path):
            for name in files:
                try:
                    total += os.path.getsize(os.path.join(root, name))
                except OSError:
                    pass
        return total

    def info(self) -> dict[str, Any]:
        """Metadata for ``dppca-dask info`` (for the data owner; not a differentially private release)."""
        nnz_per_part = [p.nnz for p in self.partitions]
        return {
            "path": self.path,
            "n_rows": self.n_rows,
            "n_cols": self.n_cols,
            "nnz": self.nnz,
            "n_partitions": self.n_partitions,
            "layout": self.layout,
            "dtype": self.dtype,
            "format_version": self.format_version,
            "store_id": self.store_id,
            "generation": self.generation,
            "row_norms": self.has_row_norms,
            "schema": self.schema,
            "rows_per_partition_max": max((p.n_rows for p in self.partitions), default=0),
            "nnz_per_partition_max": max(nnz_per_part, default=0),
            "size_on_disk": self.size_on_disk(),
            "created": self.metadata.get("created"),
            "source": self.metadata.get("source"),
            "timestamps": any(p.timestamp is not None for p in self.partitions),
            "codec": self.codec,
        }

    @property
    def codec(self) -> str | None:
        """How the chunks are compressed (``"none"``, ``"lz4"``, ``"zstd"``); ``None`` for an AnnData store."""
        if self.format_version is None:
            return None
        return str(self.metadata.get("codec", _format.LEGACY_CODEC))

    # ---------------------------------------------------------------------------------------------- internals
    def _partition(self, index: int) -> Partition:
        if not 0 <= index < len(self.partitions):
            raise InvalidParameterError(
                f"partition index must be in [0, {len(self.partitions)}); got {index}"
            )
        return self.partitions[index]

    def _check_not_replaced(self, part: Partition) -> None:
        """For a store in object storage: refuse a partition read while the store was replaced (``ingest
        --overwrite``), which may hold chunks of both stores (:func:`._remote.root_holds`); a local store is
        replaced by a rename, never under a reader's feet. Called once every chunk of the partition was read (and
        after a read that failed, which a replacement may explain)."""
        from dppca_dask._urls import is_url

        if self.store_id is None or not is_url(self.path):
            return
        from dppca_dask.storage._remote import root_holds

        if not root_holds(self.path, self.storage_options, self.store_id):
            raise StoreCorruptError(
                f"store '{self.path}' was replaced (ingest --overwrite) or removed while partition {part.index} was "
                "read, so the partition may hold parts of both stores; run again (on the new store)",
                source=self.path, partition=part.index)

    def _fetch_remote(self, part: Partition) -> dict[str, tuple[np.ndarray, list[Any] | None]] | None:
        """For a store at a URL: the partition's row pointers, values and column indices, fetched at once (their
        ranges follow from the partition table; every chunk of all three requested concurrently, where one array
        after the other would wait for each round trip), each with the identities of the chunk objects read (their
        ETags: an unchanged partition skips the checks its bytes passed before, as for local chunk files). ``None``
        for a local store (read chunk by chunk)."""
        from dppca_dask._urls import is_url

        if not is_url(self.path):
            return None
        path, version, options = self.path, self.fingerprint, self._options

        def fetch(index: int, wait: bool) -> Any:
            return _fetch_ranges(path, version, options, self._ranges(index), wait=wait,
                                 after=self._replacement_check(index), partition=index)

        return READ_AHEAD.fetch((path, version, options), part.index, self.n_partitions, fetch)

    def _replacement_check(self, index: int) -> Callable[[], None]:
        """The check that ends a fetch of partition ``index`` (:meth:`_check_not_replaced`; run by the fetch, so a
        partition fetched ahead is checked ahead)."""
        return functools.partial(self._check_not_replaced, self.partitions[index])

    def _ranges(self, index: int) -> dict[str, tuple[int, int]]:
        """The element ranges of partition ``index``'s arrays (CSR) to fetch from object storage. The row pointers'
        range ends with the pointer after the partition's last row, except where that pointer starts a chunk of
        its own and the next partition begins there: it is then the next partition's first pointer, which that
        partition's read checks against the table, and this one's read takes it from the table (``nnz_stop``).
        That saves one request per partition whose rows end on a chunk boundary (7 of about 42 per step of
        ``benchmarks/bench_s3.py``), and every stored pointer is still read by a step."""
        part, key = self.partitions[index], self.matrix_key
        stop = part.row_stop + 1
        layout = _remote_layout(self.path, f"{key}/indptr", self.fingerprint, self._options)
        if layout is not None and index + 1 < len(self.partitions) and part.row_stop % layout.chunk == 0:
            stop = part.row_stop
        ranges = {f"{key}/indptr": (part.row_start, stop)}
        if part.nnz:
            ranges.update({f"{key}/data": (part.nnz_start, part.nnz_stop),
                           f"{key}/indices": (part.nnz_start, part.nnz_stop)})
        return ranges

    def _read_csr(self, part: Partition, dtype: np.dtype[Any] | type | None = None,
                  squares: _SquaredRowSums | None = None, read: _Read | None = None) -> sp.csr_array:
        seen = None if read is None else read.seen
        key = self.matrix_key
        if part.index + 1 < len(self.partitions):  # read-ahead: the OS fetches the next partition meanwhile
            after = self.partitions[part.index + 1]
            for name in ("data", "indices"):
                layout = _layout(self.path, f"{key}/{name}", self.fingerprint, self._options)
                if layout is not None and after.nnz:
                    prefetch_range(layout, after.nnz_start, after.nnz_stop)
        fetched = self._fetch_remote(part)
        indptr = _read_range(self.path, f"{key}/indptr", self.fingerprint, part.row_start, part.row_stop + 1,
                             seen=seen, options=self._options, fetched=fetched)
        if fetched is not None and self._ranges(part.index)[f"{key}/indptr"][1] == part.row_stop:
            # the last pointer is the next partition's first: the table's (only where the fetch left it out, so a
            # pointer missing from the store is never filled in)
            indptr = np.append(indptr, np.array(part.nnz_stop, dtype=indptr.dtype))
        self._check_pointers(part, indptr)
        indptr = indptr.astype(np.int64, copy=False) - part.nnz_start
        if squares is not None:
            squares.start(indptr)
        if part.nnz:
            with np.errstate(over="ignore", invalid="ignore"):  # squares overflow to inf: the norms' check says so
                data = _read_range(self.path, f"{key}/data", self.fingerprint, part.nnz_start, part.nnz_stop,
                                   dtype=dtype, visit=None if squares is None else squares.add,
                                   piece=None if squares is None else squares.piece, seen=seen,
                                   options=self._options, fetched=fetched)
            indices = _read_range(self.path, f"{key}/indices", self.fingerprint, part.nnz_start, part.nnz_stop,
                                  seen=seen, visit=None if read is None else read.bound, options=self._options,
                                  fetched=fetched)
        else:
            data = np.zeros(0, dtype=self.dtype if dtype is None else dtype)
            indices = np.zeros(0, dtype=np.int32)
        self._check_chunks(part, indptr, data, indices)
        check_csr_arrays(indptr, indices, data, n_rows=part.n_rows, n_cols=self.n_cols, source=self.path,
                         partition=part.index, first_row=part.row_start, error=StoreCorruptError, index_range=False)
        if indices.dtype != np.int32 and self.n_cols < 2**31 and part.nnz < 2**31:
            # Narrowed to 32 bits only when every index is known to be below n_cols: narrowing first would wrap an
            # index out of range into it (2**32 + 1 into 1); otherwise the range check below names the bad one.
            if read is not None:
                largest = read.largest  # bounded chunk by chunk during the read, as unsigned
            else:
                largest = int(indices.view(np.dtype(f"u{indices.dtype.itemsize}")).max()) if indices.size else -1
            if largest < self.n_cols:
                indices = indices.astype(np.int32)
        if indices.dtype == np.int32 and part.nnz < 2**31:
            indptr = indptr.astype(np.int32)
        block = sp.csr_array((data, indices, indptr), shape=(part.n_rows, self.n_cols), copy=False)
        if read is not None and read.known is not None and read.known.matches(read.seen) and read.largest < self.n_cols:
            # Every chunk file is the one a read checked before (:data:`CHECKED`): canonical, and the sums of
            # squares are known. Every index is in range (its largest value taken as unsigned, so a negative index
            # would count as too large, was taken chunk by chunk during the read), whatever the files hold: no
            # scipy routine ever reads out of bounds. The other checks run as always.
            read.unchanged = True
            block.has_canonical_format = True
        # Column indices in range: with sorted, unique indices in every row (one scan, which the canonical form
        # needs anyway) the first and last index of each row bound them all; otherwise every index is compared.
        if part.nnz and block.has_canonical_format:
            filled = indptr[1:] > indptr[:-1]
            low, high = int(indices[indptr[:-1][filled]].min()), int(indices[indptr[1:][filled] - 1].max())
        elif part.nnz:
            low, high = int(indices.min()), int(indices.max())
        else:
            low, high = 0, 0
        if high >= self.n_cols or (self.format_version is None and low < 0):
            pos = int(np.argmax((indices < 0) | (indices >= self.n_cols)))
            row = part.row_start + int(np.searchsorted(indptr, pos, side="right")) - 1
            raise StoreCorruptError(
                f"partition {part.index} of store '{self.path}' is damaged: column indices outside [0, {self.n_cols})"
                f" (column {int(indices[pos])} at row {row}); re-ingest the store from its source",
                source=self.path,
                partition=part.index,
                row=row,
            )
        check_csr_arrays(indptr, indices, data, n_rows=part.n_rows, n_cols=self.n_cols, source=self.path,
                         partition=part.index, first_row=part.row_start, error=StoreCorruptError,
                         index_range=(low, high))
        return block

    def _corrupt(self, part: Partition, what: str, row: int | None = None) -> StoreCorruptError:
        return StoreCorruptError(
            f"partition {part.index} of store '{self.path}' is damaged: {what}; re-ingest the store from its source",
            source=self.path,
            partition=part.index,
            row=row,
        )

    def _check_pointers(self, part: Partition, indptr: np.ndarray) -> None:
        """Row pointers against the partition table, before anything is located with them: catches a lost or
        damaged chunk of ``indptr`` (fill value -1) and metadata that contradicts the arrays."""
        if indptr.shape != (part.n_rows + 1,):
            raise self._corrupt(part, "'indptr' holds the wrong number of row pointers for the partition")
        if part.n_rows and (indptr[0] != part.nnz_start or indptr[-1] != part.nnz_stop):
            raise self._corrupt(part, "the row pointers disagree with the partition table")
        steps = np.diff(indptr)
        if steps.size and steps.min() < 0:
            row = part.row_start + int(np.flatnonzero(steps < 0)[0])
            raise self._corrupt(part, "row pointers decrease (a chunk of 'indptr' is missing or damaged)", row)

    def _check_chunks(self, part: Partition, indptr: np.ndarray, data: np.ndarray, indices: np.ndarray) -> None:
        """One element per chunk of ``data`` and ``indices``: a chunk lost from a dppca_dask store reads as the fill
        value (NaN / -1). ``indptr`` is relative to the partition."""
        corrupt = functools.partial(self._corrupt, part)
        if part.nnz == 0 or self.format_version is None:
            return
        # One element per zarr chunk: a missing chunk reads as the fill value (NaN / -1) everywhere.
        chunk = int(self.metadata.get("nnz_chunk", _format.NNZ_CHUNK))
        first = -(-part.nnz_start // chunk) * chunk
        probes = np.concatenate(([0], np.arange(first, part.nnz_stop, chunk) - part.nnz_start)).astype(np.int64)
        if np.isnan(data[probes]).any() or (indices[probes] < 0).any():
            pos = int(probes[np.flatnonzero(np.isnan(data[probes]) | (indices[probes] < 0))[0]])
            row = part.row_start + int(np.searchsorted(indptr, pos, side="right")) - 1
            raise corrupt("a chunk of 'data' or 'indices' is missing", row)

    def _read_dense(self, part: Partition) -> np.ndarray:
        block = np.asarray(_open(self.path, self.matrix_key, self.fingerprint, self._options)[part.row_start :
                                                                                              part.row_stop])
        if self.format_version is not None and block.size:
            chunk = int(self.metadata.get("row_chunk", max(part.n_rows, 1)))
            first = -(-part.row_start // chunk) * chunk
            probes = np.concatenate(([0], np.arange(first, part.row_stop, chunk) - part.row_start)).astype(np.int64)
            bad = np.isnan(block[probes, 0])
            if bad.any():
                row = part.row_start + int(probes[np.flatnonzero(bad)[0]])
                raise StoreCorruptError(
                    f"partition {part.index} of store '{self.path}' is damaged: a chunk of 'X' is missing; "
                    "re-ingest the store from its source",
                    source=self.path,
                    partition=part.index,
                    row=row,
                )
        return block


#: A checked read: store path, fingerprint, the partition's rows and stored values (``[start, stop)`` each), dtype.
_Key = tuple[str, str, int, int, int, int, str]


def _packed(files: list[FileIdentity | None]) -> np.ndarray:
    """Identities as rows of 64-bit words, exactly: device and inode numbers are unsigned 64-bit, times signed (a
    negative one is kept as its two's complement, so equal identities, and only they, give equal rows)."""
    return np.array([[v & 0xFFFF_FFFF_FFFF_FFFF for v in cast(FileIdentity, f)] for f in files],
                    dtype=np.uint64).reshape(len(files), 5)


@dataclass(frozen=True, slots=True)
class _Checked:
    files: np.ndarray
    """The identities of the chunk files read, one row each (:func:`_packed`, read-only)."""
    norms: np.ndarray

    @property
    def nbytes(self) -> int:
        return int(self.files.nbytes + self.norms.nbytes)

    def matches(self, seen: list[FileIdentity | None]) -> bool:
        """Whether ``seen`` are these files (every one identified, in the same order)."""
        return (len(seen) == len(self.files) and all(f is not None for f in seen)
                and bool(np.array_equal(_packed(seen), self.files)))


class CheckedReads:
    """Partitions of this process's reads that passed every check, with the identities of the chunk files read
    (:func:`._chunks.identity`) and the row norms computed from their values.

    An out-of-core run reads every partition again at every step. When each chunk file a read opens is the one a
    checked read opened (the same identity, taken from the open file after its bytes were read), its bytes are the
    ones checked: :meth:`MatrixStore.read_partition_with_norms` then skips the two checks whose result follows from
    the bytes alone and costs most, the scan for the canonical form and the sums of squares (the norms are the ones
    computed then), and keeps every other check. A file written or replaced since changes its identity (its change
    time, which the system sets on every write and no user can set back), and that read checks everything again.
    Only reads whose every file is identified and whose files' change times are at least :attr:`SETTLED` ns older
    than the start of the read are kept: a file written twice within the resolution of file times (milliseconds)
    could keep its change time, so a file changed that recently is checked again at its next read. Bounded to
    :attr:`limit` of norms and file identities together (the ``dppca_dask.storage.checked-reads`` setting, 256 MiB by
    default; 0 keeps nothing, and every read checks everything), the least recently read dropped first.
    """

    #: Change times must be this much older than the start of the read (ns) for the read to be kept.
    SETTLED = 2_000_000_000

    def __init__(self, max_bytes: int | None = None) -> None:
        import threading
        from collections import OrderedDict

        self.max_bytes = max_bytes
        """The bound in bytes; ``None``: the ``dppca_dask.storage.checked-reads`` setting (:attr:`limit`)."""
        self._entries: OrderedDict[_Key, _Checked] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        """Reads that found their files unchanged since a checked read."""

    @property
    def limit(self) -> int:
        """Bytes of norms and file identities kept at most (0: none)."""
        if self.max_bytes is not None:
            return self.max_bytes
        import dask
        from dask.utils import parse_bytes

        setting = dask.config.get("dppca_dask.storage.checked-reads", "256MiB")
        limit = parse_bytes(setting) if isinstance(setting, str) else int(setting)
        if limit < 0:
            raise InvalidParameterError(f"dppca_dask.storage.checked-reads must be >= 0 bytes; got {setting!r}")
        return limit

    def get(self, key: _Key) -> _Checked | None:
        if self.limit == 0:
            return None
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def put(self, key: _Key, files: list[FileIdentity | None], norms: np.ndarray, *, started: int) -> None:
        """Keep a checked read that began at ``started`` (``time.time_ns()`` before its first file was opened): only
        when every file is identified and settled by then, and the read fits."""
        if not files or any(f is None for f in files):
            return
        if max(cast(FileIdentity, f)[4] for f in files) > started - self.SETTLED:
            return
        identities = _packed(files)
        entry = _Checked(identities, norms.copy())
        limit = self.limit
        if entry.nbytes > limit:
            return
        entry.files.setflags(write=False)
        entry.norms.setflags(write=False)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            self._entries[key] = entry
            self._bytes += entry.nbytes
            while self._bytes > limit:
                _key, dropped = self._entries.popitem(last=False)
                self._bytes -= dropped.nbytes

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0


#: The checked reads of this process.
CHECKED = CheckedReads()


@dataclass(slots=True)
class _Read:
    """One read: the checked read it may repeat, the identities of the chunk files it opened, and whether they are
    that read's."""

    known: _Checked | None
    seen: list[FileIdentity | None] = field(default_factory=list)
    started: int = field(default_factory=time.time_ns)
    """When the read began (``time.time_ns()``, before any file was opened)."""
    unchanged: bool = False
    largest: int = -1
    """The largest column index read, as unsigned (a negative index counts as larger than any column count)."""

    def bound(self, offset: int, indices: np.ndarray) -> None:
        """Take a chunk's largest index (``read_range``'s ``visit``: the chunk is still in cache)."""
        if indices.size:
            largest = int(indices.view(np.dtype(f"u{indices.dtype.itemsize}")).max())
            self.largest = max(self.largest, largest)


class _SquaredRowSums:
    """Each row's sum of squared values, accumulated chunk by chunk while a partition's values are read.

    The squares of one chunk go to a reusable buffer the size of a chunk (no array of the whole partition), and
    their per-row sums (``numpy.add.reduceat`` over the row starts inside the chunk) to the rows they belong to.
    Empty rows are skipped: the starts of the non-empty rows increase strictly, as ``reduceat`` needs.

    Where the values are converted on the way (:func:`._chunks.read_range`'s ``piece``), each converted piece is
    squared into the buffer at once, while it is in the core's cache, and the chunk's sums are taken when the chunk
    is complete (:meth:`add`): the same squares and the same sums, bit for bit, as squaring the whole chunk there.
    Squares that overflow are left to the caller's ``numpy.errstate`` (they become ``inf``, which the norms' check
    reports).
    """

    def __init__(self) -> None:
        self._buffer = np.empty(0)
        self._squared = 0  # values of the current chunk already squared into the buffer by :meth:`piece`

    def piece(self, offset: int, values: np.ndarray) -> None:
        """Square a piece of the chunk being read (pieces in order, from the chunk's first value)."""
        end = self._squared + values.size
        if self._buffer.size < end:
            grown = np.empty(max(end, 2 * self._buffer.size))
            grown[: self._squared] = self._buffer[: self._squared]
            self._buffer = grown
        np.square(values, out=self._buffer[self._squared : end], dtype=np.float64)
        self._squared = end

    def start(self, indptr: np.ndarray) -> None:
        """``indptr``: the partition's row pointers, relative to its first value (checked: starts at 0, monotone)."""
        counts = np.diff(indptr)
        self._n_rows = counts.size
        self._rows = np.flatnonzero(counts > 0)
        self._starts = np.asarray(indptr[:-1][self._rows], dtype=np.int64)
        self._sums = np.zeros(self._rows.size)

    def add(self, offset: int, values: np.ndarray) -> None:
        """The sums of one chunk's values (``offset`` from the partition's first value)."""
        n = values.size
        squared, self._squared = self._squared, 0
        if n == 0:
            return
        if self._buffer.size < n:
            self._buffer = np.empty(n)
        with np.errstate(over="ignore", invalid="ignore"):
            squares = self._buffer[:n]
            if squared != n:  # no pieces were shown (values read as stored, or through zarr)
                np.square(values, out=squares, dtype=np.float64)
            first = int(np.searchsorted(self._starts, offset, side="right")) - 1  # the row holding values[0]
            stop = int(np.searchsorted(self._starts, offset + n, side="left"))
            segments = self._starts[first:stop] - offset
            segments[0] = 0
            self._sums[first:stop] += np.add.reduceat(squares, segments)

    def result(self) -> np.ndarray:
        sums = np.zeros(self._n_rows)
        sums[self._rows] = self._sums
        return sums


def row_norms_of(block: Any) -> np.ndarray:
    """L2 norm of each row of a canonical CSR or dense block (float64, safe against overflow of the squares)."""
    return safe_row_norms(block)


@functools.lru_cache(maxsize=64)
def _layout(path: str, key: str, version: str, options: str = "{}") -> ChunkLayout | None:
    """How to read the chunks of one array directly (:mod:`._chunks`), or None to read it through zarr."""
    return chunk_layout(_open(path, key, version, options))


@functools.lru_cache(maxsize=64)
def _remote_layout(path: str, key: str, version: str, options: str = "{}") -> RemoteLayout | None:
    """How to read the chunks of one array in object storage directly (:mod:`._remote_chunks`), or None to read it
    through zarr."""
    return remote_layout(_open(path, key, version, options))


def _read_range(path: str, key: str, version: str, start: int, stop: int, *, dtype: Any = None,
                visit: Callable[[int, np.ndarray], None] | None = None,
                piece: Callable[[int, np.ndarray], None] | None = None,
                seen: list[FileIdentity | None] | None = None, options: str = "{}",
                fetched: Mapping[str, tuple[np.ndarray, list[Any] | None]] | None = None) -> np.ndarray:
    """Elements ``[start, stop)`` of a 1-D array of a store, each chunk decoded straight into the result (see
    :func:`._chunks.read_range` for ``dtype``, ``visit``, ``piece`` and ``seen``; through zarr, ``visit`` sees the
    whole range, ``piece`` nothing, and ``seen`` a ``None``: files read by zarr are not identified)."""
    layout = _layout(path, key, version, options)
    if layout is not None:
        return read_range(layout, start, stop, dtype=dtype, visit=visit, piece=piece, seen=seen)
    if fetched is not None and key in fetched:
        values, identities = fetched[key]
        if seen is not None:  # the chunk objects' identities (ETags) where the fetch had them
            seen.extend(identities if identities is not None else [None])
    else:
        values = np.asarray(_open(path, key, version, options)[start:stop])
        if seen is not None:
            seen.append(None)
    if dtype is not None:
        values = values.astype(dtype, copy=False)
    if visit is not None:
        visit(0, values)
    return values


def _fetch_ranges(path: str, version: str, options: str, ranges: Mapping[str, tuple[int, int]],
                  *, wait: bool = True, after: Callable[[], None] | None = None,
                  partition: int | None = None) -> Any:
    """Elements ``[start, stop)`` of several 1-D arrays of a store, all requested at once on zarr's event loop: a
    dict of ``(array, identities of the chunk objects read or None)``, or (``wait=False``) a future of it. Arrays of
    the plain layouts are read chunk by chunk (:mod:`._remote_chunks`: only the range's bytes, no size requests,
    each chunk object's ETag), others through zarr (no identities). With ``partition`` (the ranges are that
    partition's) the local disk cache serves it where it keeps it, and keeps it where it has a place
    (:mod:`._disk_cache`)."""
    import asyncio

    from zarr.core.sync import _get_loop, sync

    from dppca_dask.storage._disk_cache import DISK_CACHE

    arrays = {key: _open(path, key, version, options) for key in ranges}
    layouts = {key: _remote_layout(path, key, version, options) for key in ranges}
    cache_key = (path, version, options)
    # The cache's place is settled now, in the order fetches start (never when they end, which their sizes decide)
    kept, claim = DISK_CACHE.start(cache_key, partition) if partition is not None else (None, None)

    async def one(key: str) -> tuple[np.ndarray, list[Any] | None]:
        layout = layouts[key]
        if layout is not None:
            return await _remote_chunks.read_range(layout, *ranges[key])
        return np.asarray(await arrays[key]._async_array.getitem(slice(*ranges[key]))), None

    async def fetch() -> dict[str, tuple[np.ndarray, list[Any] | None]]:
        nonlocal claim
        if kept is not None:
            found = await asyncio.to_thread(DISK_CACHE.read, cache_key, cast(int, partition), kept)
            if found is not None:
                return found
            _, claim = DISK_CACHE.start(cache_key, cast(int, partition))  # damaged: its own place, written anew
        try:
            values = await asyncio.gather(*(one(key) for key in ranges))
            if after is not None:  # once every chunk was read (blocking I/O of its own: off the event loop)
                await asyncio.to_thread(after)
            fetched = dict(zip(ranges, values))
            if claim is not None:
                await asyncio.to_thread(DISK_CACHE.put, cache_key, cast(int, partition), claim, fetched)
        except BaseException:
            if claim is not None:
                DISK_CACHE.release(claim)
            raise
        return fetched

    if wait:
        return sync(fetch())
    future = asyncio.run_coroutine_threadsafe(fetch(), _get_loop())
    if claim is not None:  # cancelled before it ran: its place stays reserved, for the next fetch of it to write
        taken = claim
        future.add_done_callback(lambda done: DISK_CACHE.release(taken) if done.cancelled() else None)
    return future


#: The read-ahead of this process (workers of a cluster each have their own).
READ_AHEAD = ReadAhead()


def drop_read_ahead() -> None:
    """Drop the partitions this process fetched ahead (of every store; their fetches cancelled where they have not
    ended) and those it kept on its local disk (:mod:`._disk_cache`). A run's coordinator calls it in every process
    that read when the run ends, so that no partition outlives the run in worker memory or on a worker's disk; a run
    still reading fetches what it needs again."""
    from dppca_dask.storage._disk_cache import DISK_CACHE

    READ_AHEAD.clear()
    DISK_CACHE.clear()


@functools.lru_cache(maxsize=64)
def _open(path: str, key: str, version: str, options: str = "{}") -> zarr.Array:
    """Open one array of a store (cached per process).

    ``version`` is the store's fingerprint: it changes after an append (new generation) and when another store is
    written at the same path (new ``store_id``), so a cached array never describes an older store.
    """
    node = open_group(path, json.loads(options) or None, mode="r")[key]
    if not isinstance(node, zarr.Array):
        raise StoreCorruptError(f"'{key}' in store '{path}' is a group, expected an array", source=path)
    return node


def _foreign_stamp(path: str, key: str) -> str:
    """The fingerprint of a store without a ``store_id`` (AnnData opened directly): its real path (links resolved:
    every path to one store gives one fingerprint, and a link moved to another store gives another) and the
    modification times of its metadata."""
    import hashlib

    digest = hashlib.sha256(os.path.realpath(path).encode())
    for name in ("zarr.json", ".zattrs", ".zgroup", f"{key}/zarr.json", f"{key}/.zattrs"):
        p = Path(path, name)
        if p.exists():
            digest.update(f"{name}:{p.stat().st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


# --------------------------------------------------------------------------------------------------- opening
def open_matrix(path: str | os.PathLike[str] | Any, *, rows_per_partition: int | None = None,
                storage_options: Mapping[str, Any] | None = None) -> MatrixStore:
    """Open a matrix store for reading; only metadata is read.

    Parameters
    ----------
    path
        A dppca_dask store (written by ``dppca-dask ingest``), or an AnnData zarr store (``adata.write_zarr``,
        zarr format 2 or 3) whose ``X`` is a ``csr_matrix`` or a dense array: a local path, a URL read through
        fsspec (``s3://bucket/x.zarr``, ``gs://...``), or a ``zarr.storage.FsspecStore``.
    rows_per_partition
        Only for AnnData stores, which have no partition table: rows per partition. By default partitions of
        about 128 MB aligned with the zarr chunks of ``X``.
    storage_options
        For a URL: fsspec options of its file system (s3://: ``endpoint_url``, ``key``, ``secret``, ``anon``,
        ``client_kwargs``, ...). By default the scheme's package reads the environment and its configuration files
        (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ``~/.aws/``). They
        travel with the handle to the workers that read the store, and are never shown.

    Raises
    ------
    StoreNotFoundError
        Nothing readable at ``path``.
    UnsupportedStoreVersionError
        A dppca_dask store of an unknown format version.
    StoreCorruptError
        Metadata that contradicts itself.
    """
    from dppca_dask._urls import check_storage_options, is_url, local_path, url_exists

    path, storage_options = store_location(path, storage_options)
    path = str(os.fspath(local_path(path)))  # file:// is a local path; other URLs are read through fsspec by zarr
    options = check_storage_options(storage_options)
    if not is_url(path) and options:
        raise InvalidParameterError(
            f"storage_options apply to URLs (s3://, gs://, ...); '{path}' is a local path: drop them")
    if not (url_exists(path, options) if is_url(path) else os.path.exists(path)):
        if path.startswith("memory://"):  # in-memory file systems live in one process: no command reaches it
            raise StoreNotFoundError(
                f"no matrix store at '{path}'; a memory:// store lives only in the Python process that wrote it "
                "(dppca_dask.ingest(..., 'memory://...') there): from the command line give a path or an object "
                "storage URL, e.g. `dppca-dask ingest SRC --out STORE`")
        raise StoreNotFoundError(f"no matrix store at '{path}'; create one with `dppca-dask ingest SRC --out {path}`")
    try:
        group = open_group(path, options, mode="r")
    except InvalidParameterError:
        raise
    except Exception as exc:
        raise StoreNotFoundError(
            f"'{path}' is not a zarr group ({type(exc).__name__}: {exc}); create a store with "
            f"`dppca-dask ingest SRC --out {path}`"
        ) from exc
    attrs = group.attrs.asdict()
    if _format.ATTR_KEY in attrs:
        if rows_per_partition is not None:
            raise InvalidParameterError(
                f"rows_per_partition applies only to AnnData stores; store '{path}' has its own partition table"
            )
        return replace(_open_native(path, group, attrs[_format.ATTR_KEY]), storage_options=options)
    if "X" in group:
        return replace(_open_anndata(path, group, rows_per_partition), storage_options=options)
    raise StoreNotFoundError(
        f"'{path}' is a zarr group but neither a dppca_dask store nor an AnnData store with 'X'; create a store "
        f"with `dppca-dask ingest SRC --out {path}`"
    )


def store_location(data: Any, storage_options: Mapping[str, Any] | None = None
                   ) -> tuple[Any, Mapping[str, Any] | None]:
    """``(path or URL, storage options)`` of ``data``: a ``zarr.storage.FsspecStore`` becomes the URL of its root and
    its file system's options (``storage_options`` must then be None); anything else is returned as it is."""
    from zarr.storage import FsspecStore

    if not isinstance(data, FsspecStore):
        return data, storage_options
    if storage_options is not None:
        raise InvalidParameterError("storage_options is for a path or URL; an FsspecStore carries its own options "
                                    "(its file system's): drop storage_options")
    fs = data.fs
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    options = {k: v for k, v in dict(fs.storage_options).items() if k != "asynchronous"}
    return f"{protocol}://{data.path.strip('/')}", options or None


def _open_native(path: str, group: zarr.Group, meta: Any) -> MatrixStore:
    if not isinstance(meta, Mapping):
        raise StoreCorruptError(
            f"the metadata of store '{path}' is malformed (a {type(meta).__name__}, expected an object); "
            "re-ingest the store from its source",
            source=path,
        )
    version = meta.get("format_version")
    if version != _format.FORMAT_VERSION:
        raise UnsupportedStoreVersionError(
            f"store '{path}' has format version {version!r}; this release of dppca_dask reads version "
            f"{_format.FORMAT_VERSION}; re-ingest the data with this release or use a matching release"
        )
    try:
        parts = tuple(
            Partition(i, int(r0), int(r1), int(z0), int(z1), None if ts is None else float(ts))
            for i, (r0, r1, z0, z1, ts) in enumerate(meta["partitions"])
        )
        store = MatrixStore(
            path=path,
            layout=meta["layout"],
            n_rows=int(meta["n_rows"]),
            n_cols=int(meta["n_cols"]),
            nnz=int(meta["nnz"]),
            dtype=str(meta["dtype"]),
            partitions=parts,
            format_version=int(version),
            store_id=str(meta["store_id"]),
            generation=int(meta.get("generation", 0)),
            has_row_norms=_format.locate(group, _format.ROW_NORMS) is not None,
            schema=meta.get("schema", "inferred"),
            metadata=json.loads(json.dumps(dict(meta))),
        )
        if store.layout not in ("csr", "dense"):
            raise ValueError(f"unknown layout {store.layout!r}")
        if store.schema not in ("declared", "inferred"):
            raise ValueError(f"unknown schema {store.schema!r}")
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreCorruptError(
            f"the metadata of store '{path}' is incomplete or malformed ({type(exc).__name__}: {exc}); "
            "re-ingest the store from its source",
            source=path,
        ) from exc
    _check_table(store)
    return store


#: POSIX seconds of 9999-12-31: a partition timestamp beyond it (or NaN) is damage, not a day.
_LAST_STAMP = 253402214400.0


def _check_table(store: MatrixStore) -> None:
    row = nnz = 0
    for p in store.partitions:
        if p.row_start != row or p.row_stop < p.row_start or (store.layout == "csr" and p.nnz_start != nnz):
            raise StoreCorruptError(
                f"the partition table of store '{store.path}' is inconsistent at partition {p.index}; "
                "re-ingest the store from its source",
                source=store.path,
                partition=p.index,
            )
        if p.timestamp is not None and not (math.isfinite(p.timestamp) and abs(p.timestamp) < _LAST_STAMP):
            raise StoreCorruptError(
                f"the partition table of store '{store.path}' is damaged at partition {p.index}: its timestamp "
                f"{p.timestamp!r} is not a time (NaN, infinite or beyond the year 9999); re-ingest the store from "
                "its source",
                source=store.path,
                partition=p.index,
            )
        row, nnz = p.row_stop, (p.nnz_stop if store.layout == "csr" else nnz + p.nnz)
    if row != store.n_rows or nnz != store.nnz:
        raise StoreCorruptError(
            f"the partition table of store '{store.path}' disagrees with its row and entry counts; re-ingest the "
            "store from its source",
            source=store.path,
        )


def _open_anndata(path: str, group: zarr.Group, rows_per_partition: int | None) -> MatrixStore:
    node = group["X"]
    attrs = node.attrs.asdict()
    encoding = attrs.get("encoding-type")
    if isinstance(node, zarr.Array):
        if node.ndim != 2:
            raise InvalidInputError(f"'X' in '{path}' has {node.ndim} dimensions; expected a 2-D matrix", source=path)
        n_rows, n_cols = (int(s) for s in node.shape)
        chunk_rows = int(node.chunks[0]) if node.chunks else n_rows
        per_row = max(n_cols * node.dtype.itemsize, 1)
        step = _partition_rows(rows_per_partition, per_row, chunk_rows)
        row_bounds = list(range(0, n_rows, step)) + [n_rows]
        parts = tuple(
            Partition(i, row_bounds[i], row_bounds[i + 1], 0, 0) for i in range(len(row_bounds) - 1)
        ) if n_rows else ()
        return MatrixStore(
            path=path,
            layout="dense",
            n_rows=n_rows,
            n_cols=n_cols,
            nnz=n_rows * n_cols,
            dtype=str(node.dtype),
            partitions=parts,
            format_version=None,
            metadata={"anndata": True, "row_chunk": chunk_rows},
        )
    if encoding == "csc_matrix":
        raise InvalidInputError(
            f"'X' in AnnData store '{path}' is a csc_matrix (column-compressed); row partitions need CSR: convert "
            f"it with `dppca-dask ingest {path} --out STORE`",
            source=path,
        )
    if encoding != "csr_matrix":
        raise InvalidInputError(
            f"'X' in '{path}' has encoding-type {encoding!r}; expected 'csr_matrix' or a dense array",
            source=path,
        )
    n_rows, n_cols = (int(s) for s in cast(list[int], attrs["shape"]))
    indptr = cast(zarr.Array, node["indptr"])
    data = cast(zarr.Array, node["data"])
    nnz = int(data.shape[0])
    chunk_rows = int(indptr.chunks[0]) if indptr.chunks else n_rows
    per_row = max(math.ceil(nnz * (data.dtype.itemsize + cast(zarr.Array, node["indices"]).dtype.itemsize) / max(n_rows, 1)), 1) + 8
    step = _partition_rows(rows_per_partition, per_row, chunk_rows)
    bounds = np.array(list(range(0, n_rows, step)) + [n_rows], dtype=np.int64)
    offsets = np.asarray(indptr.get_coordinate_selection(bounds)) if n_rows else np.zeros(1, np.int64)
    parts = tuple(
        Partition(i, int(bounds[i]), int(bounds[i + 1]), int(offsets[i]), int(offsets[i + 1]))
        for i in range(len(bounds) - 1)
    )
    if int(offsets[-1]) != nnz:
        raise StoreCorruptError(
            f"AnnData store '{path}': 'indptr' does not end at the number of values in 'data'; the store is damaged, "
            "rewrite it from its source",
            source=path,
        )
    return MatrixStore(
        path=path,
        layout="csr",
        n_rows=n_rows,
        n_cols=n_cols,
        nnz=nnz,
        dtype=str(data.dtype),
        partitions=parts,
        format_version=None,
        metadata={"anndata": True},
    )


def _partition_rows(rows_per_partition: int | None, bytes_per_row: int, chunk_rows: int) -> int:
    if rows_per_partition is not None:
        if rows_per_partition < 1:
            raise InvalidParameterError(f"rows_per_partition must be >= 1; got {rows_per_partition}")
        return int(rows_per_partition)
    rows = max(_format.TARGET_PARTITION_BYTES // max(bytes_per_row, 1), 1)
    if chunk_rows > 0 and rows > chunk_rows:
        rows = (rows // chunk_rows) * chunk_rows
    return int(max(rows, 1))
