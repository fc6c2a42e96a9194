"""Sparse products of a CSR partition with dense float64 vectors, row chunk by row chunk, accumulated in float64.

scipy's ``block @ x`` with float32 values and a float64 ``x`` converts the whole ``data`` array to float64 on every
product (a fresh array of 8 bytes per stored entry, written and read once more), and its ``Aᵀ(Ax)`` reads the
partition from memory twice. Here the rows are taken in chunks of about :data:`CHUNK` stored entries: a chunk's
values are converted into a float64 buffer the size of a chunk (when they are float32), and both products of the
private step run on the chunk while it is in the processor's cache (:func:`sweep`), through scipy's own compiled
loops (``csr_matvec``, ``csc_matvec`` and their several-vector forms).

Store partitions are converted to float64 when read, which measured faster per step than these loops on float32
(see :mod:`dppca_dask.kernels.power`); the loops serve float32 blocks handed to the kernels directly, 1.7x faster
than scipy's per-product conversion. For float64 blocks :func:`times` and :func:`transpose_times` call scipy as
they are (fusing the two products in chunks measured 1.1-1.2x slower there than scipy's two calls).

Every value is the one scipy computes for the block converted to float64: float32 values convert to float64
exactly, each row's product is summed in the same order by the same loop, and ``Aᵀw`` adds the rows'
contributions in row order, chunk after chunk, as scipy's single call does. The tests compare the two bit for bit.
Nothing here depends on the values: the chunks follow the row pointers, and a block of another format or value
type is passed to scipy as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

try:  # scipy's compiled sparse loops (a private module, present in every supported scipy)
    from scipy.sparse import _sparsetools
except ImportError:  # pragma: no cover - the generic products below are used instead
    _sparsetools = None

__all__ = ["CHUNK", "chunked", "sweep", "times", "transpose_times"]

#: Stored entries per chunk: 2¹⁶ values (512 KiB as float64) and their indices stay in a core's cache.
CHUNK = 2**16
_VALUE_TYPES = (np.dtype(np.float32), np.dtype(np.float64))


def chunked(block: Any) -> bool:
    """Whether ``block`` goes through the chunked loops: a CSR ``scipy.sparse`` block of float32 or float64 values."""
    return (_sparsetools is not None and sp.issparse(block) and block.format == "csr"
            and block.data.dtype in _VALUE_TYPES and block.indices.dtype in (np.int32, np.int64))


def _bounds(indptr: np.ndarray, chunk: int) -> np.ndarray:
    """Row bounds of chunks of about ``chunk`` entries (a row with more is a chunk of its own)."""
    n_rows = indptr.shape[0] - 1
    cuts = np.searchsorted(indptr, np.arange(chunk, int(indptr[-1]), chunk), side="left")
    return np.unique(np.concatenate(([0], cuts, [n_rows]))).astype(np.int64)


class _Chunks:
    """The chunks of a CSR block: for each, its rows, its relative row pointers, indices and float64 values."""

    def __init__(self, block: Any, chunk: int) -> None:
        self.block = block
        self.bounds = _bounds(block.indptr, chunk)
        self.starts = np.asarray(block.indptr[self.bounds], dtype=np.int64)
        self.convert = block.data.dtype != np.float64
        largest = int(np.diff(self.starts).max()) if self.bounds.shape[0] > 1 else 0
        self.scratch = np.empty(largest) if self.convert else None

    def __iter__(self) -> Any:
        indptr, indices, data = self.block.indptr, self.block.indices, self.block.data
        index_type = indices.dtype
        for k in range(self.bounds.shape[0] - 1):
            r0, r1 = int(self.bounds[k]), int(self.bounds[k + 1])
            s, e = int(self.starts[k]), int(self.starts[k + 1])
            pointers = (indptr[r0 : r1 + 1] - indptr[r0]).astype(index_type, copy=False)
            if self.convert:
                values = self.scratch[: e - s]  # type: ignore[index]
                np.copyto(values, data[s:e], casting="safe")  # float32 -> float64 is exact
            else:
                values = data[s:e]
            yield r0, r1, pointers, indices[s:e], values


def _matrix(x: np.ndarray) -> bool:
    return x.ndim == 2


def _check(x: np.ndarray, length: int) -> None:
    """scipy's operators check shapes; the compiled loops read whatever they are given."""
    if x.ndim not in (1, 2) or x.shape[0] != length:
        raise ValueError(f"dimension mismatch: an operand of shape {x.shape} against {length} rows or columns")


def times(block: Any, x: np.ndarray, *, chunk: int = CHUNK) -> np.ndarray:
    """``block @ x`` as float64 (``x``: a float64 vector of length d, or d×k)."""
    x = np.asarray(x)
    if not chunked(block) or x.dtype != np.float64 or block.data.dtype == np.float64:
        return np.asarray(block @ x, dtype=np.float64)
    n, d = block.shape
    _check(x, d)
    x = np.ascontiguousarray(x)
    out = np.zeros((n, x.shape[1]) if _matrix(x) else n)
    for r0, r1, pointers, indices, values in _Chunks(block, chunk):
        if _matrix(x):
            _sparsetools.csr_matvecs(r1 - r0, d, x.shape[1], pointers, indices, values, x.ravel(),
                                     out[r0:r1].ravel())
        else:
            _sparsetools.csr_matvec(r1 - r0, d, pointers, indices, values, x, out[r0:r1])
    return out


def transpose_times(block: Any, w: np.ndarray, *, chunk: int = CHUNK) -> np.ndarray:
    """``block.T @ w`` as float64 (``w``: a float64 vector of length n, or n×k)."""
    w = np.asarray(w)
    if not chunked(block) or w.dtype != np.float64 or block.data.dtype == np.float64:
        return np.asarray(block.T @ w, dtype=np.float64)
    d = block.shape[1]
    _check(w, block.shape[0])
    w = np.ascontiguousarray(w)
    out = np.zeros((d, w.shape[1]) if _matrix(w) else d)
    for r0, r1, pointers, indices, values in _Chunks(block, chunk):
        if _matrix(w):
            _sparsetools.csc_matvecs(d, r1 - r0, w.shape[1], pointers, indices, values, w[r0:r1].ravel(),
                                     out.ravel())
        else:
            _sparsetools.csc_matvec(d, r1 - r0, pointers, indices, values, w[r0:r1], out)
    return out


def sweep(block: Any, factors: np.ndarray, x: np.ndarray, *,
          chunk: int = CHUNK) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The private step's two products in one pass over ``block`` (a :func:`chunked` block; ``x`` a vector), each
    chunk's values converted once for both.

    Returns ``p = f ⊙ (Ax)``, ``w = f ⊙ p`` and ``Aᵀw``, each float64 and equal to the unfused
    ``f * (block @ x)``, ``f * p`` and ``block.T @ w``.
    """
    n, d = block.shape
    x = np.ascontiguousarray(x, dtype=np.float64)
    _check(x, d)
    if x.ndim != 1 or factors.shape != (n,):
        raise ValueError(f"sweep needs a vector of length {d} and {n} factors; got {x.shape} and {factors.shape}")
    projections = np.zeros(n)
    weights = np.empty(n)
    out = np.zeros(d)
    for r0, r1, pointers, indices, values in _Chunks(block, chunk):
        p, w, f = projections[r0:r1], weights[r0:r1], factors[r0:r1]
        _sparsetools.csr_matvec(r1 - r0, d, pointers, indices, values, x, p)
        np.multiply(f, p, out=p)
        np.multiply(f, p, out=w)
        _sparsetools.csc_matvec(d, r1 - r0, pointers, indices, values, w, out)
    return projections, weights, out
