"""Kernels of the tensor power method (seed 002): exact contractions, no noise, no Dask.

Explicit symmetric tensors (small d, numpy), the low-rank deflation part ``D = Σ_j λ_j v_j^{⊗3}``, and the
contractions of moment tensors computed from one partition of rows without forming d² or d³ numbers (spec §4):

- the raw third moment ``Σ_ℓ x_ℓ^{⊗3}``: batched over the L columns of ``U`` with ``P = XU``,
  ``T(I,u,u) = Xᵀ(P∘P)`` and ``T(u,u,u) = Σ P∘³`` (sums; the caller divides by n where n is public);
- the third moment of a document's *distinct word positions* (the U-statistic of the single-topic / LDA method of
  moments, Anandkumar et al. 2014): for counts ``c`` with ``ℓ = Σc ≥ 3`` the tensor
  ``(c^{⊗3} − Σ_sym c_i c_j e_i⊗e_i⊗e_j + 2 Σ_i c_i e_i^{⊗3}) / (ℓ(ℓ−1)(ℓ−2))`` is a probability tensor over
  ordered triples of distinct positions; its contraction with ``(I, v, v)`` is
  ``(c s² − 2 (c∘v) s − c (cᵀv∘²) + 2 c∘v∘²) / (ℓ(ℓ−1)(ℓ−2))`` with ``s = cᵀv``;
- the second moment of distinct pairs: ``(ccᵀ − diag c) / (ℓ(ℓ−1))`` times a d×k matrix ``Y``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.kernels import _sparse
from dppca_dask.kernels.power import clip_factors

__all__ = [
    "MAX_COUNT",
    "count_violation",
    "deflation_scalar",
    "deflation_vector",
    "dense_scalar",
    "dense_vector",
    "first_partial",
    "moment_partial",
    "pair_partial",
    "topic_partial",
    "whitened_topic_partial",
]


def dense_vector(tensor: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``T(I,u,u)`` for each column of ``u`` (d or d×L): ``einsum('ijk,jl,kl->il')``."""
    if u.ndim == 1:
        return np.einsum("ijk,j,k->i", tensor, u, u)
    return np.einsum("ijk,jl,kl->il", tensor, u, u)


def dense_scalar(tensor: np.ndarray, u: np.ndarray) -> Any:
    """``T(u,u,u)`` for each column of ``u`` (d or d×L)."""
    if u.ndim == 1:
        return float(u @ dense_vector(tensor, u))
    return np.einsum("il,il->l", u, dense_vector(tensor, u))


