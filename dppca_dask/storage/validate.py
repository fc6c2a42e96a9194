"""Validation of blocks of rows before they are written to a store.

Every check names the source, the partition and the row of the first problem, so the data owner can fix it.
Checks are vectorised (no per-row Python loops).
"""

from __future__ import annotations

import math

from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from dppca_dask.errors import InvalidInputError, InvalidParameterError, format_location

__all__ = [
    "DuplicatePolicy",
    "as_csr",
    "canonical_csr",
    "check_csr_arrays",
    "check_row_norms",
    "check_sparse_structure",
    "safe_norm",
    "safe_row_norms",
    "squared_row_sums",
    "validate_csr_block",
    "validate_dense_block",
]

DuplicatePolicy = Literal["sum", "reject"]


def _where(source: object | None, partition: int | None, row: int | None) -> str:
    text = format_location(source=source, partition=partition, row=row)
    return f" at {text}" if text else ""


def check_csr_arrays(
    indptr: Any,
    indices: Any,
    data: Any,
    *,
    n_rows: int,
    n_cols: int,
    source: object | None = None,
    partition: int | None = None,
    first_row: int = 0,
    error: type[Exception] = InvalidInputError,
    axis: str = "row",
    index_range: tuple[int, int] | Literal[False] | None = None,
) -> None:
    """Check the compressed-sparse structure of a block before any scipy routine trusts it.

    scipy's compiled routines (``sort_indices``, ``sum_duplicates``, format conversions) read ``indptr`` and
    ``indices`` without bounds checks: a decreasing or out-of-range ``indptr`` corrupts memory (SIGABRT). This checks,
    vectorised, that the arrays are 1-D integers of consistent lengths, that ``indptr`` starts at 0, never decreases
    and ends at ``len(indices)``, and that every index is in ``[0, n_cols)``. ``axis`` names the compressed axis in
    messages (``"row"`` for CSR, ``"column"`` for CSC). ``index_range`` is the smallest and largest index when the
    caller knows them already (from the ends of sorted rows), or ``False`` to leave the index range to a second call
    once they are known; the indices are scanned only to name a bad one. Raises ``error`` (an :class:`InvalidInputError` by default,
    :class:`StoreCorruptError` for stores) naming the first bad row.
    """
    indptr, indices, data = np.asarray(indptr), np.asarray(indices), np.asarray(data)

    fix = "rebuild the input from its source" if error is InvalidInputError else "re-ingest the store from its source"

    def fail(what: str, row: int | None = None) -> Exception:
        return error(  # type: ignore[call-arg]
            f"malformed sparse structure{_where(source, partition, None)}: {what}; {fix}",
            source=source,
            partition=partition,
            row=row,
        )

    for name, arr in (("indptr", indptr), ("indices", indices)):
        if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
            raise fail(f"'{name}' must be a 1-D integer array; got {arr.ndim}-D {arr.dtype}")
    if data.ndim != 1:
        raise fail(f"'data' must be 1-D; got {data.ndim}-D")
    if indptr.shape[0] != n_rows + 1:
        raise fail(f"'indptr' does not have one entry per {axis} plus one")
    if indices.shape[0] != data.shape[0]:
        raise fail("'indices' and 'data' have different lengths")
    if indptr[0] != 0:
        raise fail("'indptr' does not start at 0", first_row)
    steps = np.diff(indptr)
    if steps.size and steps.min() < 0:
        raise fail(f"'indptr' decreases (at {axis} {first_row + int(np.argmax(steps < 0))})",
                   first_row + int(np.argmax(steps < 0)))
    if int(indptr[-1]) != indices.shape[0]:
        raise fail("'indptr' does not end at the number of stored entries")
    if index_range is False or not indices.size:
        return
    low, high = (int(indices.min()), int(indices.max())) if index_range is None else index_range
    if low < 0 or high >= n_cols:  # two reductions (or none), no mask unless bad
        bad = (indices < 0) | (indices >= n_cols)
        if bad.any():
            pos = int(np.argmax(bad))
            row = first_row + int(np.searchsorted(indptr, pos, side="right")) - 1
            hint = "fix the index or declare more columns" if axis == "row" and error is InvalidInputError else fix
            where = format_location(source=source, partition=partition, row=row if axis == "row" else None)
            raise error(  # type: ignore[call-arg]
                f"column index {int(indices[pos])} out of range [0, {n_cols}) at {where}; {hint}" if axis == "row"
                else f"row index {int(indices[pos])} out of range [0, {n_cols}) at column {row} of '{source}'; {hint}",
                source=source,
                partition=partition,
                row=row if axis == "row" else None,
            )


