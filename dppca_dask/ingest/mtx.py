"""Matrix Market files (``.mtx``, ``.mtx.gz``).

Memory behaviour:

- ``coordinate`` (``real``, ``integer`` or ``pattern``; ``general``, ``symmetric`` or ``skew-symmetric``) is
  streamed: entries are parsed in chunks of lines (vectorised), checked, and bucketed by row partition in spill files
  beside the output (:class:`~dppca_dask.ingest._spill.RowBuckets`), so entries may come in any order and memory
  stays bounded by one chunk, a 64 MiB write buffer and one partition. Symmetric and skew-symmetric matrices are
  expanded (each off-diagonal entry is also stored mirrored, negated for skew-symmetric).
- ``array`` (dense, listed column by column) is read into memory with ``scipy.io.mmread`` (8 bytes per element) and
  stored as a dense store.
- ``complex`` and ``hermitian`` matrices are refused.

A coordinate file that fits in memory (uncompressed, at most :data:`FAST_PATH_BYTES` or Dask's
``dppca_dask.ingest.in-memory-max-bytes``, and within the memory limit)
is read by ``scipy.io.mmread`` instead (compiled and multi-threaded: about 9 times less CPU than the streaming
parser here); anything it refuses or lets through that the streaming parser refuses (a malformed line, an index out
of range, a NaN or infinite value, a count that differs from the size line) and ``on_duplicate="reject"`` go
through the streaming parser, which gives the precise error. Both paths store the same matrix.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import IO

import numpy as np
import scipy.sparse as sp

from dppca_dask.errors import InvalidInputError
from dppca_dask.ingest import _text
from dppca_dask.ingest._common import IngestOptions, partition_rows, require_file, spill_directory
from dppca_dask.ingest._spill import RowBuckets
from dppca_dask.storage import MatrixStore

__all__ = ["FAST_PATH_BYTES", "MatrixMarketHeader", "ingest_mtx", "read_header"]

#: Uncompressed coordinate files up to this size are read whole by ``scipy.io.mmread``.
FAST_PATH_BYTES = 512 * 2**20

log = logging.getLogger(__name__)

_FORMATS = ("coordinate", "array")
_FIELDS = ("real", "double", "integer", "pattern")
_SYMMETRIES = ("general", "symmetric", "skew-symmetric")


@dataclass(frozen=True, slots=True)
class MatrixMarketHeader:
    """The banner and size line of a Matrix Market file."""

    format: str
    """``"coordinate"`` or ``"array"``."""
    field: str
    """``"real"``, ``"double"``, ``"integer"`` or ``"pattern"``."""
    symmetry: str
    """``"general"``, ``"symmetric"`` or ``"skew-symmetric"``."""
    n_rows: int
    n_cols: int
    nnz: int
    """Entries listed in the file (coordinate format), before symmetric expansion; ``n_rows * n_cols`` for arrays."""
    data_line: int
    """1-based line number of the first line after the size line."""


def read_header(handle: IO[bytes], path: str) -> MatrixMarketHeader:
    """Read the banner, comments and size line; ``handle`` is left at the first entry."""
    banner = handle.readline().decode("utf-8", errors="replace").split()
    if len(banner) != 5 or banner[0].lower() != "%%matrixmarket" or banner[1].lower() != "matrix":
        raise InvalidInputError(
            f"'{path}' does not start with a Matrix Market banner ('%%MatrixMarket matrix FORMAT FIELD SYMMETRY'); "
            f"got {' '.join(banner)[:80]!r}: check the file and its --format",
            source=path,
        )
    fmt, field, symmetry = (word.lower() for word in banner[2:])
    for name, value, allowed in (("format", fmt, _FORMATS), ("field", field, _FIELDS),
                                 ("symmetry", symmetry, _SYMMETRIES)):
        if value not in allowed:
            raise InvalidInputError(
                f"unsupported Matrix Market {name} {value!r} in '{path}'; supported: {', '.join(allowed)}"
                + ("; complex matrices cannot be stored: convert them to real first" if value in
                   ("complex", "hermitian") else ""),
                source=path,
            )
    line = 1
    while True:
        raw = handle.readline()
        line += 1
        if not raw:
            raise InvalidInputError(f"'{path}' ends before its Matrix Market size line: the file is truncated",
                                    source=path)
        text = raw.decode("utf-8", errors="replace").strip()
        if text and not text.startswith("%"):
            break
    fields = text.split()
    expected = 3 if fmt == "coordinate" else 2
    if len(fields) != expected or not all(f.isdigit() for f in fields):
        raise InvalidInputError(
            f"invalid Matrix Market size line {text[:80]!r} at line {line} of '{path}'; expected "
            f"{'ROWS COLUMNS ENTRIES' if expected == 3 else 'ROWS COLUMNS'} as non-negative integers",
            source=path,
        )
    n_rows, n_cols = int(fields[0]), int(fields[1])
    nnz = int(fields[2]) if fmt == "coordinate" else n_rows * n_cols
    if n_cols < 1:
        raise InvalidInputError(f"'{path}' declares {n_cols} columns at line {line}; a matrix needs at least one",
                                source=path)
    if symmetry != "general" and n_rows != n_cols:
        raise InvalidInputError(
            f"'{path}' is declared {symmetry} but has shape {n_rows} x {n_cols}; a {symmetry} matrix is square: "
            "fix the banner or the size line",
            source=path,
        )
    return MatrixMarketHeader(fmt, field, symmetry, n_rows, n_cols, nnz, line + 1)


def ingest_mtx(path: str, options: IngestOptions) -> MatrixStore:
    """Ingest a Matrix Market file into a new store (CSR for coordinate files, dense for array files).

    Raises
    ------
    InvalidInputError
        A malformed banner, size line or entry; an index outside the declared shape; a NaN or infinite value; more
        or fewer entries than declared; a duplicate entry under ``on_duplicate="reject"``; complex values. The
        message names the file and the line (or the partition and row for duplicates).
    """
    path = require_file(path)
    start = time.perf_counter()
    with _text.open_binary(path) as handle:
        header = read_header(handle, path)
        if header.format == "array":
            from dppca_dask.ingest.arrays import ingest_array

            options.check_size(n_rows=header.n_rows, n_cols=header.n_cols, layout="dense", source=path)
            options.limits.check_memory(header.n_rows * header.n_cols * 8, source=path,
                                        what=f"reading its dense {header.n_rows} x {header.n_cols} array")
            return ingest_array(_read_array(path), options, source={"kind": "mtx", "path": path,
                                                                    "format": "array"}, name=path)
        matrix = _read_coordinate_in_memory(path, header, options)
        if matrix is not None:
            store = _write_in_memory(matrix, header, path, options)
        else:
            store = _ingest_coordinate(handle, header, path, options)
    log.info("ingested %s: %d x %d, %d entries, %d partitions in %.1f s", path, store.n_rows, store.n_cols,
             store.nnz, store.n_partitions, time.perf_counter() - start)
    return store


def _read_array(path: str) -> np.ndarray:
    import scipy.io

    try:
        return np.asarray(scipy.io.mmread(path))
    except ValueError as exc:
        raise InvalidInputError(f"cannot read the Matrix Market array in '{path}': {exc}; fix the file",
                                source=path) from exc


def _in_memory_limit() -> int:
    """Dask's ``dppca_dask.ingest.in-memory-max-bytes`` (0: always stream), else :data:`FAST_PATH_BYTES`."""
    import dask.config

    configured = dask.config.get("dppca_dask.ingest.in-memory-max-bytes", default=None)
    return FAST_PATH_BYTES if configured is None else int(configured)


