"""Analyze Gauss (Dwork, Talwar, Thakurta & Zhang 2014): ``A'ᵀA'`` plus symmetric Gaussian noise, then eigh.

The worst-case-optimal baseline every comparison includes. It densifies the d×d Gram matrix, so it refuses
``d > max_dense_dim`` (default 4096: the Gram matrix, its noisy copy and the eigendecomposition's workspace take
about 4·d²·8 bytes, 512 MiB at d = 4096) with a clear error, before any data is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from dppca_dask.coordinator.requests import AlgorithmRun, GramMatrix
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms import NoiseSource, gaussian_mechanism
from dppca_dask.methods._params import DEFAULT_MAX_DENSE_DIM
from dppca_dask.methods.exact.algorithm import top_eigenpairs

__all__ = ["AnalyzeGaussOutput", "analyze_gauss_run", "check_dense_dim"]

@dataclass(frozen=True)
class AnalyzeGaussOutput:
    components: np.ndarray
    """k×d unit rows: top eigenvectors of the noisy Gram matrix."""
    events: tuple[Any, ...]
    diagnostics: Any = None
    """The release's :class:`~dppca_dask.diagnostics.Diagnostics` (from the released eigenvalues)."""


def check_dense_dim(n_cols: int, max_dense_dim: int, mechanism: str) -> None:
    if n_cols > max_dense_dim:
        need = 4 * n_cols * n_cols * 8
        raise InvalidParameterError(
            f"{mechanism} forms a dense {n_cols}x{n_cols} matrix (about {need / 2**30:.1f} GiB with its "
            f"workspace); d={n_cols} exceeds max_dense_dim={max_dense_dim}; use mechanism='adaptive-power', or "
            "raise max_dense_dim if the coordinator has the memory"
        )


def analyze_gauss_run(
    *,
    n_cols: int,
    n_components: int,
    row_norm_bound: float,
    noise_multiplier: float,
    noise: NoiseSource,
    max_dense_dim: int = DEFAULT_MAX_DENSE_DIM,
) -> AlgorithmRun[AnalyzeGaussOutput]:
    """Analyze Gauss as a generator of requests.

    Notes
    -----
    Privacy contract: add/remove one row, rows clipped to ``‖a‖ ≤ c``. The upper triangle (diagonal included)
    of ``A'ᵀA'`` changes by the upper triangle of ``aaᵀ``, of L2 norm ``sqrt((‖a‖⁴ + Σ a_i⁴)/2) ≤ c²``; one
    Gaussian mechanism with std ``m·c²`` on it, mirrored to a symmetric matrix (post-processing), emits
    ``GaussianDpEvent(m)``. Eigendecomposition is post-processing. [DTTZ14, Algorithm 1]
    """
    if not 1 <= n_components <= n_cols:
        raise InvalidParameterError(f"n_components must be in [1, {n_cols}]; got {n_components}")
    check_dense_dim(n_cols, max_dense_dim, "analyze-gauss")
    gram = yield GramMatrix(row_norm_bound=row_norm_bound)
    upper = np.triu_indices(n_cols)
    noisy_upper, event = gaussian_mechanism(
        gram[upper],
        l2_sensitivity=row_norm_bound**2,
        noise_multiplier=noise_multiplier,
        noise=noise,
        release="analyze-gauss/gram",
    )
    del gram
    noisy = np.zeros((n_cols, n_cols))
    noisy[upper] = noisy_upper
    noisy = noisy + noisy.T - np.diag(np.diag(noisy))
    values, vectors = top_eigenpairs(noisy, n_components)
    from dppca_dask.diagnostics import diagnostics, symmetric_noise_to_signal

    noise_to_signal = symmetric_noise_to_signal(values, sigma=noise_multiplier * row_norm_bound**2, dim=n_cols)
    return AnalyzeGaussOutput(vectors, (event,), diagnostics(noise_to_signal))