def deflation_vector(weights: np.ndarray, vectors: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``D(I,u,u) = V (λ ∘ (Vᵀu)∘²)`` for ``D = Σ_j λ_j v_j^{⊗3}`` (``vectors`` d×j), for each column of ``u``."""
    if vectors.shape[1] == 0:
        return np.zeros_like(u, dtype=np.float64)
    xi = vectors.T @ u
    return vectors @ (weights[:, None] * xi * xi) if u.ndim == 2 else vectors @ (weights * xi * xi)


def deflation_scalar(weights: np.ndarray, vectors: np.ndarray, u: np.ndarray) -> Any:
    """``D(u,u,u) = Σ_j λ_j (v_jᵀu)³`` for each column of ``u``."""
    if vectors.shape[1] == 0:
        return np.zeros(u.shape[1]) if u.ndim == 2 else 0.0
    xi = vectors.T @ u
    return weights @ (xi**3)


def moment_partial(
    block: Any, norms: np.ndarray, u: np.ndarray, *, row_norm_bound: float = np.inf
) -> tuple[np.ndarray, np.ndarray]:
    """``(Σ_ℓ (x_ℓᵀu)² x_ℓ, Σ_ℓ (x_ℓᵀu)³)`` for each column of ``u`` (d×L), rows clipped to ``row_norm_bound``.

    Memory: the n×L product ``P`` and the d×L result, never d² (``P = XU``, ``Xᵀ(P∘P)``).
    """
    factors = clip_factors(norms, row_norm_bound)
    p = _sparse.times(block, u) * factors[:, None]
    square = p * p
    vector = _sparse.transpose_times(block, square * factors[:, None])
    return vector, (square * p).sum(axis=0)


def _lengths(block: Any) -> np.ndarray:
    """Each row's sum, accumulated in float64 whatever the block's value type."""
    if not sp.issparse(block):
        return np.asarray(block, dtype=np.float64).sum(axis=1)
    if block.dtype != np.float64 and _sparse.chunked(block):
        return _sparse.times(block, np.ones(block.shape[1]))
    return np.asarray(block.astype(np.float64, copy=False).sum(axis=1), dtype=np.float64).ravel()


def _weights(lengths: np.ndarray, order: int) -> np.ndarray:
    """``1/(ℓ(ℓ−1)…(ℓ−order+1))`` for documents with ``ℓ ≥ order``, 0 for shorter ones."""
    out = np.zeros_like(lengths)
    ok = lengths >= order
    denominator = np.ones(int(ok.sum()))
    for j in range(order):
        denominator *= lengths[ok] - j
    out[ok] = 1.0 / denominator
    return out


def topic_partial(block: Any, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sums over documents of the distinct-triples tensor contracted with ``(I, v, v)`` and ``(v, v, v)``.

    ``block`` holds word counts (documents × words); ``v`` is d×L. Returns the d×L vector sums and the L scalar
    sums; documents shorter than three words contribute nothing. Each document's contribution is the contraction
    of a probability tensor, so ``‖W ᵀ·‖`` of it is at most ``max_i ‖Wᵀe_i‖ · max_j (e_jᵀWu)²`` for ``v = Wu``.
    """
    w = _weights(_lengths(block), 3)
    s = _sparse.times(block, v)  # n×L, cᵀv
    q = _sparse.times(block, (v * v))  # n×L, cᵀv∘²
    r = _sparse.times(block, (v * v * v))  # n×L, cᵀv∘³
    weighted_lengths = _sparse.transpose_times(block, w)  # Σ w c (d)
    vector = (
        _sparse.transpose_times(block, (w[:, None] * s * s))
        - 2.0 * _sparse.transpose_times(block, (w[:, None] * s)) * v
        - _sparse.transpose_times(block, (w[:, None] * q))
        + 2.0 * weighted_lengths[:, None] * v * v
    )
    scalar = (w[:, None] * (s**3 - 3.0 * s * q + 2.0 * r)).sum(axis=0)
    return vector, scalar


def whitened_topic_partial(
    block: Any, v: np.ndarray, whiten: np.ndarray, clip: np.ndarray,
    lda: tuple[float, np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Like :func:`topic_partial` but in the whitened space: ``Σ_docs f_doc · Wᵀ P3_doc(I, v, v)`` (k×L), each
    document's k-vector scaled by ``f = min(1, clip_τ/‖·‖)`` (per column τ), and the scalars with the same factors.

    Per document and column: ``Wᵀ(c s² − 2 (c∘v) s − c q + 2 c∘v∘²)/(ℓ(ℓ−1)(ℓ−2))`` from ``CW``, ``C(W∘v)`` and
    ``C(W∘v∘²)`` (n×k each), never a d×d matrix.

    With ``lda = (b, m1v, wm1)`` (LDA's α₀ correction: ``b = α₀/(α₀+2)``, ``m1v = M̂1ᵀv`` per column and
    ``wm1 = WᵀM̂1``, released values), each document's vector is the corrected one,
    ``Wᵀ P3_doc(I,v,v) − b(2·m1v·Wᵀ P2_doc v + (vᵀP2_doc v)·wm1)``, and its scalar
    ``P3_doc(v,v,v) − 3b·m1v·vᵀP2_doc v`` (``P2_doc`` over ordered pairs of distinct positions, ``1/(ℓ(ℓ−1))``,
    documents of at least three words), clipped as a whole.
    """
    lengths = _lengths(block)
    w = _weights(lengths, 3)
    w2 = _weights(lengths, 2) * (lengths >= 3)
    s = _sparse.times(block, v)
    q = _sparse.times(block, (v * v))
    r = _sparse.times(block, (v * v * v))
    cw = _sparse.times(block, whiten)  # n×k
    n_cols = v.shape[1]
    vector = np.zeros((whiten.shape[1], n_cols))
    scalar = np.zeros(n_cols)
    for tau in range(n_cols):
        cwv = _sparse.times(block, (whiten * v[:, tau, None]))
        cwv2 = _sparse.times(block, (whiten * (v[:, tau, None] ** 2)))
        st, qt = s[:, tau], q[:, tau]
        g = w[:, None] * (cw * (st * st - qt)[:, None] - 2.0 * cwv * st[:, None] + 2.0 * cwv2)
        h = w * (st**3 - 3.0 * st * qt + 2.0 * r[:, tau])
        if lda is not None:
            b, m1v, wm1 = lda
            pairs = w2[:, None] * (cw * st[:, None] - cwv)  # Wᵀ P2_doc v
            quadratic = w2 * (st * st - qt)  # vᵀ P2_doc v
            g = g - b * (2.0 * m1v[tau] * pairs + quadratic[:, None] * np.asarray(wm1)[None, :])
            h = h - 3.0 * b * m1v[tau] * quadratic
        norms = np.linalg.norm(g, axis=1)
        factor = np.where(norms > clip[tau], clip[tau] / np.where(norms > 0, norms, 1.0), 1.0)
        vector[:, tau] = (factor[:, None] * g).sum(axis=0)
        scalar[tau] = (factor * h).sum()
    return vector, scalar


def pair_partial(block: Any, y: np.ndarray, *, min_length: int = 2, clip: float | None = None) -> np.ndarray:
    """``Σ_docs f·(ccᵀ − diag c)/(ℓ(ℓ−1)) · Y`` for ``Y`` d×k over documents of at least ``min_length`` (≥ 2) words.

    Each document's matrix is a probability matrix over ordered pairs of distinct positions (Frobenius norm ≤ 1),
    so its product with an orthonormal ``Y`` has Frobenius norm ≤ 1. With ``clip``, each document's product is
    scaled by ``f = min(1, clip/‖P2_doc Y‖_F)`` so that it has Frobenius norm at most ``clip``.
    """
    lengths = _lengths(block)
    w = _weights(lengths, 2) * (lengths >= min_length)
    cy = _sparse.times(block, y)
    if clip is not None:
        # ‖c(cᵀY) − c∘Y‖_F² = ‖c‖²‖cᵀY‖² − 2 Σ_i c_i² Y_i·(cᵀY) + Σ_i c_i² ‖Y_i‖²
        values = block.astype(np.float64, copy=False)  # squares and their sums in float64 (float32 blocks too)
        squared = values.multiply(values) if sp.issparse(values) else np.asarray(values) ** 2
        c2y = np.asarray(squared @ y, dtype=np.float64)
        c_norm2 = np.asarray(squared.sum(axis=1), dtype=np.float64).ravel()
        frob2 = (c_norm2 * (cy * cy).sum(axis=1) - 2.0 * (c2y * cy).sum(axis=1)
                 + np.asarray(squared @ (y * y).sum(axis=1), dtype=np.float64).ravel())
        norms = w * np.sqrt(np.maximum(frob2, 0.0))
        with np.errstate(divide="ignore"):
            w = w * np.where(norms > clip, clip / np.where(norms > 0, norms, 1.0), 1.0)
    return _sparse.transpose_times(block, (w[:, None] * cy)) - _sparse.transpose_times(block, w)[:, None] * y


def first_partial(block: Any, *, min_length: int = 3) -> np.ndarray:
    """``(Σ c/ℓ, count)`` over documents of at least ``min_length`` words: d + 1 numbers.

    Each document adds a probability vector (L2 norm ≤ 1) and 1 to the count, so the whole moves by at most √2.
    """
    lengths = _lengths(block)
    keep = lengths >= max(min_length, 1)
    inverse = np.zeros_like(lengths)
    inverse[keep] = 1.0 / lengths[keep]
    return np.append(_sparse.transpose_times(block, inverse), float(keep.sum()))


#: The largest word count accepted: 2^53, the end of the float64 integers that are all exact. Larger counts would
#: overflow the distinct-triples weights ``1/(ℓ(ℓ−1)(ℓ−2))`` and products like ``(cᵀv)³`` to inf or NaN mid-run.
MAX_COUNT = float(2**53)


def count_violation(block: Any) -> int:
    """Index of the first row with a negative, non-integer or too large (> :data:`MAX_COUNT`) count, or -1 (word
    counts must be whole numbers in [0, 2^53])."""
    values = block.data if sp.issparse(block) else np.asarray(block).ravel()
    bad = (values < 0) | (values != np.round(values)) | (values > MAX_COUNT)
    if not bad.any():
        return -1
    if sp.issparse(block):
        position = int(np.argmax(bad))
        return int(np.searchsorted(block.indptr, position, side="right") - 1)
    return int(np.argmax(bad) // np.asarray(block).shape[1])