def check_sparse_structure(block: Any, *, source: object | None = None, partition: int | None = None,
                           first_row: int = 0, error: type[Exception] = InvalidInputError) -> None:
    """Check the raw arrays of any scipy sparse matrix or array before it is converted or sorted.

    CSR, CSC and BSR blocks are checked with :func:`check_csr_arrays`; COO blocks for matching lengths and indices
    inside the shape. DOK, LIL and DIA blocks hold no raw pointers and need no check.
    """
    shape = tuple(int(s) for s in block.shape)
    if len(shape) != 2:
        raise error(  # type: ignore[call-arg]
            f"expected a 2-D matrix{_where(source, partition, None)}; got shape {shape}", source=source,
            partition=partition,
        )
    fmt = block.format
    if fmt == "csr":
        check_csr_arrays(block.indptr, block.indices, block.data, n_rows=shape[0], n_cols=shape[1], source=source,
                         partition=partition, first_row=first_row, error=error)
    elif fmt == "csc":
        check_csr_arrays(block.indptr, block.indices, block.data, n_rows=shape[1], n_cols=shape[0], source=source,
                         partition=partition, first_row=0, error=error, axis="column")
    elif fmt == "bsr":
        r, c = (int(v) for v in block.blocksize)
        data = np.asarray(block.data)
        if r < 1 or c < 1 or shape[0] % r or shape[1] % c or data.ndim != 3 or data.shape[1:] != (r, c):
            raise error(  # type: ignore[call-arg]
                f"malformed BSR block{_where(source, partition, None)}: block size {(r, c)}, data {data.shape}, "
                f"shape {shape}; rebuild the matrix from its source", source=source, partition=partition,
            )
        check_csr_arrays(block.indptr, block.indices, np.zeros(data.shape[0]), n_rows=shape[0] // r,
                         n_cols=shape[1] // c, source=source, partition=partition, first_row=first_row, error=error)
    elif fmt == "coo":
        coords = getattr(block, "coords", None) or (block.row, block.col)
        rows, cols, data = np.asarray(coords[0]), np.asarray(coords[1]), np.asarray(block.data)
        if not (rows.ndim == cols.ndim == data.ndim == 1 and rows.shape == cols.shape == data.shape):
            raise error(  # type: ignore[call-arg]
                f"malformed COO block{_where(source, partition, None)}: row, column and value arrays of lengths "
                f"{rows.shape}, {cols.shape}, {data.shape}; they must be 1-D of equal length",
                source=source, partition=partition,
            )
        for name, arr, limit in (("row", rows, shape[0]), ("column", cols, shape[1])):
            if arr.size and (arr.min() < 0 or arr.max() >= limit):
                pos = int(np.argmax((arr < 0) | (arr >= limit)))
                raise error(  # type: ignore[call-arg]
                    f"{name} index {int(arr[pos])} out of range [0, {limit}) in entry {pos}"
                    f"{_where(source, partition, None)}; fix the index or declare a larger shape",
                    source=source, partition=partition,
                )


def canonical_csr(csr: sp.csr_array) -> sp.csr_array:
    """``csr`` with sorted column indices and duplicate entries summed (structure already checked).

    The products a kernel computes add duplicate entries up; the row norms used for clipping must be those of the
    summed row, so every read path canonicalises before norms are taken.
    """
    if csr.has_canonical_format:
        return csr
    csr = csr.copy()
    csr.sum_duplicates()  # sorts the indices, then adds up equal (row, column) entries
    return csr


def squared_row_sums(csr: sp.csr_array) -> np.ndarray:
    """Sum of the squared values of each row of a CSR block, in float64 (``inf`` where a square or sum overflows,
    ``NaN`` where a value is NaN): two passes over the values, no copy of the block."""
    n_rows = csr.shape[0]
    sums = np.zeros(n_rows)
    if csr.nnz == 0:
        return sums
    counts = np.diff(csr.indptr)
    # reduceat over the starts of the non-empty rows only: they increase strictly and the last segment runs to the
    # end of data (a clamped start of a trailing empty row would cut the last row short).
    filled = counts > 0
    with np.errstate(over="ignore", invalid="ignore"):
        sums[filled] = np.add.reduceat(np.square(csr.data, dtype=np.float64), csr.indptr[:-1][filled])
    return sums


def safe_norm(x: np.ndarray) -> float:
    """L2 norm of a float array of any shape (the Frobenius norm of a matrix or tensor), without overflow of the squares.

    The largest absolute entry times the norm of the array scaled by it, so an array whose norm is finite but whose
    squares overflow float64 (entries near 1e200) still gets its norm; 0.0 for an empty or all-zero array. On
    ordinary values it equals ``np.linalg.norm(x)`` up to rounding (not bit for bit: the scaled array is summed).
    Non-finite entries give a non-finite norm, never a number: a NaN entry gives NaN, an infinite one inf (a
    release of a norm refuses either, where a norm of 0.0 would have been released as if it were the data's).
    """
    top = float(np.max(np.abs(x))) if x.size else 0.0
    if not math.isfinite(top):  # np.max propagates NaN; inf only without a NaN
        return top
    return top * float(np.linalg.norm(x / top)) if top > 0 else 0.0


def safe_row_norms(block: Any) -> np.ndarray:
    """L2 norm of each row of a canonical CSR or dense block, without overflow or underflow of the squares.

    The plain sum of squares is used when it is finite (the common case, no extra cost); otherwise the rows are
    scaled by their largest absolute value first, so values up to ``float64``'s maximum give their true norm
    (``inf`` only when the norm itself exceeds ``float64``).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        if sp.issparse(block):
            csr = sp.csr_array(block)
            n_rows = csr.shape[0]
            if csr.nnz == 0:
                return np.zeros(n_rows)
            sums = squared_row_sums(csr)
            if np.isfinite(sums).all():
                return np.sqrt(sums)
            data = np.asarray(csr.data, dtype=np.float64)
            counts = np.diff(csr.indptr)
            filled = counts > 0
            starts = csr.indptr[:-1][filled]
            top = np.zeros(n_rows)
            top[filled] = np.maximum.reduceat(np.abs(data), starts)
            owner = np.repeat(np.arange(n_rows), counts)
            scale = np.where(top > 0, top, 1.0)
            scaled = np.zeros(n_rows)
            scaled[filled] = np.add.reduceat(np.square(data / scale[owner]), starts)
            return top * np.sqrt(scaled)
        arr = np.asarray(block, dtype=np.float64)
        sums = np.einsum("ij,ij->i", arr, arr)
        if np.isfinite(sums).all():
            return np.sqrt(sums)
        top = np.abs(arr).max(axis=1, initial=0.0)
        scale = np.where(top > 0, top, 1.0)
        scaled = arr / scale[:, None]
        return top * np.sqrt(np.einsum("ij,ij->i", scaled, scaled))


def check_row_norms(norms: np.ndarray, *, source: object | None = None, partition: int | None = None,
                    first_row: int = 0, error: type[Exception] = InvalidInputError) -> np.ndarray:
    """Refuse rows whose L2 norm is not finite (values whose norm exceeds float64's range), naming the row."""
    finite = np.isfinite(norms)
    if not finite.all():
        row = first_row + int(np.argmax(~finite))
        raise error(  # type: ignore[call-arg]
            f"the L2 norm of row {row}{_where(source, partition, None)} is {float(norms[row - first_row])!r}: its "
            "values are too large for float64 arithmetic; rescale the data (divide by a constant) before ingesting",
            source=source,
            partition=partition,
            row=row,
        )
    return norms


def as_csr(block: Any) -> sp.csr_array:
    """Any scipy sparse matrix or array as a ``csr_array``, keeping duplicate entries.

    scipy's COO to CSR conversion adds up duplicate (row, column) entries; here a COO block becomes a CSR block with
    the duplicates still in it, so that ``on_duplicate="reject"`` can see them. The raw structure is checked first
    (:func:`check_sparse_structure`), so a malformed block raises :class:`InvalidInputError` instead of crashing.
    """
    check_sparse_structure(block)
    return _as_csr(block)


def _as_csr(block: Any) -> sp.csr_array:
    if block.format != "coo":
        return sp.csr_array(block)
    rows, cols = np.asarray(block.row), np.asarray(block.col)
    n_rows = int(block.shape[0])
    order = np.argsort(rows, kind="stable")
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_rows), out=indptr[1:])
    return sp.csr_array((np.asarray(block.data)[order], cols[order], indptr), shape=block.shape)


