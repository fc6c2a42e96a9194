"""Analyze Gauss on centred rows, with the same private centre, private row-norm bound and explained variance as
the block power run (:mod:`dppca_dask.algorithms.block_power`).

Rows are clipped to c and centred at μ (released or given): ``ã = a' − μ``, ``‖ã‖ ≤ c + r`` (``r = c`` for the
private mean, projected onto the ball of radius c; ``‖μ‖`` for a given mean; 0 without centring). The Gram matrix
``Σ ããᵀ = A'ᵀA' − μs'ᵀ − s'μᵀ + n·μμᵀ`` is formed per partition without densifying it
(:func:`~dppca_dask.kernels.block.centred_gram_matrix`). Adding or removing one row moves its upper triangle by
that of ``ããᵀ``, of L2 norm ``sqrt((‖ã‖⁴ + Σã_i⁴)/2) ≤ ‖ã‖² ≤ (c + r)²`` — the uncentred argument with c replaced by
``c + r`` [DTTZ14, Algorithm 1]; μ is fixed (released before, or public), so no other row's term moves.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from dppca_dask.algorithms.analyze_gauss import check_dense_dim
from dppca_dask.algorithms.block_power import (
    DEFAULT_MEAN_SHARE,
    DEFAULT_NORM_QUANTILE,
    DEFAULT_QUANTILE_SHARE,
    DEFAULT_VARIANCE_SHARE,
    AutoBound,
    BlockPowerOutput,
    CentredGramMatrix,
    MeanStep,
    NormCounts,
    VarianceStep,
    centred_bound,
)
from dppca_dask.algorithms.exact import top_eigenpairs
from dppca_dask.algorithms.requests import AlgorithmRun
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms import NoiseSource, gaussian_mechanism
from dppca_dask.mechanisms.centred import private_mean, private_variances

__all__ = ["CENTRED_GAUSS", "centred_gauss_run", "plan_centred_gauss"]

#: The mechanism's name in the registry.
CENTRED_GAUSS = "analyze-gauss-centred"


def centred_gauss_run(
    *,
    n_cols: int,
    n_components: int,
    row_norm_bound: float | AutoBound,
    noise_multiplier: float,
    noise: NoiseSource,
    center: str | np.ndarray | None = None,
    mean_multiplier: float | None = None,
    variance_multiplier: float | None = None,
    max_dense_dim: int = 4096,
) -> AlgorithmRun[BlockPowerOutput]:
    """Centred Analyze Gauss as a generator of requests (see the module docstring).

    Notes
    -----
    Privacy contract: add/remove one row. Events in order: the quantile's ``EpsilonDeltaDpEvent(ε_q, 0)`` (with
    :class:`AutoBound`), the mean's ``GaussianDpEvent(mean_multiplier)`` (``center="private"``), the Gram
    matrix's ``GaussianDpEvent(noise_multiplier)`` (sensitivity ``(c + r)²``), the variance's
    ``GaussianDpEvent(variance_multiplier)`` (when asked).
    """
    if not 1 <= n_components <= n_cols:
        raise InvalidParameterError(f"n_components must be in [1, {n_cols}]; got {n_components}")
    check_dense_dim(n_cols, max_dense_dim, CENTRED_GAUSS)
    mean: np.ndarray | None = None
    if isinstance(center, str):
        if center != "private":
            raise InvalidParameterError(f"center must be None, 'private' or a mean vector; got {center!r}")
        if mean_multiplier is None:
            raise InvalidParameterError("center='private' needs mean_multiplier (the mean's noise multiplier)")
    elif center is not None:
        mean = np.array(center, dtype=np.float64)
        if mean.shape != (n_cols,) or not np.all(np.isfinite(mean)):
            raise InvalidParameterError(
                f"a given mean must be a finite vector of length {n_cols}; got shape {mean.shape}"
            )
    events: list[Any] = []
    mean_count: float | None = None
    if isinstance(row_norm_bound, AutoBound):
        from dppca_dask.mechanisms.quantile import private_quantile

        auto = row_norm_bound
        counted = yield NormCounts(candidates=auto.grid.values)
        row_norm_bound, quantile_event = private_quantile(
            counted.counts, counted.count, grid=auto.grid, quantile=auto.quantile, epsilon=auto.epsilon, noise=noise)
        del counted
        events.append(quantile_event)
    if isinstance(center, str):
        totals = yield MeanStep(row_norm_bound=row_norm_bound)
        assert mean_multiplier is not None
        mean, mean_count, mean_event = private_mean(totals.total, totals.count, row_norm_bound=row_norm_bound,
                                                    noise_multiplier=mean_multiplier, noise=noise, release="mean")
        del totals
        events.append(mean_event)
        length = float(np.linalg.norm(mean))
        if length > row_norm_bound:  # post-processing: the true mean of rows of norm <= c has norm <= c
            mean = mean * (row_norm_bound / length)
    bound = centred_bound(row_norm_bound, center)
    gram = yield CentredGramMatrix(row_norm_bound=row_norm_bound, mean=mean)
    upper = np.triu_indices(n_cols)
    noisy_upper, event = gaussian_mechanism(gram[upper], l2_sensitivity=bound * bound,
                                            noise_multiplier=noise_multiplier, noise=noise,
                                            release="analyze-gauss/gram")
    del gram
    events.append(event)
    noisy = np.zeros((n_cols, n_cols))
    noisy[upper] = noisy_upper
    noisy = noisy + noisy.T - np.diag(np.diag(noisy))
    _values, components = top_eigenpairs(noisy, n_components)
    variance = None
    if variance_multiplier is not None:
        totals = yield VarianceStep(components=components, row_norm_bound=row_norm_bound, mean=mean)
        variance, variance_event = private_variances(
            totals.projected, totals.total, totals.count, row_norm_bound=bound,
            noise_multiplier=variance_multiplier, noise=noise, release="explained-variance")
        del totals
        events.append(variance_event)
    return BlockPowerOutput(components=components, thresholds=np.zeros((1, 0)), mean=mean, mean_count=mean_count,
                            variance=variance, events=tuple(events), row_norm_bound=float(row_norm_bound))


def plan_centred_gauss(
    params: Any,
    n_cols: int,
    *,
    center: str | np.ndarray | None = None,
    explained_variance: bool = True,
    mean_share: float = DEFAULT_MEAN_SHARE,
    variance_share: float = DEFAULT_VARIANCE_SHARE,
    auto_bound: bool = False,
    quantile: float = DEFAULT_NORM_QUANTILE,
    quantile_share: float = DEFAULT_QUANTILE_SHARE,
    norm_grid: Any = None,
) -> Any:
    """Calibrate a centred Analyze Gauss run from public parameters only (shares as in
    :func:`~dppca_dask.algorithms.block_power.plan_block_power`; the Gram release gets the rest)."""
    from dp_accounting import GaussianDpEvent

    from dppca_dask import accounting
    from dppca_dask.methods._registry import MechanismPlan
    from dppca_dask.mechanisms.quantile import NormGrid

    check_dense_dim(n_cols, params.max_dense_dim, CENTRED_GAUSS)
    uses_mean = isinstance(center, str)
    used = (mean_share if uses_mean else 0.0) + (variance_share if explained_variance else 0.0)
    used_epsilon = used + (quantile_share if auto_bound else 0.0)
    if not (0.0 <= used and used_epsilon < 1.0):
        raise InvalidParameterError(
            f"the mean, variance and quantile shares must leave budget for the Gram matrix; got {used_epsilon:g}")
    multiplier = accounting.calibrate_gaussian(epsilon=params.epsilon * (1.0 - used_epsilon),
                                               delta=params.delta * (1.0 - used))
    mean_multiplier = (accounting.calibrate_gaussian(epsilon=params.epsilon * mean_share,
                                                     delta=params.delta * mean_share) if uses_mean else None)
    variance_multiplier = (accounting.calibrate_gaussian(epsilon=params.epsilon * variance_share,
                                                         delta=params.delta * variance_share)
                           if explained_variance else None)
    auto = (AutoBound(grid=norm_grid if norm_grid is not None else NormGrid(), quantile=quantile,
                      epsilon=params.epsilon * quantile_share) if auto_bound else None)

    def make_run(noise: Any, on_release: Callable[..., None] | None, resume: Any) -> Any:
        if resume is not None:
            raise InvalidParameterError(f"mechanism={CENTRED_GAUSS!r} has one release and nothing to resume")
        return centred_gauss_run(n_cols=n_cols, n_components=params.n_components,
                                 row_norm_bound=auto if auto is not None else params.row_norm_bound,
                                 noise_multiplier=multiplier, noise=noise, center=center,
                                 mean_multiplier=mean_multiplier, variance_multiplier=variance_multiplier,
                                 max_dense_dim=params.max_dense_dim)

    planned: list[Any] = []
    if auto is not None:
        planned.append(accounting.EpsilonDeltaDpEvent(auto.epsilon, 0.0))
    if mean_multiplier is not None:
        planned.append(GaussianDpEvent(mean_multiplier))
    planned.append(GaussianDpEvent(multiplier))
    if variance_multiplier is not None:
        planned.append(GaussianDpEvent(variance_multiplier))

    def replace_one(events: tuple[Any, ...]) -> list[Any]:
        out: list[Any] = []
        flat = list(events)
        if auto is not None and flat:
            percent = round(quantile * 100)
            out.append(accounting.EpsilonDeltaDpEvent(flat.pop(0).epsilon * 100.0 / max(percent, 100 - percent), 0.0))
        if mean_multiplier is not None and flat:
            out.append(GaussianDpEvent(flat.pop(0).noise_multiplier / math.sqrt(2.0)))
        if flat:  # the Gram matrix: √2·(c + r)² under replacement
            out.append(GaussianDpEvent(flat.pop(0).noise_multiplier / math.sqrt(2.0)))
        return out + flat  # the variance: √3 either way

    calibration = {
        "noise_multiplier": multiplier,
        "mean_noise_multiplier": mean_multiplier,
        "variance_noise_multiplier": variance_multiplier,
        "center": "private" if uses_mean else ("given" if center is not None else "none"),
        "centred_bound": None if auto is not None else centred_bound(params.row_norm_bound, center),
        "row_norm_quantile": None if auto is None else {"quantile": quantile, "epsilon": auto.epsilon,
                                                        "grid": auto.grid.to_json()},
        "shares": {"row_norm_quantile_epsilon": quantile_share if auto_bound else 0.0,
                   "mean": mean_share if uses_mean else 0.0,
                   "explained_variance": variance_share if explained_variance else 0.0,
                   "gram_epsilon": 1.0 - used_epsilon, "gram_delta": 1.0 - used},
    }
    return MechanismPlan(make_run, "add/remove one row", calibration, None, 1, planned_events=tuple(planned),
                         replace_one=(replace_one, "replace one row: the quantile's utilities move by <= 100 "
                                      "(epsilon times 100/max(a, 100 - a)); the mean's and the Gram matrix's "
                                      "sensitivities grow by sqrt(2); the explained variance's stays sqrt(3)"))

