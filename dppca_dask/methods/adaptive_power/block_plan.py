"""The block run's planner: :func:`plan_block_power` calibrates a block run from public parameters only (the side
releases from their shares, the iterations as one sequential component, then one joint noise scale), and its
defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.methods.adaptive_power.block import BlockPowerState, block_power_run, block_release_key
from dppca_dask.methods.adaptive_power.centring import (
    DEFAULT_MEAN_SHARE,
    CentredReleases,
    centred_bound,
    plan_centred_releases,
)
from dppca_dask.methods.adaptive_power.explained_variance import DEFAULT_VARIANCE_SHARE
from dppca_dask.methods.adaptive_power.joint_scale import joint_noise_scale
from dppca_dask.methods.adaptive_power.row_norm_bound import DEFAULT_NORM_QUANTILE, DEFAULT_QUANTILE_SHARE
from dppca_dask.methods.adaptive_power.sequential import pass_row_budget

__all__ = ["BLOCK_POWER", "DEFAULT_OVERSAMPLE", "block_constants", "plan_block_power"]

#: Extra columns of the block (public): the top components then converge at the rate σ_{k+3}/σ_k. On w8a (centred,
#: c = 1, ε = 1, k = 1, T = 5) the median sin² to scikit-learn's top component was 0.019 with 0, 0.0049 with 2,
#: 0.0053 with 4 and 0.0054 with 9 extra columns; with them the block beat k sequential runs for k = 2, 5, 10, 20 on
#: w8a and on a planted rank-20 matrix (benchmarks/bench_utility.py --block). With row_norm_bound="auto" on w8a
#: (c ≈ 4.8, where the top direction already dominates) 2 extra columns cost accuracy at k = 1 (median sin² 0.018
#: against 0.003 without), measured once: benchmarks/bench_centred.py.
DEFAULT_OVERSAMPLE = 2
#: The mechanism's name in the registry.
BLOCK_POWER = "adaptive-power-block"


def block_constants(params: Any, *, center: str | np.ndarray | None, explained_variance: bool, mean_share: float,
                    variance_share: float, auto_bound: bool, quantile: float, quantile_share: float,
                    norm_grid: Any, clipped_fraction: bool | None = None) -> tuple[CentredReleases, Any, Any]:
    """The releases of a block run before the joint scale: the side releases calibrated to their shares, the
    parameters of the iterations and their constants calibrated to the rest (:func:`plan_block_power`)."""
    from dppca_dask.methods.adaptive_power.plan import adaptive_constants

    shared = plan_centred_releases(params, center=center, auto_bound=auto_bound, quantile=quantile,
                                   quantile_share=quantile_share, mean_share=mean_share,
                                   explained_variance=explained_variance, variance_share=variance_share,
                                   norm_grid=norm_grid, main="iterations", main_label="the iterations",
                                   clipped_fraction=not auto_bound if clipped_fraction is None else clipped_fraction)
    power_params = dataclasses.replace(params, mechanism="adaptive-power", n_components=1,
                                       epsilon=params.epsilon * (1.0 - shared.used_epsilon),
                                       delta=params.delta * (1.0 - shared.used))
    return shared, power_params, adaptive_constants(power_params)


def _check_resume(resume: Any) -> BlockPowerState | None:
    if resume is not None and not isinstance(resume, BlockPowerState):
        raise InvalidParameterError(
            f"mechanism={BLOCK_POWER!r} resumes from the BlockPowerState its run wrote; got {type(resume).__name__}"
        )
    return resume


def plan_block_power(
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
    oversample: int = DEFAULT_OVERSAMPLE,
    start: np.ndarray | None = None,
    release_prefix: str = "",
    noise_scale: float | None = None,
    clipped_fraction: bool | None = None,
) -> Any:
    """Calibrate a block run from public parameters only (a :class:`~dppca_dask.methods.MechanismPlan`).

    The user's total (ε, δ) is split by public shares: ``mean_share`` for the private mean (when
    ``center="private"``), ``variance_share`` for the explained variance (when asked), the rest for the T
    iterations, calibrated exactly as a sequential run of one component (the same T pairs of events). The parts
    compose by basic composition to at most the total, and the report composes the emitted events with the PLD
    accountant (at or below the total). With ``auto_bound``, ``quantile_share`` of ε (no δ) releases the bound
    c as the ``quantile`` of row norms on the public ``norm_grid`` (default
    :class:`~dppca_dask.mechanisms.quantile.NormGrid`: 2^-10 to 2^20, four points per octave), and
    ``params.row_norm_bound`` is not used.

    The shares fix the releases' relative noise; every noise scale (the Gaussian multipliers, the Laplace scales
    of the AboveThreshold steps and of the quantile) is then multiplied by one common factor s,
    :func:`~dppca_dask.methods.adaptive_power.joint_scale.joint_noise_scale`, so that the PLD composition of all the run's events is the total itself rather than
    below it (``calibration["noise_scale"]``). ``noise_scale`` imposes s instead (a caller that calibrates this run
    jointly with releases of its own: ``mechanism="auto"``'s pilot). With a fixed bound the run first releases
    the fraction of rows it clips from ``DEFAULT_CLIPPED_SHARE`` of (ε, δ) (``clipped_fraction``, default: unless
    ``auto_bound``; false for runs whose caller released it).
    """
    from dppca_dask.methods._registry import MechanismPlan
    from dppca_dask.methods.adaptive_power.plan import _plan_adaptive_power

    shared, power_params, constants = block_constants(
        params, center=center, explained_variance=explained_variance, mean_share=mean_share,
        variance_share=variance_share, auto_bound=auto_bound, quantile=quantile, quantile_share=quantile_share,
        norm_grid=norm_grid, clipped_fraction=clipped_fraction)

    def events_at(scale: float) -> list[Any]:
        releases = shared.scaled(scale)
        return [*releases.planned_events(), *constants.scaled(scale).events(), *releases.variance_events()]

    if noise_scale is None:
        noise_scale = joint_noise_scale(params, events_at, needed=shared.has_releases)
    shared = shared.scaled(noise_scale)
    uses_mean = isinstance(center, str)
    auto = shared.auto
    base = _plan_adaptive_power(power_params, n_cols, constants.scaled(noise_scale))
    cal = dict(base.calibration)
    bound = centred_bound(float(auto.grid.values[-1]) if auto is not None else params.row_norm_bound, center)
    grid = ThresholdGrid.for_bound(bound, per_octave=params.grid_per_octave, octaves=params.grid_octaves)
    mean_multiplier, variance_multiplier = shared.mean_multiplier, shared.variance_multiplier
    pass_delta = cal["delta_split"]["pass_probability"]
    top_m = pass_row_budget(cutoff=cal["cutoff"], threshold_scale=cal["svt_threshold_scale"],
                            query_scale=cal["svt_query_scale"], n_queries=grid.n_points, n_releases=params.n_iter,
                            pass_delta=pass_delta)

    def make_run(noise: Any, on_release: Callable[..., None] | None, resume: Any) -> Any:
        _check_resume(resume)
        return block_power_run(
            n_cols=n_cols, n_iter=params.n_iter, n_components=params.n_components,
            row_norm_bound=auto if auto is not None else params.row_norm_bound, epsilon_svt=cal["epsilon_svt"],
            noise_multiplier=cal["noise_multiplier"], cutoff=cal["cutoff"], grid=grid, noise=noise,
            svt_form=cal["svt_form"], pass_delta=pass_delta, top_m=top_m, center=center,
            mean_multiplier=mean_multiplier, variance_multiplier=variance_multiplier, on_release=on_release,
            oversample=oversample, resume=resume, start=start, release_prefix=release_prefix,
            clipped_multiplier=shared.clipped_multiplier,
        )

    def resumed_keys(resume: Any) -> list[str]:
        if _check_resume(resume) is None:
            return []
        keys = []
        if auto is not None and resume.row_norm_bound is not None:
            keys.append("row-norm-quantile")
        if resume.clipped_fraction is not None:
            keys.append("clipped-fraction")
        if uses_mean and resume.mean is not None:
            keys.append("mean")
        if resume.x is not None and start is None:
            keys.append(release_prefix + "block/init")
        for t in range(resume.iteration):
            keys += [release_prefix + block_release_key(t, what) for what in ("svt", "gaussian")]
        if resume.pending_index is not None:
            keys.append(release_prefix + block_release_key(resume.iteration, "svt"))
        if resume.variance is not None:
            keys.append("explained-variance")
        return keys

    planned = [*shared.planned_events(), *(base.planned_events or ()), *shared.variance_events()]
    assert base.replace_one is not None
    power_replace, power_method = base.replace_one

    def replace_one(events: tuple[Any, ...]) -> list[Any]:
        # replacing one row: the quantile and the mean as in CentredReleases.replace_one_head; the variance's
        # entries by <= √3 as under add/remove (two non-negative vectors of L1 norm <= 1 differ by <= √2 in L2, the
        # total by <= 1, the count by 0); the iterations as in the sequential version
        flat = list(events)
        head = shared.replace_one_head(flat)
        tail: list[Any] = []
        if variance_multiplier is not None and flat and len(flat) % 2 == 1:
            tail = [flat.pop()]
        return head + power_replace(tuple(flat)) + tail

    calibration = {
        **cal,
        "grid": grid.to_json(),
        "top_m": top_m,
        "centred_bound": None if auto is not None else bound,
        "block_width": min(n_cols, params.n_components + oversample),
        "center": shared.center,
        "shares": dict(shared.shares),
        "noise_scale": noise_scale,
        "mean_noise_multiplier": mean_multiplier,
        "row_norm_quantile": shared.quantile_json,
        "variance_noise_multiplier": variance_multiplier,
        "clipped_noise_multiplier": shared.clipped_multiplier,
    }
    return MechanismPlan(
        make_run,
        base.neighbouring,
        calibration,
        base.paper_figure,
        params.n_iter,
        resumed_keys=resumed_keys,
        planned_events=tuple(planned),
        replace_one=(replace_one, power_method + "; the private mean's sensitivity doubles from sqrt(2) to 2 "
                     "(noise multiplier divided by sqrt(2)); the explained variance's stays sqrt(3)"),
    )