def validate_csr_block(
    block: Any,
    *,
    n_cols: int,
    on_duplicate: DuplicatePolicy = "sum",
    first_row: int = 0,
    partition: int | None = None,
    source: object | None = None,
) -> sp.csr_array:
    """Check a block of rows and return it as a canonical ``csr_array`` (sorted indices, no duplicates).

    Parameters
    ----------
    block
        Any scipy sparse matrix or array with ``n_cols`` columns.
    on_duplicate
        ``"sum"`` adds duplicate (row, column) entries (scipy's COO convention); ``"reject"`` raises.
    first_row
        Global index of the block's first row, for error messages.

    Raises
    ------
    InvalidInputError
        Wrong number of columns, NaN or infinite values, negative or out-of-range column indices, or duplicate
        entries under ``on_duplicate="reject"``.
    """
    if on_duplicate not in ("sum", "reject"):
        raise InvalidParameterError(f"on_duplicate must be 'sum' or 'reject'; got {on_duplicate!r}")
    if not sp.issparse(block):
        raise InvalidInputError(f"expected a scipy sparse block; got {type(block).__name__}", source=source)
    if block.ndim != 2 or block.shape[1] != n_cols:
        raise InvalidInputError(
            f"shape mismatch{_where(source, partition, first_row)}: a block has shape {tuple(block.shape)}, the "
            f"matrix has {n_cols} columns; give every block the same number of columns",
            source=source,
            partition=partition,
            row=first_row,
        )
    check_sparse_structure(block, source=source, partition=partition, first_row=first_row)
    csr = _as_csr(block)
    if not np.issubdtype(csr.data.dtype, np.number) or np.issubdtype(csr.data.dtype, np.complexfloating):
        raise InvalidInputError(
            f"values must be real numbers; got dtype {csr.data.dtype}{_where(source, partition, None)}",
            source=source,
            partition=partition,
        )

    def row_of(position: int) -> int:
        return first_row + int(np.searchsorted(csr.indptr, position, side="right")) - 1

    finite = np.isfinite(csr.data)
    if not finite.all():
        pos = int(np.flatnonzero(~finite)[0])
        row = row_of(pos)
        raise InvalidInputError(
            f"{float(csr.data[pos])!r} value{_where(source, partition, row)} (column {int(csr.indices[pos])}); "
            "NaN and infinite values are not allowed: remove or impute them before ingesting",
            source=source,
            partition=partition,
            row=row,
        )
    if csr.nnz:
        bad = (csr.indices < 0) | (csr.indices >= n_cols)
        if bad.any():
            pos = int(np.flatnonzero(bad)[0])
            row = row_of(pos)
            raise InvalidInputError(
                f"column index {int(csr.indices[pos])} out of range [0, {n_cols}){_where(source, partition, row)}; "
                "fix the index or declare more columns",
                source=source,
                partition=partition,
                row=row,
            )
    if not csr.has_canonical_format:
        csr = csr.copy()
        csr.has_sorted_indices = False
        csr.sort_indices()
        if csr.nnz > 1:
            rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
            dup = (np.diff(csr.indices) == 0) & (np.diff(rows) == 0)
            if dup.any():
                if on_duplicate == "reject":
                    pos = int(np.flatnonzero(dup)[0])
                    row = first_row + int(rows[pos])
                    raise InvalidInputError(
                        f"duplicate entry (row {row}, column {int(csr.indices[pos])})"
                        f"{_where(source, partition, None)}; pass on_duplicate='sum' (--on-duplicate sum) to add "
                        "duplicates, or deduplicate the source",
                        source=source,
                        partition=partition,
                        row=row,
                    )
                csr.sum_duplicates()
        csr.has_canonical_format = True
    check_row_norms(safe_row_norms(csr), source=source, partition=partition, first_row=first_row)
    return csr


