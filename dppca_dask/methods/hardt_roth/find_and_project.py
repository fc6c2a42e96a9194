"""Private low-rank approximation: private range finder, pruning, private projection (Hardt & Roth 2012, Fig. 4).

Orientation: the paper's m×n matrix with "one row changes by L2 ≤ 1" is our store with rows = individuals, so
m = n_rows and n = d. Two passes over the data (spec §3.8):

1. range finder (Fig. 2): ``Y = A'Ω`` for a secret Gaussian d×k test matrix Ω (k = r + p), released as
   ``Ỹ = Y + N(0, (s·ρ₁)²)`` and orthonormalised, ``W = qr(Ỹ)`` (n_rows×k);
2. pruning (Fig. 4, line 2): ``W'`` is W with every entry of magnitude above α set to 0 (α = 1: none);
3. projection (Fig. 3): ``M = W'ᵀA' + N`` (k×d) with row i's noise ``N(0, (s·α_i·ρ₂)²)``, α_i = ‖w'_i‖_∞; or,
   as a documented extension (spec §3.7, ``projection="tight"``), one Gaussian on all of ``W'ᵀA'`` calibrated to
   its Frobenius sensitivity ``s·max_j ‖W'_(j)‖``.

The output stays factored, ``B = L·M`` with L = W (orthonormal, the analysed choice, default) or W' (the literal
Fig. 4), optionally truncated to rank r (post-processing, spec §3.6). **Both factors are released.** L has one
row per individual (n_rows×k): it is as private as M, but its size grows with the number of individuals, and it
is written out with the result; M (k×d) describes the feature side and is what most uses need (its top right
singular vectors are principal directions).

A' is the store with rows clipped to ``row_norm_bound`` (``inf``: unclipped); the neighbouring relation is one
row changing by a vector of L2 norm at most s = ``row_change_bound``. Since clipping is 1-Lipschitz, a row change
of at most s moves the clipped row by at most s, and with rows clipped to c, removing or zeroing an individual's
row is a change of at most c.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from dp_accounting import dp_event

from dppca_dask.accounting.events import EpsilonDeltaDpEvent
from dppca_dask.coordinator.requests import AlgorithmRun
from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.kernels.hardt_roth import RowSlices, assemble, row_offsets
from dppca_dask.mechanisms import NoiseSource, gaussian_mechanism
from dppca_dask.mechanisms.secret import secret_gaussian
from dppca_dask.methods.hardt_roth.linalg import prune, truncate_factors
from dppca_dask.methods.hardt_roth.low_rank_calibration import PrivateLowRankCalibration, calibrate_private_low_rank
from dppca_dask.methods.hardt_roth.requests import LeftProjection, RowProduct

__all__ = ["PrivateLowRankOutput", "private_low_rank_run"]


@dataclass(frozen=True)
class PrivateLowRankOutput:
    """What PFP releases: the factors of ``B = left @ right`` and the public byproducts."""

    left: np.ndarray
    """n_rows×k (or ×r when truncated): W, or the pruned W' with ``left_factor="pruned"``."""
    right: np.ndarray
    """k×d (or r×d): ``M = W'ᵀA' + N`` (or its truncation)."""
    alphas: np.ndarray
    """α_i = ‖w'_i‖_∞ of the pruned basis (public: a function of the released W)."""
    projection_sensitivity: float
    """Frobenius sensitivity of the tight projection ``s·max_j ‖W'_(j)‖`` (reported for both projections)."""
    calibration: PrivateLowRankCalibration
    events: tuple[Any, ...] = field(default=())
    n_passes: int = 2
    diagnostics: Any = None
    """The release's :class:`~dppca_dask.diagnostics.Diagnostics`: the singular values of the released ``M``
    against its noise's public scale (the largest per-entry std), one figure per requested component (rank r)."""


