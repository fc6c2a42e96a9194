"""Analyze Gauss on centred rows, with the same private centre, private row-norm bound and explained variance as
the block power run (:mod:`dppca_dask.methods.adaptive_power.block`).

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

from dppca_dask.coordinator.requests import AlgorithmRun
from dppca_dask.diagnostics import diagnostics, mean_noise_to_signal, symmetric_noise_to_signal
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms import NoiseSource, gaussian_mechanism
from dppca_dask.methods.adaptive_power.block import BlockPowerOutput
from dppca_dask.methods.adaptive_power.centring import (
    DEFAULT_MEAN_SHARE,
    centred_bound,
    check_center,
    plan_centred_releases,
    release_private_mean,
)
from dppca_dask.methods.adaptive_power.explained_variance import (
    DEFAULT_VARIANCE_SHARE,
    release_explained_variance,
    sort_by_variance,
)
from dppca_dask.methods.adaptive_power.joint_scale import joint_noise_scale
from dppca_dask.methods.adaptive_power.requests import CentredGramMatrix
from dppca_dask.methods.adaptive_power.row_norm_bound import (
    DEFAULT_NORM_QUANTILE,
    DEFAULT_QUANTILE_SHARE,
    AutoBound,
    release_clipped_fraction,
    release_row_norm_bound,
)
from dppca_dask.methods.analyze_gauss.algorithm import check_dense_dim
from dppca_dask.methods.exact.algorithm import top_eigenpairs

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
    clipped_multiplier: float | None = None,
) -> AlgorithmRun[BlockPowerOutput]:
    """Centred Analyze Gauss as a generator of requests (see the module docstring).

    Notes
    -----
    Privacy contract: add/remove one row. Events in order: the quantile's ``EpsilonDeltaDpEvent(ε_q, 0)`` (with
    :class:`~dppca_dask.methods.adaptive_power.row_norm_bound.AutoBound`) or the clipped fraction's ``GaussianDpEvent(clipped_multiplier)`` (a fixed bound, when
    given), the mean's ``GaussianDpEvent(mean_multiplier)`` (``center="private"``), the Gram
    matrix's ``GaussianDpEvent(noise_multiplier)`` (sensitivity ``(c + r)²``), the variance's
    ``GaussianDpEvent(variance_multiplier)`` (when asked).
    """
    if not 1 <= n_components <= n_cols:
        raise InvalidParameterError(f"n_components must be in [1, {n_cols}]; got {n_components}")
    check_dense_dim(n_cols, max_dense_dim, CENTRED_GAUSS)
    mean = check_center(center, n_cols, mean_multiplier)
    events: list[Any] = []
    mean_count: float | None = None
    clipped: float | None = None
    if isinstance(row_norm_bound, AutoBound):
        row_norm_bound, quantile_event = yield from release_row_norm_bound(row_norm_bound, noise)
        events.append(quantile_event)
    elif clipped_multiplier is not None:
        clipped, clipped_event = yield from release_clipped_fraction(row_norm_bound,
                                                                     clipped_multiplier=clipped_multiplier, noise=noise)
        events.append(clipped_event)
    if isinstance(center, str):
        assert mean_multiplier is not None
        mean, mean_count, mean_event = yield from release_private_mean(row_norm_bound,
                                                                        mean_multiplier=mean_multiplier, noise=noise)
        events.append(mean_event)
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
    values, components = top_eigenpairs(noisy, n_components)
    # the Gram's noise: symmetric, std m·(c + r)² per entry (post-processing of the released eigenvalues)
    noise_to_signal = symmetric_noise_to_signal(values, sigma=noise_multiplier * bound * bound, dim=n_cols)
    if isinstance(center, str) and mean_multiplier is not None:
        noise_to_signal = np.maximum(noise_to_signal, mean_noise_to_signal(
            values, row_norm_bound=row_norm_bound, mean_multiplier=mean_multiplier, mean_count=mean_count,
            dim=n_cols))
    variance = None
    if variance_multiplier is not None:
        variance, variance_event = yield from release_explained_variance(
            components, row_norm_bound, mean, centred_row_bound=bound, variance_multiplier=variance_multiplier,
            noise=noise)
        events.append(variance_event)
        components, variance, order = sort_by_variance(components, variance)
        noise_to_signal, values = noise_to_signal[order], values[order]
    return BlockPowerOutput(components=components, thresholds=np.zeros((1, 0)), mean=mean, mean_count=mean_count,
                            variance=variance, events=tuple(events), row_norm_bound=float(row_norm_bound),
                            diagnostics=diagnostics(noise_to_signal), signal=values, clipped_fraction=clipped)


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
    noise_scale: float | None = None,
    clipped_fraction: bool | None = None,
) -> Any:
    """Calibrate a centred Analyze Gauss run from public parameters only (shares as in
    :func:`~dppca_dask.methods.adaptive_power.block_plan.plan_block_power`; the Gram release gets the rest), every noise scale
    then multiplied by the common factor of
    :func:`~dppca_dask.methods.adaptive_power.joint_scale.joint_noise_scale` (or ``noise_scale``), so that the releases
    together spend the whole (ε, δ)."""
    from dp_accounting import GaussianDpEvent

    from dppca_dask import accounting
    from dppca_dask.methods._registry import MechanismPlan

    check_dense_dim(n_cols, params.max_dense_dim, CENTRED_GAUSS)
    shared = plan_centred_releases(params, center=center, auto_bound=auto_bound, quantile=quantile,
                                   quantile_share=quantile_share, mean_share=mean_share,
                                   explained_variance=explained_variance, variance_share=variance_share,
                                   norm_grid=norm_grid, main="gram", main_label="the Gram matrix",
                                   clipped_fraction=not auto_bound if clipped_fraction is None else clipped_fraction)
    base_multiplier = accounting.calibrate_gaussian(epsilon=params.epsilon * (1.0 - shared.used_epsilon),
                                                    delta=params.delta * (1.0 - shared.used))

    def events_at(scale: float) -> list[Any]:
        releases = shared.scaled(scale)
        return [*releases.planned_events(), GaussianDpEvent(base_multiplier * scale), *releases.variance_events()]

    if noise_scale is None:
        noise_scale = joint_noise_scale(params, events_at, needed=shared.has_releases)
    shared = shared.scaled(noise_scale)
    multiplier = base_multiplier * noise_scale
    auto, mean_multiplier, variance_multiplier = shared.auto, shared.mean_multiplier, shared.variance_multiplier

    def make_run(noise: Any, on_release: Callable[..., None] | None, resume: Any) -> Any:
        if resume is not None:
            raise InvalidParameterError(f"mechanism={CENTRED_GAUSS!r} has one release and nothing to resume")
        return centred_gauss_run(n_cols=n_cols, n_components=params.n_components,
                                 row_norm_bound=auto if auto is not None else params.row_norm_bound,
                                 noise_multiplier=multiplier, noise=noise, center=center,
                                 mean_multiplier=mean_multiplier, variance_multiplier=variance_multiplier,
                                 max_dense_dim=params.max_dense_dim, clipped_multiplier=shared.clipped_multiplier)

    planned = shared.planned_events()
    planned.append(GaussianDpEvent(multiplier))
    if variance_multiplier is not None:
        planned.append(GaussianDpEvent(variance_multiplier))

    def replace_one(events: tuple[Any, ...]) -> list[Any]:
        flat = list(events)
        out = shared.replace_one_head(flat)
        if flat:  # the Gram matrix: √2·(c + r)² under replacement
            out.append(GaussianDpEvent(flat.pop(0).noise_multiplier / math.sqrt(2.0)))
        return out + flat  # the variance: √3 either way

    calibration = {
        "noise_multiplier": multiplier,
        "mean_noise_multiplier": mean_multiplier,
        "variance_noise_multiplier": variance_multiplier,
        "center": shared.center,
        "centred_bound": None if auto is not None else centred_bound(params.row_norm_bound, center),
        "row_norm_quantile": shared.quantile_json,
        "shares": dict(shared.shares),
        "noise_scale": noise_scale,
        "clipped_noise_multiplier": shared.clipped_multiplier,
    }
    return MechanismPlan(make_run, "add/remove one row", calibration, None, 1, planned_events=tuple(planned),
                         replace_one=(replace_one, "replace one row: the quantile's utilities move by <= 100 "
                                      "(epsilon times 100/max(a, 100 - a)); the mean's and the Gram matrix's "
                                      "sensitivities grow by sqrt(2); the explained variance's stays sqrt(3)"))