def _read_coordinate_in_memory(path: str, header: MatrixMarketHeader, options: IngestOptions) -> sp.csr_array | None:
    """The whole matrix read by ``scipy.io.mmread`` (duplicates summed), or ``None`` when the streaming parser must
    read it (see the module docstring)."""
    size = _text.text_size(path)
    mirrored = header.symmetry != "general"
    entries = header.nnz * (2 if mirrored else 1)
    if size is None or size > _in_memory_limit() or options.on_duplicate != "sum":
        return None
    # The declared shape's limits first, as the streaming path checks them (same errors).
    options.check_size(n_rows=header.n_rows, n_cols=header.n_cols, nnz=entries, layout="csr",
                       value_bytes=options.value_dtype(np.float64).itemsize, source=path)
    from dppca_dask.ingest._limits import physical_memory

    limit = options.limits.max_memory if options.limits.max_memory is not None else (physical_memory() or 0) // 4
    if entries * 40 + header.n_rows * 16 > limit:  # COO (int64 row, col, float64 value), its CSR copy, row pointers
        return None
    import scipy.io

    try:
        coo = scipy.io.mmread(path)
    except Exception:  # noqa: BLE001 - any refusal: the streaming parser names the line
        return None
    if not sp.issparse(coo) or coo.shape != (header.n_rows, header.n_cols):
        return None
    coo = sp.coo_array(coo)
    if coo.dtype.kind not in "biuf":
        return None
    values = coo.data.astype(np.float64, copy=False)
    if values.size and not np.isfinite(values).all():
        return None
    listed = coo.nnz if not mirrored else coo.nnz - int(np.count_nonzero(coo.row != coo.col)) // 2
    if listed != header.nnz:
        return None
    return sp.csr_array((values, (coo.row, coo.col)), shape=coo.shape)  # sums duplicates


