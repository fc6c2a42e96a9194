"""Coherence of matrices and vectors (Hardt & Roth 2012 and 2013), for evaluation and generated data only.

**Not private.** Every function here reads the exact matrix. Use them to describe public or generated data, to
evaluate a mechanism, or to choose test parameters; never pass a value computed here from private data to a
mechanism (as ``coherence=``, a pruning threshold, ...): that would spend no budget and leak. A private choice of
C is the C-doubling wrapper of private power iteration (``c_doubling=True``).

Definitions (seed 000 spec §0.6, seed 003 spec §2), for ``A = U Σ Vᵀ`` (m×n):

- μ-coherence (Def. 2.7): ``μ(A) = max(m·‖U‖²_∞, n·‖V‖²_∞)`` over the **thin** SVD (the r singular vectors with
  nonzero singular value), which reproduces the paper's numbers; ``full=True`` uses full orthogonal bases.
  ``1 ≤ μ ≤ max(m, n)``.
- μ₀-coherence (Def. 5.2/5.5): ``μ₀(U) = (m/r)·max_j ‖U_(j)‖²`` for U with r orthonormal columns; of a matrix,
  of its thin left factor. ``μ₀ ≤ μ``, ``1 ≤ μ₀ ≤ m/r``.
- top-k coherence (Def. C.1): μ restricted to the top k singular pairs; ``μ_k ≤ μ``.
- C-coherence (seed 003, Def. 5.1): ``C(A) = sqrt(m)·max_i ‖A_(i)‖₂ / ‖A‖_F``, in ``[1, sqrt(m)]``.
- the coherence of a vector, ``N·‖x‖²_∞/‖x‖²``: the smallest C for which x passes the check of private power
  iteration.

Numerical rank uses numpy's ``matrix_rank`` tolerance (``max(m, n)·eps·σ₁``) unless ``rank`` is given.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.errors import InvalidInputError, InvalidParameterError

__all__ = [
    "c_coherence",
    "embedding_coherence",
    "mu0_coherence",
    "mu_coherence",
    "top_k_coherence",
    "vector_coherence",
]

#: Largest matrix (entries) these helpers densify.
MAX_DENSE_ENTRIES = 200_000_000


def _dense(matrix: Any) -> np.ndarray:
    if sp.issparse(matrix):
        if matrix.shape[0] * matrix.shape[1] > MAX_DENSE_ENTRIES:
            raise InvalidInputError(
                f"coherence helpers densify the matrix; {matrix.shape[0]}x{matrix.shape[1]} is too large"
            )
        return np.asarray(matrix.toarray(), dtype=np.float64)
    arr = np.asarray(matrix, dtype=np.float64)
    if arr.ndim != 2:
        raise InvalidInputError(f"expected a 2-D matrix; got {arr.ndim} dimensions")
    return arr


def _svd(matrix: Any, rank: int | None, full: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    a = _dense(matrix)
    u, s, vt = np.linalg.svd(a, full_matrices=full)
    if rank is None:
        tol = (s[0] if s.size else 0.0) * max(a.shape) * np.finfo(np.float64).eps
        rank = int(np.sum(s > tol))
    elif not 1 <= rank <= min(a.shape):
        raise InvalidParameterError(f"rank must be in [1, {min(a.shape)}]; got {rank}")
    return u, s, vt, rank


def mu_coherence(matrix: Any, *, rank: int | None = None, full: bool = False) -> float:
    """μ(A) = ``max(m·‖U‖²_∞, n·‖V‖²_∞)`` (Def. 2.7 of Hardt & Roth 2013); not private (module docstring).

    Parameters
    ----------
    matrix
        Dense or sparse m×n.
    rank
        Use the top ``rank`` singular vectors (default: the numerical rank, i.e. the thin SVD).
    full
        Use the full orthogonal bases instead (then ``rank`` is ignored).
    """
    u, _s, vt, r = _svd(matrix, rank, full)
    m, n = u.shape[0], vt.shape[1]
    if not full:
        u, vt = u[:, :r], vt[:r]
    if u.size == 0:
        return 1.0
    return float(max(m * np.max(u * u), n * np.max(vt * vt)))


def top_k_coherence(matrix: Any, k: int) -> float:
    """μ_k(A) = ``max_{i ≤ k} max(m‖u_i‖²_∞, n‖v_i‖²_∞)`` (Def. C.1); ``μ_k ≤ μ``. Not private."""
    return mu_coherence(matrix, rank=k)


def mu0_coherence(basis: Any, *, is_basis: bool | None = None, rank: int | None = None) -> float:
    """μ₀ = ``(m/r)·max_j ‖U_(j)‖²`` of an orthonormal m×r basis, or of a matrix's thin left factor. Not private.

    Parameters
    ----------
    basis
        An m×r matrix with orthonormal columns, or any matrix (its thin left singular factor is used).
    is_basis
        Whether ``basis`` already has orthonormal columns (default: detected to 1e-8).
    rank
        For a matrix: the number of singular vectors (default: numerical rank).
    """
    a = _dense(basis)
    if is_basis is None:
        gram = a.T @ a
        is_basis = bool(np.allclose(gram, np.eye(gram.shape[0]), atol=1e-8))
    if is_basis:
        u = a
    else:
        u_full, _s, _vt, r = _svd(a, rank, False)
        u = u_full[:, :r]
    m, r = u.shape
    if r == 0:
        return 1.0
    return float(m / r * np.max(np.sum(u * u, axis=1)))


def c_coherence(matrix: Any) -> float:
    """C(A) = ``sqrt(m)·max_i ‖A_(i)‖₂ / ‖A‖_F`` (Def. 5.1 of Hardt & Roth 2012); works on sparse input. Not private."""
    if sp.issparse(matrix):
        csr = sp.csr_array(matrix, dtype=np.float64)
        norms = np.sqrt(np.asarray(csr.multiply(csr).sum(axis=1)).ravel())
    else:
        a = _dense(matrix)
        norms = np.linalg.norm(a, axis=1)
    total = float(np.linalg.norm(norms))
    if total == 0.0:
        raise InvalidInputError("C-coherence is undefined for the zero matrix")
    return float(np.sqrt(norms.size) * np.max(norms) / total)


def vector_coherence(x: Any) -> float:
    """``N·‖x‖²_∞/‖x‖²``: the smallest C for which x passes the ∞-norm check of private power iteration."""
    v = np.asarray(x, dtype=np.float64).ravel()
    norm2 = float(v @ v)
    if norm2 == 0.0:
        raise InvalidInputError("the coherence of the zero vector is undefined")
    return float(v.size * np.max(v * v) / norm2)


def embedding_coherence(matrix: Any) -> float:
    """Coherence of the top eigenvector ``(u₁, v₁)/sqrt(2)`` of ``B = [[0, A], [Aᵀ, 0]]`` (N = m + n). Not private.

    ``N·max(‖u₁‖²_∞, ‖v₁‖²_∞)/2``: the C private power iteration on the embedding needs for its limit vector.
    """
    a = _dense(matrix)
    u, _s, vt = np.linalg.svd(a, full_matrices=False)
    n_total = a.shape[0] + a.shape[1]
    return float(n_total * max(np.max(u[:, 0] ** 2), np.max(vt[0] ** 2)) / 2.0)
