"""Error metrics for tests and benchmarks: angles, Frobenius and spectral errors of (factored) approximations.

These compare a release with the exact matrix, so they are **not private**: use them on public or generated data,
or to evaluate a mechanism, never to publish a statement about private data. Sign- and basis-invariant where it
matters (singular vectors have arbitrary signs). Approximations may be given dense (an array) or factored as a
``(left, right)`` pair with ``B = left @ right``; factored forms are never materialised, so an n_rows×k by k×d
approximation of a large sparse matrix costs O((n_rows + d)·k²) memory.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy import linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from dppca_dask.errors import InvalidParameterError

__all__ = [
    "best_rank_error",
    "frobenius_error",
    "sin2",
    "spectral_error",
    "subspace_sin2",
    "top_singular",
]

Approximation = np.ndarray | tuple[np.ndarray, np.ndarray]


def sin2(u: Any, v: Any) -> float:
    """Squared sine of the angle between two vectors (sign-invariant; 0 for parallel, 1 for orthogonal)."""
    a = np.asarray(u, dtype=np.float64).ravel()
    b = np.asarray(v, dtype=np.float64).ravel()
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        raise InvalidParameterError("sin2 of a zero vector is undefined")
    cos = float(a @ b) / (na * nb)
    return float(min(1.0, max(0.0, 1.0 - cos * cos)))


def _columns(x: Any) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    return a[:, None] if a.ndim == 1 else a


def subspace_sin2(u: Any, v: Any) -> float:
    """Squared sine of the largest principal angle between the column spans of ``u`` and ``v`` (any bases).

    ``scipy.linalg.subspace_angles`` (Knyazev & Argentati's algorithm: accurate for small angles too, where
    ``1 − cos²`` rounds to 0).
    """
    angles = linalg.subspace_angles(_columns(u), _columns(v))
    largest = float(np.max(angles)) if angles.size else 0.0
    return float(min(1.0, max(0.0, math.sin(largest) ** 2)))


def _frob2(a: Any) -> float:
    if sp.issparse(a):
        data = a.data if hasattr(a, "data") else sp.csr_array(a).data
        return float(np.dot(data, data))
    arr = np.asarray(a, dtype=np.float64)
    return float(np.vdot(arr, arr))


def frobenius_error(matrix: Any, approximation: Approximation) -> float:
    """``‖A − B‖_F`` for a dense or sparse A and a dense or factored B.

    A dense A with a dense (or small factored) B is subtracted directly (exact to rounding); otherwise
    ``‖A‖² − 2⟨LᵀA, R⟩ + ⟨LᵀL, RRᵀ⟩`` is evaluated without forming B (rounding error relative to ``‖A‖_F²``).
    """
    if isinstance(approximation, tuple):
        left, right = (np.asarray(f, dtype=np.float64) for f in approximation)
        if not sp.issparse(matrix) and left.shape[0] * right.shape[1] <= 50_000_000:
            return float(np.linalg.norm(np.asarray(matrix, dtype=np.float64) - left @ right))
        cross = np.asarray(sp.csr_array(matrix).T @ left if sp.issparse(matrix) else np.asarray(matrix).T @ left).T
        value = _frob2(matrix) - 2.0 * float(np.vdot(cross, right)) + float(np.vdot(left.T @ left, right @ right.T))
        return float(np.sqrt(max(value, 0.0)))
    dense = np.asarray(approximation, dtype=np.float64)
    a = matrix.toarray() if sp.issparse(matrix) else np.asarray(matrix, dtype=np.float64)
    return float(np.linalg.norm(a - dense))


def spectral_error(matrix: Any, approximation: Approximation) -> float:
    """``‖A − B‖₂`` (largest singular value of the difference); dense for small inputs, else Lanczos (ARPACK)."""
    if isinstance(approximation, tuple):
        left, right = (np.asarray(f, dtype=np.float64) for f in approximation)
    else:
        left, right = np.asarray(approximation, dtype=np.float64), None
    m, n = matrix.shape
    if m * n <= 4_000_000:
        a = matrix.toarray() if sp.issparse(matrix) else np.asarray(matrix, dtype=np.float64)
        b = left if right is None else left @ right
        return float(np.linalg.norm(a - b, 2))
    a_op = sp.csr_array(matrix) if sp.issparse(matrix) else np.asarray(matrix, dtype=np.float64)

    def matvec(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x).ravel()
        b_x = left @ x if right is None else left @ (right @ x)
        return np.asarray(a_op @ x).ravel() - b_x

    def rmatvec(y: np.ndarray) -> np.ndarray:
        y = np.asarray(y).ravel()
        b_y = left.T @ y if right is None else right.T @ (left.T @ y)
        return np.asarray(a_op.T @ y).ravel() - b_y

    op = spla.LinearOperator((m, n), matvec=matvec, rmatvec=rmatvec, dtype=np.float64)
    s = spla.svds(op, k=1, return_singular_vectors=False, random_state=0)
    return float(s[0])


def top_singular(matrix: Any, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The top ``k`` singular triplets ``(U, s, Vt)`` of a dense or sparse matrix (s descending)."""
    m, n = matrix.shape
    if not 1 <= k <= min(m, n):
        raise InvalidParameterError(f"k must be in [1, {min(m, n)}]; got {k}")
    if m * n <= 4_000_000 or k >= min(m, n) - 1:
        a = matrix.toarray() if sp.issparse(matrix) else np.asarray(matrix, dtype=np.float64)
        u, s, vt = np.linalg.svd(a, full_matrices=False)
        return u[:, :k], s[:k], vt[:k]
    u, s, vt = spla.svds(sp.csr_array(matrix, dtype=np.float64), k=k, random_state=0)
    order = np.argsort(s)[::-1]
    return u[:, order], s[order], vt[order]


def best_rank_error(matrix: Any, rank: int, *, ord: str = "fro") -> float:
    """``‖A − A_r‖`` of the best rank-r approximation: Frobenius (``"fro"``) or spectral (``"2"``, i.e. σ_{r+1})."""
    if ord not in ("fro", "2"):
        raise InvalidParameterError(f"ord must be 'fro' or '2'; got {ord!r}")
    m, n = matrix.shape
    if rank >= min(m, n):
        return 0.0
    if ord == "2":
        _u, s, _vt = top_singular(matrix, rank + 1)
        return float(s[rank])
    u, s, vt = top_singular(matrix, rank)
    return frobenius_error(matrix, (u * s, vt))
