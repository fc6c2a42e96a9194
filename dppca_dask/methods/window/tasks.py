"""Downstream tasks of a window release: pure post-processing of the one released matrix (seed 001, A7–A10).

Every function takes the released ``d×d`` (or ``(d+1)×(d+1)`` with the label column) matrix and public
parameters, never the data nor any structure built from it, so none of them costs privacy budget.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError

__all__ = [
    "directional_variance",
    "nonnegative_pca",
    "psd_projection",
    "regression",
    "regression_diagnostics",
    "sparse_pca",
    "top_components",
]


def psd_projection(matrix: np.ndarray) -> np.ndarray:
    """The nearest PSD matrix in Frobenius norm: negative eigenvalues set to 0."""
    values, vectors = np.linalg.eigh((matrix + matrix.T) / 2.0)
    out = (vectors * np.clip(values, 0.0, None)) @ vectors.T
    return (out + out.T) / 2.0


def _check_k(k: int, dim: int, name: str = "n_components") -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= dim:
        raise InvalidParameterError(f"{name} must be an integer in [1, {dim}]; got {k!r}")
    return int(k)


def _sign_fixed(vectors: np.ndarray) -> np.ndarray:
    """Rows with the largest-magnitude entry positive (a deterministic sign, for stable output)."""
    idx = np.argmax(np.abs(vectors), axis=1)
    signs = np.sign(vectors[np.arange(vectors.shape[0]), idx])
    signs[signs == 0] = 1.0
    return vectors * signs[:, None]


def top_components(matrix: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-k eigenpairs: ``(eigenvalues (k,), components (k, d) unit rows)``, largest first."""
    k = _check_k(k, matrix.shape[0])
    values, vectors = np.linalg.eigh((matrix + matrix.T) / 2.0)
    order = np.argsort(values)[::-1][:k]
    return values[order], _sign_fixed(vectors[:, order].T)