def _check_parameters(*, n_cols: int, rank: int, oversampling: int, row_norm_bound: float | None,
                      row_change_bound: float, prune_alpha: float, left_factor: str) -> int:
    """:func:`private_low_rank_run`'s public parameters checked; returns the sketch width k = r + p."""
    for name, value in (("rank", rank), ("n_cols", n_cols)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise InvalidParameterError(f"{name} must be an integer >= 1; got {value!r}")
    if isinstance(oversampling, bool) or not isinstance(oversampling, (int, np.integer)) or oversampling < 0:
        raise InvalidParameterError(f"oversampling must be an integer >= 0; got {oversampling!r}")
    width = int(rank) + int(oversampling)
    if width > n_cols:
        raise InvalidParameterError(
            f"rank + oversampling must be <= the number of columns ({n_cols}); got {rank} + {oversampling}"
        )
    if not (math.isfinite(row_change_bound) and row_change_bound > 0):
        raise InvalidParameterError(f"row_change_bound must be finite and > 0; got {row_change_bound}")
    if row_norm_bound is not None and not row_norm_bound > 0:  # NaN too; inf: not clipped
        raise InvalidParameterError(f"row_norm_bound must be > 0 (None or inf: not clipped); got {row_norm_bound}")
    if not (prune_alpha > 0):
        raise InvalidParameterError(f"prune_alpha must be > 0; got {prune_alpha}")
    if left_factor not in ("orthonormal", "pruned"):
        raise InvalidParameterError(f"left_factor must be 'orthonormal' or 'pruned'; got {left_factor!r}")
    return width


def private_low_rank_run(
    *,
    n_cols: int,
    rank: int,
    oversampling: int,
    epsilon: float,
    delta: float,
    row_norm_bound: float | None,
    row_change_bound: float,
    noise: NoiseSource,
    calibration: str = "standard",
    projection: str = "paper",
    prune_alpha: float = 1.0,
    left_factor: str = "orthonormal",
    truncate: bool = False,
) -> AlgorithmRun[PrivateLowRankOutput]:
    """PFP as a generator of requests (two passes).

    Parameters
    ----------
    n_cols
        d.
    rank, oversampling
        r and p; the sketch width k = r + p must not exceed ``min(n_rows, d)``.
    epsilon, delta
        Total budget (the two steps are calibrated together by the PLD accountant; half each under "paper", Lemma 6.1).
    row_norm_bound
        Rows are clipped to this L2 norm (``None`` or ``inf``: not clipped).
    row_change_bound
        s: the relation's bound on a row change; every noise scale is multiplied by s.
    noise
        The noise source (also the source of the secret Ω).
    calibration
        ``"standard"`` (corrected constants, default) or ``"paper"`` (Fig. 2's ρ₁ and Thm 2.6's constant, which
        do not meet the target: spec §1.4).
    projection
        ``"paper"`` (Fig. 3) or ``"tight"`` (spec §3.7, an extension).
    prune_alpha
        α of Fig. 4 (1: no pruning, Thm 6.3).
    left_factor
        ``"orthonormal"`` (W, default, as analysed in Lemma 5.4) or ``"pruned"`` (W', the literal Fig. 4).
    truncate
        Return the best rank-r approximation of ``B`` instead of rank k (post-processing, spec §3.6).

    Notes
    -----
    Privacy contract: one row changes by a vector e with ``‖e‖ ≤ s``. Range finder (Lemma 4.1): Y changes in one
    row by ``eᵀΩ``, whose norm is at most ``s·c_RF`` except with probability δ/4 over the secret Ω (``c_RF`` the
    exact χ²_k quantile under ``"standard"``, Lemma 4.1's ``sqrt(2k·ln(8k/δ))`` under ``"paper"``); the release
    ``Y + N(0, (s·ρ₁)²)`` is then the Gaussian mechanism of multiplier
    ``ρ₁/c_RF`` (``GaussianDpEvent``) with an extra δ/4 (``EpsilonDeltaDpEvent(0, δ/4)``). Projection
    (Lemma 4.6): row i of ``W'ᵀE`` is ``W'_{ji}·eᵀ`` of norm ≤ ``s·α_i``, so k Gaussians of multiplier ρ₂, i.e.
    ``GaussianDpEvent(ρ₂/sqrt(k))``; the tight variant's ``W'ᵀE = W'_(j)ᵀeᵀ`` has Frobenius norm
    ``≤ s·max_j ‖W'_(j)‖`` (``GaussianDpEvent(multiplier)``). W, W', α and the truncation are post-processing.
    Ω is drawn from the noise source, sent to the workers for ``A'Ω`` and discarded; it never appears in a
    result. Implements Fig. 4 (lines 1–3) with Fig. 2 and Fig. 3.
    """
    width = _check_parameters(n_cols=n_cols, rank=rank, oversampling=oversampling, row_norm_bound=row_norm_bound,
                              row_change_bound=row_change_bound, prune_alpha=prune_alpha, left_factor=left_factor)
    cal = calibrate_private_low_rank(
        epsilon=epsilon, delta=delta, rank=int(rank), oversampling=int(oversampling), calibration=calibration,
        projection=projection,
    )
    s = float(row_change_bound)

    # Pass 1: the private range finder (Fig. 2).
    omega = secret_gaussian(noise, (n_cols, width), release="private-low-rank/range-finder/omega")  # line 1
    sketch: RowSlices = yield RowProduct(x=omega, row_norm_bound=row_norm_bound)  # line 2: Y = A'Ω
    del omega
    offsets = row_offsets(sketch)
    n_rows = int(offsets[-1])
    if width > n_rows:
        raise InvalidInputError(
            f"rank + oversampling ({width}) exceeds the number of rows ({n_rows}); lower the rank or oversampling"
        )
    noisy, range_event = gaussian_mechanism(  # lines 3-4: Ỹ = Y + N
        assemble(sketch),
        l2_sensitivity=s * cal.range_sensitivity,
        noise_multiplier=cal.range_multiplier,
        noise=noise,
        release="private-low-rank/range-finder/gaussian",
    )
    del sketch
    basis, _ = np.linalg.qr(noisy, mode="reduced")  # line 5: W (n_rows×k, orthonormal)
    del noisy

    # Pruning (Fig. 4, line 2) and pass 2: the private projection (Fig. 3).
    pruned = prune(basis, prune_alpha) if prune_alpha < 1.0 else basis
    alphas = np.max(np.abs(pruned), axis=0)  # Fig. 3, line 1
    row_norm_max = float(np.max(np.linalg.norm(pruned, axis=1))) if n_rows else 0.0
    aggregate: RowSlices = yield LeftProjection(
        left={i: pruned[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)},
        row_norm_bound=row_norm_bound,
    )
    exact = (aggregate.total if aggregate.total is not None else np.zeros((n_cols, width))).T  # W'ᵀA' (k×d)
    del aggregate
    if projection == "tight":
        if row_norm_max > 0:
            right, projection_event = gaussian_mechanism(
                exact,
                l2_sensitivity=s * row_norm_max,
                noise_multiplier=float(cal.projection_multiplier),  # type: ignore[arg-type]
                noise=noise,
                release="private-low-rank/projection/gaussian",
            )
        else:  # every entry pruned: W'ᵀA' = 0 whatever the data, nothing to release; the planned event is still
            # reported, so that the events never depend on the pruning (over-reporting is always safe)
            right = np.zeros_like(exact)
            projection_event = dp_event.GaussianDpEvent(float(cal.projection_multiplier))  # type: ignore[arg-type]
    else:
        scale = np.where(alphas > 0, alphas, 1.0)
        # Row i scaled by 1/α_i has sensitivity s; together the k rows have s·sqrt(k). Noise std s·ρ₂ per entry,
        # i.e. s·α_i·ρ₂ after scaling back (Fig. 3, line 2).
        scaled, projection_event = gaussian_mechanism(
            exact / scale[:, None],
            l2_sensitivity=s * math.sqrt(width),
            noise_multiplier=float(cal.projection_rho) / math.sqrt(width),  # type: ignore[arg-type]
            noise=noise,
            release="private-low-rank/projection/gaussian",
        )
        right = scaled * alphas[:, None]  # rows with α_i = 0 are exactly 0 (W'ᵀA' row is 0 for any data)
    del exact
    sigma = (s * row_norm_max * float(cal.projection_multiplier)  # type: ignore[arg-type]
             if projection == "tight"
             else s * float(cal.projection_rho) * float(np.max(alphas, initial=0.0)))  # type: ignore[arg-type]
    left = basis if left_factor == "orthonormal" else pruned
    if truncate:
        left, right = truncate_factors(left, right, int(rank), orthonormal_left=left_factor == "orthonormal"
                                       or prune_alpha >= 1.0)
    events: list[Any] = [range_event, EpsilonDeltaDpEvent(0.0, cal.range_failure), projection_event]
    from dppca_dask.diagnostics import block_noise_to_signal, diagnostics

    # the requested rank r (the oversampled directions beyond it are the range finder's slack, not a release's
    # components)
    noise_to_signal = block_noise_to_signal(np.asarray(right).T, sigma=sigma,
                                            n_components=min(int(rank), int(right.shape[0])))
    return PrivateLowRankOutput(
        left=np.asarray(left),
        right=np.asarray(right),
        alphas=alphas,
        projection_sensitivity=s * row_norm_max,
        calibration=cal,
        events=tuple(events),
        diagnostics=diagnostics(noise_to_signal),
    )