def validate_dense_block(
    block: Any,
    *,
    n_cols: int,
    first_row: int = 0,
    partition: int | None = None,
    source: object | None = None,
) -> np.ndarray:
    """Check a dense block of rows (2-D, ``n_cols`` columns, finite real values) and return it as an array."""
    arr = np.asarray(block)
    if arr.ndim != 2 or arr.shape[1] != n_cols:
        raise InvalidInputError(
            f"shape mismatch{_where(source, partition, first_row)}: a block has shape {arr.shape}, the matrix has "
            f"{n_cols} columns; give every block the same number of columns",
            source=source,
            partition=partition,
            row=first_row,
        )
    if not np.issubdtype(arr.dtype, np.number) or np.issubdtype(arr.dtype, np.complexfloating):
        raise InvalidInputError(f"values must be real numbers; got dtype {arr.dtype}", source=source)
    finite = np.isfinite(arr)
    if not finite.all():
        r, c = (int(v) for v in np.argwhere(~finite)[0])
        row = first_row + r
        raise InvalidInputError(
            f"{float(arr[r, c])!r} value{_where(source, partition, row)} (column {c}); NaN and infinite values are not "
            "allowed: remove or impute them before ingesting",
            source=source,
            partition=partition,
            row=row,
        )
    check_row_norms(safe_row_norms(arr), source=source, partition=partition, first_row=first_row)
    return arr