def directional_variance(matrix: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``xᵀCx`` for each row x of ``x`` (one vector or a ``q×d`` array); Thm 15 / Thm 5."""
    xs = np.atleast_2d(np.asarray(x, dtype=np.float64))
    if xs.ndim != 2 or xs.shape[1] != matrix.shape[0]:
        raise InvalidParameterError(
            f"x must be a vector of length {matrix.shape[0]} or an array of such rows; got shape {np.shape(x)}"
        )
    if not np.isfinite(xs).all():
        raise InvalidParameterError("x must be finite")
    out = np.einsum("qi,ij,qj->q", xs, matrix, xs)
    return out[0] if np.ndim(x) == 1 else out


def _check_ridge(ridge: float) -> float:
    if isinstance(ridge, bool) or not isinstance(ridge, (int, float, np.floating, np.integer)) or not (
            np.isfinite(ridge) and ridge >= 0):
        raise InvalidParameterError(f"ridge must be finite and >= 0 (or 'auto'); got {ridge!r}")
    return float(ridge)


def regression(matrix: np.ndarray, *, ridge: float = 0.0) -> np.ndarray:
    """Least squares from the released ``[[C_AA, C_AB], [C_BA, C_BB]]`` (label last): ``(C_AA + ridge·I)⁻¹C_AB``.

    Thm 8 (A10). A debiased release may have an indefinite ``C_AA``; it is projected onto the PSD cone and a
    ``ridge`` ≥ 0 (public) is added. A singular system is solved in the least-squares sense.
    """
    ridge = _check_ridge(ridge)
    if matrix.shape[0] < 2:
        raise InvalidParameterError("regression needs the label column: release the window with task='regression'")
    caa = psd_projection(matrix[:-1, :-1]) + ridge * np.eye(matrix.shape[0] - 1)
    cab = matrix[:-1, -1]
    solution, *_ = np.linalg.lstsq(caa, cab, rcond=None)
    return np.asarray(solution)


#: The estimated relative coefficient error above which a regression fit is reported unreliable.
REGRESSION_ERROR_THRESHOLD = 0.5


def regression_diagnostics(matrix: np.ndarray, *, ridge: float, noise_scale: float) -> dict[str, Any]:
    """How far to trust :func:`regression`'s fit, from the released matrix and public values only.

    Per eigendirection of the released (PSD-projected) feature block, largest eigenvalue μ first,
    ``noise_to_signal = noise_scale / μ``: the noise's spectral scale against the direction's released variance
    (above 1 the direction is noise). Along a direction the fit's coefficient is off by about
    ``min(1, max(ridge, noise_scale)/(μ + ridge))`` of itself: the ridge shrinks it by ``μ/(μ + ridge)``, and the
    noise moves it by up to ``noise_scale/(μ + ridge)``. Averaged over the directions, weighted by the energy
    ``(u·c_AB/μ)²`` an unregularised fit would put in each, this estimates the fit's relative coefficient error to
    the exact least squares (``estimated_relative_error``, in [0, 1]); ``reliable`` is that estimate at most
    :data:`REGRESSION_ERROR_THRESHOLD`.
    """
    ridge = _check_ridge(ridge)
    values, vectors = np.linalg.eigh(psd_projection(matrix[:-1, :-1]))
    values = np.clip(values[::-1], 0.0, None)
    vectors = vectors[:, ::-1]
    along = vectors.T @ matrix[:-1, -1]
    scale = max(float(noise_scale), float(ridge), 1e-300)
    floor = 1e-6 * scale  # a direction with no released variance: its unregularised coefficient is unbounded
    energy = (along / np.maximum(values, floor)) ** 2
    shrink = np.minimum(scale / np.maximum(values + ridge, floor), 1.0)
    total = float(energy.sum())
    estimate = float(np.sqrt((energy * shrink**2).sum() / total)) if total > 0 else 1.0
    ratio = np.minimum(float(noise_scale) / np.maximum(values, floor), 1e6)
    return {
        "reliable": bool(estimate <= REGRESSION_ERROR_THRESHOLD),
        "noise_to_signal": [float(r) for r in ratio],
        "threshold": 1.0,
        "rule": ("reliable when the estimated relative coefficient error (min(1, max(ridge, noise scale)/(mu + "
                 "ridge)) along each released eigendirection of the feature covariance, weighted by the "
                 f"unregularised fit's energy in it) is at most {REGRESSION_ERROR_THRESHOLD:g}; noise_to_signal is "
                 "the noise's spectral scale over each released eigenvalue mu, largest first (above 1: noise)"),
        "estimated_relative_error": estimate,
        "ridge": float(ridge),
        "noise_scale": float(noise_scale),
    }


def _deflate(matrix: np.ndarray, x: np.ndarray) -> np.ndarray:
    proj = np.eye(matrix.shape[0]) - np.outer(x, x)
    return proj @ matrix @ proj


def sparse_pca(matrix: np.ndarray, k: int, nonzeros: int, *, n_iter: int = 200) -> np.ndarray:
    """k components with at most ``nonzeros`` non-zero entries each: truncated power iteration with deflation.

    Alg. 5 with the truncated power method of Yuan & Zhang 2013 as the non-private solver (the spec's choice).
    """
    dim = matrix.shape[0]
    k = _check_k(k, dim)
    nonzeros = _check_k(nonzeros, dim, "nonzeros")
    c = psd_projection(matrix)
    out = np.zeros((k, dim))
    for j in range(k):
        values, vectors = np.linalg.eigh(c)
        x = vectors[:, -1].copy()
        for _ in range(n_iter):
            y = c @ x
            keep = np.argsort(np.abs(y))[::-1][:nonzeros]
            z = np.zeros(dim)
            z[keep] = y[keep]
            norm = np.linalg.norm(z)
            if norm == 0:
                break
            z /= norm
            if np.allclose(z, x):
                x = z
                break
            x = z
        if not np.any(x):
            x = np.zeros(dim)
            x[j % dim] = 1.0
        keep = np.argsort(np.abs(x))[::-1][:nonzeros]
        sparse = np.zeros(dim)
        sparse[keep] = x[keep]
        sparse /= max(float(np.linalg.norm(sparse)), 1e-300)
        out[j] = sparse
        c = _deflate(c, sparse)
    return _sign_fixed(out)


def _nonnegative_power(sub: np.ndarray, n_iter: int) -> np.ndarray:
    """The projected power iteration ``x ← max(Cx, 0)/‖·‖`` from the top eigenvector's absolute values."""
    vector = np.abs(np.linalg.eigh(sub)[1][:, -1])
    x = vector if vector.sum() > 0 else np.ones(sub.shape[0])
    x = x / np.linalg.norm(x)
    for _ in range(n_iter):
        y = np.maximum(sub @ x, 0.0)
        norm = np.linalg.norm(y)
        if norm == 0:
            break
        y /= norm
        if np.allclose(y, x, rtol=0.0, atol=1e-12):
            return y
        x = y
    return x


def nonnegative_pca(matrix: np.ndarray, k: int, *, n_iter: int = 500, support_tol: float = 0.01) -> np.ndarray:
    """k non-negative unit components with disjoint supports (Alg. 5's non-negative Π).

    Each component is found on the coordinates no earlier one holds: the projected power iteration
    ``x ← max(Cx, 0)/‖·‖``, then its support cut to the fewest coordinates that hold ``1 − support_tol`` of
    ``‖x‖²`` (a coordinate with a tiny positive entry adds next to nothing to the component's variance, and would
    otherwise be taken from the later components, whose supports must be disjoint), and the iteration run again
    on that support. Components are orthogonal because their supports are disjoint. Rows left when every
    coordinate is taken are zero.
    """
    dim = matrix.shape[0]
    k = _check_k(k, dim)
    if not (isinstance(support_tol, (int, float)) and 0 <= support_tol < 1):
        raise InvalidParameterError(f"support_tol must be in [0, 1); got {support_tol!r}")
    c = psd_projection(matrix)
    free = np.ones(dim, dtype=bool)
    out = np.zeros((k, dim))
    for j in range(k):
        index = np.flatnonzero(free)
        if index.size == 0:
            break
        x = _nonnegative_power(c[np.ix_(index, index)], n_iter)
        order = np.argsort(-x, kind="stable")
        mass = np.cumsum(x[order] ** 2)
        keep = np.sort(index[order[: int(np.searchsorted(mass, (1.0 - support_tol) * mass[-1])) + 1]])
        x = _nonnegative_power(c[np.ix_(keep, keep)], n_iter)
        if not np.any(x > 0):
            x = np.zeros(keep.size)
            x[0] = 1.0
        out[j, keep] = x / np.linalg.norm(x)
        free[keep[x > 0]] = False
    return out
