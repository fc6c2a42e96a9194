"""The explained variance of released components: its release (one Gaussian release of ``(Σ(ãᵀv_j)², Σ‖ã‖², n)``,
:func:`~dppca_dask.mechanisms.centred.private_variances`), its public share of the budget, the components ordered by
it, and the released statistics as :class:`~dppca_dask.results.PCAResult` fields.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Generator
from typing import Any

import numpy as np

from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.centred import ExplainedVariance, private_variances
from dppca_dask.methods.adaptive_power.requests import VarianceStep

__all__ = ["DEFAULT_VARIANCE_SHARE", "release_explained_variance", "result_fields", "sort_by_variance"]

#: Public share of the user's (ε, δ) given to the explained variance's release.
DEFAULT_VARIANCE_SHARE = 0.05


def release_explained_variance(components: np.ndarray, row_norm_bound: float, mean: np.ndarray | None, *,
                               centred_row_bound: float, variance_multiplier: float,
                               noise: NoiseSource) -> Generator[Any, Any, tuple[ExplainedVariance, Any]]:
    """Release the explained variance of the released ``components`` (k×d) for rows clipped to ``row_norm_bound``
    and centred at the released or public ``mean``: one pass of :class:`~dppca_dask.methods.adaptive_power.requests.VarianceStep`, then
    :func:`~dppca_dask.mechanisms.centred.private_variances` with the public bound ``centred_row_bound`` (c + r,
    :func:`~dppca_dask.methods.adaptive_power.centring.centred_bound` of the run's ``center``) on the centred rows' norms
    (``GaussianDpEvent(variance_multiplier)``)."""
    totals = yield VarianceStep(components=components, row_norm_bound=row_norm_bound, mean=mean)
    return private_variances(totals.projected, totals.total, totals.count, row_norm_bound=centred_row_bound,
                             noise_multiplier=variance_multiplier, noise=noise, release="explained-variance")


def sort_by_variance(components: np.ndarray, variance: ExplainedVariance
                     ) -> tuple[np.ndarray, ExplainedVariance, np.ndarray]:
    """Components and their released variances ordered by decreasing released variance (a stable sort: ties keep
    the order of the release that found the components), and the permutation applied (post-processing).

    With :func:`~dppca_dask.mechanisms.centred.private_variances` keeping every ratio in [0, 1] and their sum at
    most 1, the ordered release is feasible: variances, ratios and singular values non-negative and
    non-increasing."""
    order = np.argsort(-np.asarray(variance.explained_variance), kind="stable")
    ordered = dataclasses.replace(variance, explained_variance=variance.explained_variance[order],
                                  singular_values=variance.singular_values[order],
                                  explained_variance_ratio=variance.explained_variance_ratio[order])
    return np.asarray(components)[order], ordered, order


def result_fields(output: Any) -> dict[str, Any]:
    """The released statistics of a block or centred run, as :class:`~dppca_dask.results.PCAResult` fields."""
    variance = getattr(output, "variance", None)
    out: dict[str, Any] = {"mean": getattr(output, "mean", None)}
    if variance is not None:
        out.update(explained_variance=variance.explained_variance,
                   explained_variance_ratio=variance.explained_variance_ratio,
                   singular_values=variance.singular_values)
    return out
