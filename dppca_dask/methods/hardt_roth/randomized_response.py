"""Randomized response (input perturbation): the baseline of Hardt & Roth 2012 (§1.1, §1.3.2; seed 003 spec §3.1).

Every entry of the (clipped) matrix gets independent Gaussian noise, ``Â = A' + N(0, (s·σ)²)``, and the output is
the exact rank-r truncated SVD of Â (post-processing). The release densifies the whole n_rows×d matrix **at the
coordinator** (noise is drawn only there), so it is offered only where that fits in memory:
:func:`dense_bytes_needed` is checked by the caller before the data is read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dppca_dask.methods.hardt_roth.low_rank_calibration import rr_sigma
from dppca_dask.methods.hardt_roth.requests import DenseRows
from dppca_dask.methods.hardt_roth.linalg import top_svd
from dppca_dask.coordinator.requests import AlgorithmRun
from dppca_dask.errors import InvalidParameterError
from dppca_dask.kernels.hardt_roth import RowSlices, assemble
from dppca_dask.mechanisms import NoiseSource, gaussian_mechanism

__all__ = ["DEFAULT_MAX_DENSE_BYTES", "RandomizedResponseOutput", "dense_bytes_needed", "randomized_response_run"]

#: Largest coordinator memory randomized response may use by default (the dense matrix and its copies).
DEFAULT_MAX_DENSE_BYTES = 2 * 2**30
#: Dense n_rows×d float64 arrays alive at once: the matrix, the release's copy, the noise, the SVD's workspace.
_DENSE_COPIES = 4


def dense_bytes_needed(n_rows: int, n_cols: int) -> int:
    """Coordinator memory randomized response needs for an n_rows×d matrix: about 4 dense float64 copies."""
    return _DENSE_COPIES * int(n_rows) * int(n_cols) * 8


@dataclass(frozen=True)
class RandomizedResponseOutput:
    left: np.ndarray
    """n_rows×r: U_r of the noisy matrix (orthonormal columns)."""
    right: np.ndarray
    """r×d: ``diag(s_r)·V_rᵀ``."""
    sigma: float
    """Noise std per entry over the row-change bound."""
    events: tuple[Any, ...] = field(default=())
    n_passes: int = 1
    diagnostics: Any = None
    """The release's :class:`~dppca_dask.diagnostics.Diagnostics` (the released singular values against the
    noise's public scale, :func:`~dppca_dask.diagnostics.rectangular_noise_to_signal`)."""


def randomized_response_run(
    *,
    n_cols: int,
    rank: int,
    epsilon: float,
    delta: float,
    row_norm_bound: float | None,
    row_change_bound: float,
    noise: NoiseSource,
    calibration: str = "standard",
) -> AlgorithmRun[RandomizedResponseOutput]:
    """Randomized response as a generator of requests (one pass).

    Notes
    -----
    Privacy contract: one row changes by a vector of L2 norm at most s = ``row_change_bound`` (rows clipped to
    ``row_norm_bound`` first; clipping is 1-Lipschitz), so ``‖A' − A''‖_F ≤ s`` and the release of ``A' + N`` with
    std ``s·σ`` per entry is the Gaussian mechanism of multiplier σ (``GaussianDpEvent(σ)``), σ =
    :func:`~dppca_dask.methods.hardt_roth.low_rank_calibration.rr_sigma`. The truncated SVD is post-processing.
    """
    if isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) or not 1 <= rank <= n_cols:
        raise InvalidParameterError(f"rank must be an integer in [1, {n_cols}]; got {rank!r}")
    if not (math.isfinite(row_change_bound) and row_change_bound > 0):
        raise InvalidParameterError(f"row_change_bound must be finite and > 0; got {row_change_bound}")
    if row_norm_bound is not None and not row_norm_bound > 0:  # NaN too; inf: not clipped
        raise InvalidParameterError(f"row_norm_bound must be > 0 (None or inf: not clipped); got {row_norm_bound}")
    sigma = rr_sigma(epsilon, delta, calibration=calibration)
    aggregate: RowSlices = yield DenseRows(row_norm_bound=row_norm_bound)
    exact = assemble(aggregate)
    del aggregate
    noisy, event = gaussian_mechanism(
        exact,
        l2_sensitivity=float(row_change_bound),
        noise_multiplier=sigma,
        noise=noise,
        release="randomized-response/gaussian",
    )
    del exact
    rank = min(int(rank), *noisy.shape)
    u, s, vt = top_svd(noisy, rank)
    from dppca_dask.diagnostics import diagnostics, rectangular_noise_to_signal

    noise_to_signal = rectangular_noise_to_signal(s, sigma=float(row_change_bound) * sigma, n_rows=noisy.shape[0],
                                                  n_cols=noisy.shape[1])
    del noisy
    return RandomizedResponseOutput(left=u, right=s[:, None] * vt, sigma=sigma, events=(event,),
                                    diagnostics=diagnostics(noise_to_signal))
