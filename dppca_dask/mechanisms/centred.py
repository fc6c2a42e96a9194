"""Gaussian releases of the statistics an analyst expects beside the components: a private mean and the explained
variance, each one release with its own ``GaussianDpEvent``.

Neighbours differ by adding or removing one row. The count of rows is released with the sums, so no private ``n``
is ever used: a mean is a noisy sum over a noisy count, a variance a noisy sum of squares over a noisy count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dppca_dask.mechanisms._validation import positive_finite
from dppca_dask.mechanisms.gaussian import gaussian_mechanism
from dppca_dask.mechanisms.noise import NoiseSource

__all__ = [
    "CLIPPED_FRACTION_SENSITIVITY",
    "ExplainedVariance",
    "MEAN_SENSITIVITY",
    "VARIANCE_SENSITIVITY",
    "private_clipped_fraction",
    "private_mean",
    "private_variances",
    "project_onto_ball",
]

#: L2 sensitivity of ``(Σ a'/c, n)``: the sum of rows clipped to c moves by at most c, the count by 1.
MEAN_SENSITIVITY = math.sqrt(2.0)
#: L2 sensitivity of ``(Σ_i (ã_i'ᵀv_j)²/c² for each j, Σ_i ‖ã_i'‖²/c², n)`` for orthonormal ``v_j``: one row moves
#: the first block by ``((ã'ᵀv_j)²/c²)_j``, of L2 norm at most its L1 norm ``‖Vã'‖²/c² ≤ ‖ã'‖²/c² ≤ 1``; the
#: total by ``‖ã'‖²/c² ≤ 1``; the count by 1.
VARIANCE_SENSITIVITY = math.sqrt(3.0)
#: L2 sensitivity of ``(number of rows of norm > c, n)``: adding or removing one row moves each count by at most 1.
CLIPPED_FRACTION_SENSITIVITY = math.sqrt(2.0)


def private_clipped_fraction(
    clipped: int,
    count: int,
    *,
    noise_multiplier: float,
    noise: NoiseSource,
    release: str = "clipped-fraction",
) -> tuple[float, Any]:
    """Release the fraction of rows that a public bound c clips: ``clip(z_clipped / max(z_count, 1), 0, 1)`` for one
    Gaussian release ``z`` of the two counts.

    Parameters
    ----------
    clipped
        Exact number of rows of L2 norm above c (those the kernels scale down).
    count
        Exact number of rows.

    Returns
    -------
    fraction, event
        The released fraction in [0, 1] and ``GaussianDpEvent(noise_multiplier)``.

    Notes
    -----
    Privacy contract: add/remove one row; the released vector ``(clipped, n) + N(0, (m·√2)²·I)`` has L2
    sensitivity √2 (:data:`CLIPPED_FRACTION_SENSITIVITY`; under replacement of one row, 1: n is fixed); the ratio
    and its projection onto [0, 1] are post-processing. The number of clipped rows is private (DESIGN.md,
    invariant 5): only this noisy count leaves the coordinator.
    """
    value = np.array([float(clipped), float(count)])
    noisy, event = gaussian_mechanism(value, l2_sensitivity=CLIPPED_FRACTION_SENSITIVITY,
                                      noise_multiplier=noise_multiplier, noise=noise, release=release)
    fraction = float(noisy[0]) / max(float(noisy[1]), 1.0)
    return min(max(fraction, 0.0), 1.0), event


def private_mean(
    total: Any,
    count: int,
    *,
    row_norm_bound: float,
    noise_multiplier: float,
    noise: NoiseSource,
    release: str = "mean",
) -> tuple[np.ndarray, float, Any]:
    """Release the mean of rows clipped to ``c``: ``μ = c·z_sum / max(z_count, 1)`` for one Gaussian release ``z``,
    projected onto the ball of radius c.

    Parameters
    ----------
    total
        Exact ``Σ a'`` of the rows clipped to ``row_norm_bound`` (length d).
    count
        Exact number of rows.

    Returns
    -------
    mean, noisy_count, event
        The released mean (length d, norm at most c), the released count and ``GaussianDpEvent(noise_multiplier)``.

    Notes
    -----
    Privacy contract: add/remove one row; the released vector ``(Σ a'/c, n) + N(0, (m·√2)²·I)`` has L2
    sensitivity √2 (:data:`MEAN_SENSITIVITY`); the division is post-processing.

    So is the projection onto the ball of radius c (:func:`project_onto_ball`): a fixed function of the released
    mean and the public bound c that reads no data. It loses nothing either: every clipped row ``a'`` has
    ``‖a'‖ ≤ c``, so the true mean, a convex combination of them, lies in the ball, and the projection moves the
    released mean no farther from it (projection onto a convex set is non-expansive). Rows centred at the released
    mean then have a public bound whatever the noise drew: ``‖a' − μ‖ ≤ ‖a'‖ + ‖μ‖ ≤ 2c`` (the ``r = c`` of
    :func:`~dppca_dask.methods.adaptive_power.centring.centred_bound`).
    """
    bound = positive_finite("row_norm_bound", row_norm_bound)
    value = np.append(np.asarray(total, dtype=np.float64) / bound, float(count))
    noisy, event = gaussian_mechanism(value, l2_sensitivity=MEAN_SENSITIVITY, noise_multiplier=noise_multiplier,
                                      noise=noise, release=release)
    noisy_count = float(noisy[-1])
    return project_onto_ball(bound * noisy[:-1] / max(noisy_count, 1.0), row_norm_bound), noisy_count, event


def project_onto_ball(vector: np.ndarray, radius: float) -> np.ndarray:
    """``vector`` if its L2 norm is at most ``radius``, else ``vector`` scaled to norm ``radius``.

    The Euclidean projection onto the closed ball of radius ``radius`` about the origin: it never moves a point
    of the ball, and moves any other point to the nearest point of the ball.
    """
    length = float(np.linalg.norm(vector))
    if length > radius:
        return vector * (radius / length)
    return vector


@dataclass(frozen=True)
class ExplainedVariance:
    """Released variance statistics of k components (post-processing of one Gaussian release)."""

    explained_variance: np.ndarray
    """``max(0, Σ(ã'ᵀv_j)²) / max(1, n̂ − 1)`` per component (scikit-learn's ``explained_variance_``)."""
    singular_values: np.ndarray
    """``sqrt(max(0, Σ(ã'ᵀv_j)²))`` per component."""
    explained_variance_ratio: np.ndarray
    """``max(0, Σ(ã'ᵀv_j)²) / T`` per component, against the released total ``T`` (below), so each ratio is in
    [0, 1] and they sum to at most 1."""
    total_variance: float
    """``T / max(1, n̂ − 1)`` for ``T = max(0, Σ‖ã'‖², Σ_j max(0, Σ(ã'ᵀv_j)²))``: the released total, raised to
    the released variance along the components when the noise drew it below (the components' variances cannot
    exceed the total; post-processing)."""
    count: float
    """The released number of rows n̂."""


def private_variances(
    projected: Any,
    total: float,
    count: int,
    *,
    row_norm_bound: float,
    noise_multiplier: float,
    noise: NoiseSource,
    release: str = "explained-variance",
) -> tuple[ExplainedVariance, Any]:
    """Release the variance along each component and the total variance, against a released count.

    Parameters
    ----------
    projected
        Exact ``Σ_i (ã_i'ᵀv_j)²`` for each released (public) orthonormal component ``v_j`` (length k).
    total
        Exact ``Σ_i ‖ã_i'‖²``.
    count
        Exact number of rows.

    Notes
    -----
    Privacy contract: add/remove one row, rows ``ã'`` (centred at a public or released centre, clipped to c);
    one Gaussian release of ``(projected/c², total/c², n)`` with L2 sensitivity √3 (:data:`VARIANCE_SENSITIVITY`),
    ``GaussianDpEvent(noise_multiplier)``; everything else is post-processing, including the projection of the
    released values onto their feasible set (variances non-negative, the total at least their sum, so that the
    ratios lie in [0, 1] and sum to at most 1; the caller orders the components by their variance).
    """
    bound = positive_finite("row_norm_bound", row_norm_bound)
    scale = bound * bound
    value = np.concatenate([np.asarray(projected, dtype=np.float64) / scale, [float(total) / scale, float(count)]])
    noisy, event = gaussian_mechanism(value, l2_sensitivity=VARIANCE_SENSITIVITY, noise_multiplier=noise_multiplier,
                                      noise=noise, release=release)
    sums = np.maximum(noisy[:-2], 0.0) * scale
    total_sum = max(float(noisy[-2]) * scale, float(np.sum(sums)), 0.0)  # projected onto the feasible set
    noisy_count = float(noisy[-1])
    dof = max(noisy_count - 1.0, 1.0)
    ratio = sums / total_sum if total_sum > 0 else np.zeros_like(sums)
    return ExplainedVariance(
        explained_variance=sums / dof,
        singular_values=np.sqrt(sums),
        explained_variance_ratio=ratio,
        total_variance=total_sum / dof,
        count=noisy_count,
    ), event
