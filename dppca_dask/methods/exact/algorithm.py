"""The exact, non-private answer: top right singular vectors of the clipped matrix (a baseline, not private).

For ``d ≤ max_dense_dim`` the d×d Gram matrix ``A'ᵀA'`` is reduced from the partitions and diagonalised; above
that, block subspace iteration with Rayleigh–Ritz over distributed products ``A'ᵀA'X`` (one pass per iteration).
Every output of this module is labelled non-private by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dppca_dask.coordinator.requests import AlgorithmRun, GramMatrix, GramTimes
from dppca_dask.errors import InvalidParameterError

__all__ = ["ExactOutput", "exact_run", "top_eigenpairs"]


@dataclass(frozen=True)
class ExactOutput:
    components: np.ndarray
    """k×d unit rows: the top eigenvectors of ``A'ᵀA'`` (right singular vectors of ``A'``)."""
    eigenvalues: np.ndarray
    """The k largest eigenvalues of ``A'ᵀA'`` (squared singular values)."""
    n_passes: int


def top_eigenpairs(matrix: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest eigenvalues (descending) and their eigenvectors (as rows) of a symmetric matrix."""
    values, vectors = np.linalg.eigh(matrix)
    order = np.argsort(values)[::-1][:k]
    return values[order], vectors[:, order].T.copy()


def exact_run(
    *,
    n_cols: int,
    n_components: int,
    row_norm_bound: float,
    max_dense_dim: int = 4096,
    tol: float = 1e-12,
    max_iter: int = 2000,
    seed: int = 0,
) -> AlgorithmRun[ExactOutput]:
    """Top ``n_components`` eigenpairs of ``A'ᵀA'`` (generator of requests; see the module docstring)."""
    if not 1 <= n_components <= n_cols:
        raise InvalidParameterError(f"n_components must be in [1, {n_cols}]; got {n_components}")
    if n_cols <= max_dense_dim:
        gram = yield GramMatrix(row_norm_bound=row_norm_bound)
        values, vectors = top_eigenpairs(gram, n_components)
        return ExactOutput(vectors, values, 1)
    width = min(n_cols, 2 * n_components + 8)
    rng = np.random.default_rng(seed)  # a public starting block: the output does not depend on it
    basis, _ = np.linalg.qr(rng.standard_normal((n_cols, width)))
    previous = np.full(n_components, np.inf)
    for passes in range(1, max_iter + 1):
        product = yield GramTimes(x=basis, row_norm_bound=row_norm_bound)
        ritz = basis.T @ product
        values, rotation = np.linalg.eigh((ritz + ritz.T) / 2)
        order = np.argsort(values)[::-1]
        values, rotation = values[order], rotation[:, order]
        top = values[:n_components]
        basis, _ = np.linalg.qr(product @ rotation)
        scale = max(abs(top[0]), np.finfo(float).tiny)
        if np.max(np.abs(top - previous)) <= tol * scale:
            break
        previous = top
    vectors = (basis[:, :n_components]).T.copy()
    return ExactOutput(vectors, top, passes)
