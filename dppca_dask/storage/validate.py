"""Validation of blocks of rows before they are written to a store.

Every check names the source, the partition and the row of the first problem, so the data owner can fix it.
Checks are vectorised (no per-row Python loops).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from dppca_dask.errors import InvalidInputError, InvalidParameterError, format_location

__all__ = ["DuplicatePolicy", "as_csr", "validate_csr_block", "validate_dense_block"]

DuplicatePolicy = Literal["sum", "reject"]


def _where(source: object | None, partition: int | None, row: int | None) -> str:
    text = format_location(source=source, partition=partition, row=row)
    return f" at {text}" if text else ""


def as_csr(block: Any) -> sp.csr_array:
    """Any scipy sparse matrix or array as a ``csr_array``, keeping duplicate entries.

    scipy's COO to CSR conversion adds up duplicate (row, column) entries; here a COO block becomes a CSR block with
    the duplicates still in it, so that ``on_duplicate="reject"`` can see them.
    """
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
    csr = as_csr(block)
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
    return arr
