"""Entries in any order to row partitions, out of core: bucket (row, column, value) triplets by row partition in
spill files, then build one partition's CSR at a time.

Used by every source whose entries do not arrive row by row (Parquet triplets, Matrix Market coordinates, AnnData
``csc_matrix``). Memory: the triplets of one input batch, a write buffer (``buffer_bytes``, 64 MiB by default), and
while building, one partition's triplets plus its CSR: 28 bytes per entry with float64 values and int32 column
indices (row indices are spilled as int32 offsets within the partition, which scipy takes without a copy). Disk: 16
bytes per triplet (float64 values) in a directory the caller provides and removes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.errors import InvalidInputError
from dppca_dask.storage.validate import DuplicatePolicy

__all__ = ["RowBuckets"]


class RowBuckets:
    """Triplets spilled to disk by row partition, read back as one CSR block per partition.

    Parameters
    ----------
    directory
        An existing, empty directory for the spill files (the caller removes it).
    n_rows, n_cols
        Shape of the matrix; every row and column index added must be inside it (the caller validates).
    rows_per_partition
        Rows of each bucket; bucket ``k`` holds rows ``[k * rows_per_partition, (k + 1) * rows_per_partition)``.
    dtype
        dtype of the stored values (values are cast on the way in).
    buffer_bytes
        Triplets are kept in memory up to this size, then appended to the bucket files.
    """

    def __init__(
        self,
        directory: str,
        *,
        n_rows: int,
        n_cols: int,
        rows_per_partition: int,
        dtype: np.dtype[Any],
        buffer_bytes: int = 64 * 2**20,
    ) -> None:
        self.directory = directory
        self.n_rows = int(n_rows)
        self.n_cols = int(n_cols)
        self.rows_per_partition = int(rows_per_partition)
        self.n_partitions = -(-self.n_rows // self.rows_per_partition) if self.n_rows else 0
        self.dtype = np.dtype(dtype)
        self.col_dtype = np.dtype(np.int32 if self.n_cols < 2**31 else np.int64)
        self.buffer_bytes = int(buffer_bytes)
        self._record_bytes = 4 + self.col_dtype.itemsize + self.dtype.itemsize
        self._buffer: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self._buffered = 0
        self.n_triplets = 0

    def add(self, rows: np.ndarray, cols: np.ndarray, values: np.ndarray) -> None:
        """Queue triplets (global row and column indices, values); buffers are written out when full."""
        if rows.size == 0:
            return
        bucket = rows // self.rows_per_partition
        if self.n_partitions < 2**15:
            bucket = bucket.astype(np.int16)  # a stable sort of 16-bit keys is a radix sort
        order = np.argsort(bucket, kind="stable")
        bucket = bucket[order]
        bounds = np.searchsorted(bucket, np.arange(self.n_partitions + 1))
        local = (rows[order] - bucket.astype(np.int64) * self.rows_per_partition).astype(np.int32)
        del bucket
        self._buffer.append((bounds, local, cols[order].astype(self.col_dtype, copy=False),
                             values[order].astype(self.dtype, copy=False)))
        self._buffered += rows.size * self._record_bytes
        self.n_triplets += int(rows.size)
        if self._buffered >= self.buffer_bytes:
            self.flush()

    def flush(self) -> None:
        """Append the buffered triplets to their bucket files (each batch is already sorted by bucket)."""
        if not self._buffer:
            return
        counts = np.sum([np.diff(batch[0]) for batch in self._buffer], axis=0)
        for k in np.flatnonzero(counts).tolist():
            for field, name in ((1, "rows"), (2, "cols"), (3, "values")):
                with open(self._file(k, name), "ab") as handle:
                    for batch in self._buffer:
                        lo, hi = int(batch[0][k]), int(batch[0][k + 1])
                        if hi > lo:
                            batch[field][lo:hi].tofile(handle)
        self._buffer.clear()
        self._buffered = 0

    def blocks(
        self,
        *,
        on_duplicate: DuplicatePolicy,
        describe: Callable[[int, int], str] | None = None,
        source: object | None = None,
    ) -> Iterator[sp.csr_array]:
        """Yield each partition's rows as a canonical CSR block (all-zero blocks for empty partitions).

        Duplicate (row, column) entries are added up, or rejected with an error naming the row and column
        (``describe(row, col)`` may add the original ids).
        """
        self.flush()
        for k in range(self.n_partitions):
            row0 = k * self.rows_per_partition
            n = min(self.rows_per_partition, self.n_rows - row0)
            if not os.path.exists(self._file(k, "rows")):
                yield sp.csr_array((n, self.n_cols), dtype=self.dtype)
                continue
            rows = np.fromfile(self._file(k, "rows"), dtype=np.int32)
            cols = np.fromfile(self._file(k, "cols"), dtype=self.col_dtype)
            values = np.fromfile(self._file(k, "values"), dtype=self.dtype)
            for name in ("rows", "cols", "values"):
                os.remove(self._file(k, name))
            block = sp.csr_array(sp.coo_array((values, (rows, cols)), shape=(n, self.n_cols)))  # sums duplicates
            if on_duplicate == "reject" and block.nnz < values.size:
                del block
                order = np.lexsort((cols, rows))
                same = (np.diff(rows[order].astype(np.int64)) == 0) & (np.diff(cols[order]) == 0)
                pos = int(order[int(np.flatnonzero(same)[0])])
                row, col = row0 + int(rows[pos]), int(cols[pos])
                where = describe(row, col) if describe is not None else f"row {row}, column {col}"
                raise InvalidInputError(
                    f"duplicate entry ({where}) in partition {k}"
                    + (f" of '{source}'" if source is not None else "")
                    + "; pass on_duplicate='sum' (--on-duplicate sum) to add duplicates, or deduplicate the source",
                    source=source,
                    partition=k,
                    row=row,
                )
            del rows, cols, values
            yield block

    def _file(self, bucket: int, name: str) -> str:
        return os.path.join(self.directory, f"{bucket:06d}.{name}")