def _write_in_memory(matrix: sp.csr_array, header: MatrixMarketHeader, path: str,
                     options: IngestOptions) -> MatrixStore:
    dtype = options.value_dtype(np.float64)
    n_rows = header.n_rows
    rpp = partition_rows(n_rows=n_rows, row_bytes=matrix.nnz * (dtype.itemsize + 4) / max(n_rows, 1),
                         rows_per_partition=options.rows_per_partition)
    source = {"kind": "mtx", "path": path, "format": header.format, "field": header.field,
              "symmetry": header.symmetry}
    with options.writer(n_cols=header.n_cols, dtype=dtype, source=source, n_rows=n_rows, rows_per_partition=rpp,
                        nnz=header.nnz * (2 if header.symmetry != "general" else 1)) as writer:
        for start in range(0, n_rows, rpp):
            writer.append(matrix[start:start + rpp], source=path)
        return writer.commit()


def _ingest_coordinate(handle: IO[bytes], header: MatrixMarketHeader, path: str,
                       options: IngestOptions) -> MatrixStore:
    mirrored = header.symmetry != "general"
    dtype = options.value_dtype(np.float64)
    rpp = partition_rows(n_rows=header.n_rows, row_bytes=header.nnz * (2 if mirrored else 1)
                         * (dtype.itemsize + 4) / max(header.n_rows, 1), rows_per_partition=options.rows_per_partition)
    fields = 2 if header.field == "pattern" else 3
    what = "ROW COLUMN" if fields == 2 else "ROW COLUMN VALUE"
    source = {"kind": "mtx", "path": path, "format": header.format, "field": header.field,
              "symmetry": header.symmetry}
    with spill_directory(options.out) as spill, options.writer(
        n_cols=header.n_cols, dtype=dtype, source=source, n_rows=header.n_rows, rows_per_partition=rpp,
        nnz=header.nnz * (2 if mirrored else 1),
    ) as writer:
        buckets = RowBuckets(spill, n_rows=header.n_rows, n_cols=header.n_cols, rows_per_partition=rpp,
                             dtype=dtype)
        seen = 0
        with options.bar(total=_text.text_size(path), desc="read", unit="B", unit_scale=True) as bar:
            for chunk in _text.read_chunks(handle, first_line=header.data_line, path=path):
                table, lines = _text.parse_rows(chunk, fields=fields, path=path, comment=b"%", what=what)
                if seen + lines.size > header.nnz:
                    raise InvalidInputError(
                        f"'{path}' declares {header.nnz} entries but has more: line {int(lines[header.nnz - seen])} "
                        "is one too many; fix the size line or remove the extra entries",
                        source=path,
                    )
                seen += lines.size
                rows, cols, values = _check_entries(table, lines, header, path)
                if mirrored:
                    off = rows != cols
                    sign = -1.0 if header.symmetry == "skew-symmetric" else 1.0
                    rows, cols, values = (np.concatenate((rows, cols[off])), np.concatenate((cols, rows[off])),
                                          np.concatenate((values, sign * values[off])))
                buckets.add(rows, cols, values)
                bar.update(len(chunk.data))
        if seen < header.nnz:
            raise InvalidInputError(
                f"'{path}' declares {header.nnz} entries but has only {seen}: the file is truncated or the size line "
                "is wrong",
                source=path,
            )
        for block in buckets.blocks(on_duplicate=options.on_duplicate, source=path):
            writer.append(block, source=path)
        return writer.commit()


def _check_entries(table: np.ndarray, lines: np.ndarray, header: MatrixMarketHeader,
                   path: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """0-based row and column indices and values of parsed entries, after range and value checks."""
    coords = table[:, :2]
    for name, column, size in (("row", 0, header.n_rows), ("column", 1, header.n_cols)):
        index = coords[:, column]
        bad = (index != np.floor(index)) | (index < 1) | (index > size)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InvalidInputError(
                f"{name} index {index[i]:g} at line {int(lines[i])} of '{path}' is not an integer in [1, {size}] "
                f"(Matrix Market indices start at 1 and the size line declares {header.n_rows} x {header.n_cols}); "
                "fix the entry or the size line",
                source=path,
            )
    values = table[:, 2] if table.shape[1] == 3 else np.ones(table.shape[0])
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        row = int(coords[i, 0]) - 1
        raise InvalidInputError(
            f"{float(values[i])!r} value at line {int(lines[i])} (row {row}) of '{path}'; NaN and infinite values are "
            "not allowed: remove or impute them before ingesting",
            source=path,
            row=row,
        )
    return coords[:, 0].astype(np.int64) - 1, coords[:, 1].astype(np.int64) - 1, values
