"""Generated test matrices (public, synthetic data for examples, tests and benchmarks).

``low_coherence_blocks`` reproduces the data of seed 004 spec §5: each row is ``nnz_per_row`` random sparse noise
entries plus a planted direction supported on ``support`` coordinates that carries ``signal_share`` of the row's
energy; rows have unit norm. The top direction then carries a small share of every row and the matrix is
incoherent, the regime where adaptive power iteration beats Analyze Gauss. With a large ``signal_share``
(``≳ 0.1``) the same generator gives the high-coherence-of-energy regime where it loses.

Blocks are generated independently from ``(seed, block index)``, so arbitrarily large matrices are produced in
bounded memory and in parallel, reproducibly.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.errors import InvalidParameterError

__all__ = ["PlantedSpec", "low_coherence_blocks", "low_coherence_matrix", "planted_direction", "write_low_coherence"]


@dataclass(frozen=True)
class PlantedSpec:
    """Parameters of the planted-direction generator."""

    n_rows: int
    n_cols: int
    nnz_per_row: int = 30
    support: int = 200
    signal_share: float = 0.003
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_rows < 0 or self.n_cols < 1:
            raise InvalidParameterError(f"shape must be non-negative with n_cols >= 1; got ({self.n_rows}, {self.n_cols})")
        if not 1 <= self.support <= self.n_cols:
            raise InvalidParameterError(f"support must be in [1, {self.n_cols}]; got {self.support}")
        if self.nnz_per_row < 1:
            raise InvalidParameterError(f"nnz_per_row must be >= 1; got {self.nnz_per_row}")
        if not 0.0 <= self.signal_share <= 1.0:
            raise InvalidParameterError(f"signal_share must be in [0, 1]; got {self.signal_share}")


def planted_direction(spec: PlantedSpec) -> np.ndarray:
    """The planted unit vector (dense, length d, supported on ``spec.support`` coordinates)."""
    rng = np.random.default_rng([spec.seed, 0x5EED])
    v = np.zeros(spec.n_cols)
    coords = rng.choice(spec.n_cols, size=spec.support, replace=False)
    v[coords] = rng.standard_normal(spec.support)
    return v / np.linalg.norm(v)


def _block(spec: PlantedSpec, v: np.ndarray, index: int, start: int, stop: int) -> sp.csr_array:
    rng = np.random.default_rng([spec.seed, 1, index])
    rows = stop - start
    k = spec.nnz_per_row
    cols = rng.integers(0, spec.n_cols, size=(rows, k))
    vals = rng.standard_normal((rows, k))
    vals /= np.linalg.norm(vals, axis=1, keepdims=True)
    noise = sp.csr_array(
        (vals.ravel(), (np.repeat(np.arange(rows), k), cols.ravel())), shape=(rows, spec.n_cols)
    )
    noise.sum_duplicates()
    norms = np.sqrt(np.asarray(noise.multiply(noise).sum(axis=1)).ravel())
    noise = sp.csr_array(sp.diags(1.0 / np.where(norms > 0, norms, 1.0)) @ noise)
    signs = rng.choice(np.array([-1.0, 1.0]), size=rows)
    support = np.flatnonzero(v)
    signal = sp.csr_array(
        (np.outer(signs, v[support]).ravel(), (np.repeat(np.arange(rows), support.size), np.tile(support, rows))),
        shape=(rows, spec.n_cols),
    )
    block = math.sqrt(1.0 - spec.signal_share) * noise + math.sqrt(spec.signal_share) * signal
    block = sp.csr_array(block)
    block.sum_duplicates()
    row_norms = np.sqrt(np.asarray(block.multiply(block).sum(axis=1)).ravel())
    return sp.csr_array(sp.diags(1.0 / np.where(row_norms > 0, row_norms, 1.0)) @ block)


def low_coherence_blocks(spec: PlantedSpec, *, rows_per_block: int = 50_000) -> Iterator[sp.csr_array]:
    """Yield the matrix in row blocks (each a ``csr_array`` of unit-norm rows)."""
    if rows_per_block < 1:
        raise InvalidParameterError(f"rows_per_block must be >= 1; got {rows_per_block}")
    v = planted_direction(spec)
    for index, start in enumerate(range(0, spec.n_rows, rows_per_block)):
        yield _block(spec, v, index, start, min(start + rows_per_block, spec.n_rows))


def low_coherence_matrix(spec: PlantedSpec) -> sp.csr_array:
    """The whole generated matrix in memory."""
    blocks = list(low_coherence_blocks(spec))
    if not blocks:
        return sp.csr_array((0, spec.n_cols))
    return sp.csr_array(sp.vstack(blocks, format="csr"))


def write_low_coherence(
    path: str | os.PathLike[str],
    spec: PlantedSpec,
    *,
    rows_per_partition: int | None = None,
    dtype: Any = np.float64,
    overwrite: bool = False,
    progress: bool | None = None,
    codec: str | None = None,
    nnz_chunk: int | None = None,
    storage_options: Any = None,
) -> Any:
    """Generate the matrix straight into a store (bounded memory) and return the opened store.

    ``path`` may be a URL in object storage (``s3://bucket/x.zarr``, with ``storage_options`` when the environment
    does not configure the service): the store is generated locally in a temporary directory, then uploaded with its
    root metadata last, as :func:`dppca_dask.ingest` does. ``codec`` compresses the chunks (``"none"``, ``"lz4"``,
    ``"zstd"``; ``None``: the store default, see :class:`~dppca_dask.storage.StoreWriter`); ``nnz_chunk`` is the
    entries per chunk of ``data`` and ``indices`` (``None``: the default of the destination,
    :data:`~dppca_dask.storage._format.NNZ_CHUNK` on a file system and
    :data:`~dppca_dask.storage._format.OBJECT_NNZ_CHUNK` in object storage)."""
    from dppca_dask._progress import progress_bar
    from dppca_dask._urls import check_storage_options, is_url, local_path
    from dppca_dask.storage import StoreWriter, _format
    from dppca_dask.storage._format import DEFAULT_CODEC

    options = check_storage_options(storage_options)
    if is_url(local_path(path)):
        from dppca_dask.ingest._remote import ingest_to_url

        size = _format.OBJECT_NNZ_CHUNK if nnz_chunk is None else _format.check_nnz_chunk(nnz_chunk)
        return ingest_to_url(
            lambda local: write_low_coherence(local, spec, rows_per_partition=rows_per_partition, dtype=dtype,
                                              progress=progress, codec=codec, nnz_chunk=size),
            os.fspath(path), options, overwrite=overwrite)
    if options:
        raise InvalidParameterError(
            f"storage_options apply to a URL (s3://, gs://, ...); '{os.fspath(path)}' is a local path: drop them")

    bar = progress_bar(total=spec.n_rows, desc="generating", unit="row", enabled=progress)
    try:
        with StoreWriter(
            path,
            n_cols=spec.n_cols,
            dtype=dtype,
            rows_per_partition=rows_per_partition,
            overwrite=overwrite,
            schema="declared",  # the width is the generator's public parameter
            source={"kind": "generated", "generator": "low_coherence", **spec.__dict__},
            codec=codec or DEFAULT_CODEC,
            nnz_chunk=nnz_chunk,
        ) as writer:
            for block in low_coherence_blocks(spec, rows_per_block=min(rows_per_partition or 50_000, 50_000)):
                writer.append(block)
                bar.update(block.shape[0])
            return writer.commit()
    finally:
        bar.close()


# ------------------------------------------------------------------------------------------------------------
# Test matrices of the Hardt–Roth mechanisms (seeds 000 and 003): incoherent and coherent low-rank matrices, PSD
# matrices, and the lower-bound family of seed 000 §1.5. Small and dense unless said otherwise; every generator is
# reproducible from its seed. Their coherence is known by construction (check it with dppca_dask.coherence).

__all__ += [
    "PlantedLowRank",
    "coherent_low_rank",
    "coherent_psd",
    "gaussian_factor_matrix",
    "incoherent_low_rank",
    "incoherent_psd",
    "lower_bound_matrix",
]


@dataclass(frozen=True)
class PlantedLowRank:
    """A generated matrix and its planted factors: ``matrix = left @ diag(values) @ right.T`` (+ ``noise``)."""

    matrix: Any
    """The matrix (dense ``numpy`` or, for the lower-bound family, ``scipy.sparse.csr_array``)."""
    left: np.ndarray
    """m×r orthonormal columns (the left singular vectors, or eigenvectors of a PSD matrix)."""
    values: np.ndarray
    """The r planted singular values (eigenvalues), descending."""
    right: np.ndarray
    """n×r orthonormal columns (equal to ``left`` for a PSD matrix)."""


def _rng(seed: int, tag: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), 0x4852, tag])  # "HR"


def _haar(rng: np.random.Generator, n: int, r: int) -> np.ndarray:
    q, rr = np.linalg.qr(rng.standard_normal((n, r)))
    return q * np.sign(np.diag(rr))


def _spiky(rng: np.random.Generator, n: int, r: int, support: int) -> np.ndarray:
    """r orthonormal columns, each supported on ``support`` coordinates (disjoint when they fit, else shared)."""
    if not 1 <= support <= n:
        raise InvalidParameterError(f"support must be in [1, {n}]; got {support}")
    out = np.zeros((n, r))
    perm = rng.permutation(n)
    if support * r <= n:  # disjoint supports: coherence exactly n/support
        for i in range(r):
            rows = perm[i * support : (i + 1) * support]
            out[rows, i] = rng.choice(np.array([-1.0, 1.0]), size=support) / np.sqrt(support)
        return out
    if r > support:
        raise InvalidParameterError(f"rank {r} exceeds the support {support}; raise the support")
    rows = perm[:support]
    out[rows] = _haar(rng, support, r)
    return out


def _check_values(values: Any, name: str = "singular_values") -> np.ndarray:
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size < 1 or np.any(v < 0) or not np.all(np.isfinite(v)):
        raise InvalidParameterError(f"{name} must be finite, >= 0 and non-empty; got {values!r}")
    return np.sort(v)[::-1]


def incoherent_low_rank(
    n_rows: int, n_cols: int, singular_values: Any, *, noise: float = 0.0, seed: int = 0
) -> PlantedLowRank:
    """``U·diag(s)·Vᵀ`` with Haar-random orthonormal U, V (μ = O(log n)), plus optional i.i.d. ``N(0, noise²)``."""
    s = _check_values(singular_values)
    rng = _rng(seed, 1)
    u, v = _haar(rng, n_rows, s.size), _haar(rng, n_cols, s.size)
    matrix = (u * s) @ v.T
    if noise:
        matrix = matrix + noise * rng.standard_normal((n_rows, n_cols))
    return PlantedLowRank(matrix, u, s, v)


def coherent_low_rank(
    n_rows: int,
    n_cols: int,
    singular_values: Any,
    *,
    row_support: int,
    col_support: int | None = None,
    noise: float = 0.0,
    seed: int = 0,
) -> PlantedLowRank:
    """Low rank with spiky singular vectors: each left one on ``row_support`` rows (μ ≈ n_rows/row_support).

    Right singular vectors are supported on ``col_support`` columns (default: all, i.e. Haar-random).
    """
    s = _check_values(singular_values)
    rng = _rng(seed, 2)
    u = _spiky(rng, n_rows, s.size, row_support)
    v = _haar(rng, n_cols, s.size) if col_support is None else _spiky(rng, n_cols, s.size, col_support)
    matrix = (u * s) @ v.T
    if noise:
        matrix = matrix + noise * rng.standard_normal((n_rows, n_cols))
    return PlantedLowRank(matrix, u, s, v)


def gaussian_factor_matrix(n_rows: int, n_cols: int, rank: int, *, scale: float = 1.0, seed: int = 0) -> PlantedLowRank:
    """``scale·G₁G₂ᵀ/sqrt(r)`` with i.i.d. N(0, 1) factors (seed 003 spec §5.3): entries ≈ N(0, scale²), incoherent.

    The returned ``left``, ``values``, ``right`` are the exact thin SVD of the matrix.
    """
    if rank < 1:
        raise InvalidParameterError(f"rank must be >= 1; got {rank}")
    rng = _rng(seed, 3)
    g1 = rng.standard_normal((n_rows, rank))
    g2 = rng.standard_normal((n_cols, rank))
    q1, r1 = np.linalg.qr(g1)
    q2, r2 = np.linalg.qr(g2)
    core = scale * (r1 @ r2.T) / np.sqrt(rank)
    uc, s, vct = np.linalg.svd(core)
    left, right = q1 @ uc, q2 @ vct.T
    return PlantedLowRank((left * s) @ right.T, left, s, right)


def incoherent_psd(n: int, eigenvalues: Any, *, seed: int = 0) -> PlantedLowRank:
    """``Q·diag(λ)·Qᵀ`` with a Haar-random n×r Q (seed 000 spec §4.1(a)); symmetric positive semidefinite."""
    lam = _check_values(eigenvalues, "eigenvalues")
    q = _haar(_rng(seed, 4), n, lam.size)
    matrix = (q * lam) @ q.T
    return PlantedLowRank((matrix + matrix.T) / 2.0, q, lam, q)


def coherent_psd(n: int, eigenvalues: Any, *, support: int, seed: int = 0) -> PlantedLowRank:
    """PSD with a spiky top eigenvector: u₁ uniform (±1/sqrt(s)) on ``support`` coordinates, μ ≈ n/support.

    The other eigenvectors are Haar-random in the orthogonal complement of u₁ (seed 000 spec §4.1(b)).
    """
    lam = _check_values(eigenvalues, "eigenvalues")
    rng = _rng(seed, 5)
    first = _spiky(rng, n, 1, support)
    rest = rng.standard_normal((n, lam.size - 1))
    rest -= first @ (first.T @ rest)  # orthogonal to u₁, then orthonormalised
    others = np.linalg.qr(rest)[0] if lam.size > 1 else np.zeros((n, 0))
    q = np.hstack([first, others])
    matrix = (q * lam) @ q.T
    return PlantedLowRank((matrix + matrix.T) / 2.0, q, lam, q)


def lower_bound_matrix(n: int, coherence: float, *, seed: int = 0) -> PlantedLowRank:
    """The lower-bound family ℳ_C of seed 000 §1.5 (Sec. 6): ``M_D = sqrt(n·s/2)·u·D̄ᵀ``, sparse n×n, rank 1.

    ``D ∈ {0,1}^n`` has n/2 ones (random from ``seed``), ``D̄ = D/‖D‖``, ``u`` is uniform on the first
    ``s = n/C`` coordinates: the first s rows are copies of D, the rest are zero. Then ``μ(M_D) = C`` and
    ``σ₁ = sqrt(n·s/2) = n/sqrt(2C)``; one entry of D is s entries of M_D. Needs n even and n/C an integer ≥ 1.
    """
    if n < 2 or n % 2:
        raise InvalidParameterError(f"n must be even and >= 2; got {n}")
    s_float = n / float(coherence)
    s = int(round(s_float))
    if not (2.0 <= coherence <= n) or abs(s - s_float) > 1e-9 or s < 1:
        raise InvalidParameterError(
            f"coherence must be in [2, n] with n/coherence an integer; got n={n}, C={coherence}"
        )
    rng = _rng(seed, 6)
    d = np.zeros(n)
    d[rng.choice(n, size=n // 2, replace=False)] = 1.0
    d_bar = d / np.linalg.norm(d)
    u = np.zeros(n)
    u[:s] = 1.0 / np.sqrt(s)
    sigma = float(np.sqrt(n * s / 2.0))
    cols = np.flatnonzero(d)
    rows = np.repeat(np.arange(s), cols.size)
    matrix = sp.csr_array((np.ones(rows.size), (rows, np.tile(cols, s))), shape=(n, n))
    return PlantedLowRank(matrix, u[:, None], np.array([sigma]), d_bar[:, None])


# --------------------------------------------------------------------------------------------- regression designs
# The linear-regression designs of the sliding-window regression tests and benchmark (bench_window.py).

__all__ += ["regression_design"]


def regression_design(kind: str, n_rows: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n_rows`` rows ``x`` and their responses ``y = xᵀβ + noise`` (noise of standard deviation 0.05).

    ``"ill"``: d = 100, rank 5 (variance 0.08 per direction) plus isotropic noise of variance 1e-3 per coordinate,
    a random β of norm 4: an ill-conditioned design, whose Gram matrix's small eigenvalues fall below a private
    release's noise. ``"well"``: d = 20, isotropic (variance 0.5/d per coordinate), β of norm 0.4.

    >>> x, y = regression_design("well", 1000, seed=1)
    >>> x.shape, y.shape
    ((1000, 20), (1000,))
    """
    if kind not in ("ill", "well"):
        raise InvalidParameterError(f"kind must be 'ill' or 'well'; got {kind!r}")
    if n_rows < 1:
        raise InvalidParameterError(f"n_rows must be >= 1; got {n_rows}")
    rng = np.random.default_rng(seed)
    if kind == "ill":
        d, rank = 100, 5
        basis = np.linalg.qr(rng.standard_normal((d, rank)))[0]
        x = (rng.standard_normal((n_rows, rank)) @ basis.T * np.sqrt(0.08)
             + rng.standard_normal((n_rows, d)) * np.sqrt(1e-3))
        beta = rng.standard_normal(d)
        beta *= 4.0 / np.linalg.norm(beta)
    else:
        d = 20
        x = rng.standard_normal((n_rows, d)) * np.sqrt(0.5 / d)
        beta = rng.standard_normal(d)
        beta *= 0.4 / np.linalg.norm(beta)
    return x, x @ beta + 0.05 * rng.standard_normal(n_rows)
