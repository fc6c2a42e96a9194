"""Adaptive power iteration (seed 004): the sequential run's calibrated constants, planned events and plan.

The block plan (:mod:`dppca_dask.methods.adaptive_power.block_plan`) calibrates its iterations with the same
constants (:func:`adaptive_constants`, as one sequential component) and builds on this plan's events.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dppca_dask.errors import InvalidParameterError
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.methods._params import ADD_REMOVE_ROW, PCAParameters
from dppca_dask.methods._registry import MechanismPlan
from dppca_dask.methods.adaptive_power.sequential import adaptive_power_run, pass_row_budget, release_key

__all__ = ["AdaptiveConstants", "adaptive_constants"]


def _adaptive_resumed_keys(n_iter: int) -> Callable[[Any], list[str]]:
    def keys(resume: Any) -> list[str]:
        if resume is None:
            return []
        pending = getattr(resume, "pending_index", None)
        out = []
        started = resume.iteration > 0 or pending is not None  # the current component's start was drawn
        for k in range(resume.component + (1 if started else 0)):
            last = n_iter if k < resume.component else resume.iteration
            out.append(f"component-{k}/init")
            for t in range(last):
                out += [release_key(k, t, "svt"), release_key(k, t, "gaussian")]
        if pending is not None:
            out.append(release_key(resume.component, resume.iteration, "svt"))
        return out

    return keys


@dataclass(frozen=True)
class AdaptiveConstants:
    """The calibrated constants of T·k adaptive power iterations: public values fixed before the data is read."""

    epsilon_svt: float
    """ε of each AboveThreshold step."""
    noise_multiplier: float
    """Gaussian noise multiplier m of each iteration (std m·θ)."""
    form: str
    """The AboveThreshold noise form: ``"monotone"`` (standard) or ``"general"`` (the paper's)."""
    failure_delta: float
    """The δ set aside for the second-pass event over the whole run."""
    count: int
    """Iteration pairs T·k."""

    @property
    def pass_delta(self) -> float:
        """δ_pass: ``failure_delta / (1 + e^epsilon_svt)``."""
        from dppca_dask.methods.adaptive_power import calibration as adaptive_calibration

        return adaptive_calibration.pass_delta_for(self.failure_delta, self.epsilon_svt)

    @property
    def svt_delta(self) -> float:
        """δ of each AboveThreshold step, ``(1 + e^epsilon_svt)·δ_pass/(T·k)``."""
        from dppca_dask.methods.adaptive_power import calibration as adaptive_calibration

        return adaptive_calibration.svt_step_delta(self.epsilon_svt, self.pass_delta, self.count)

    def scaled(self, scale: float) -> AdaptiveConstants:
        """Every noise scale times ``scale``: the multiplier times it, ε_svt (Laplace scales ∝ 1/ε) over it."""
        if scale == 1.0:
            return self
        return dataclasses.replace(self, epsilon_svt=self.epsilon_svt / scale,
                                   noise_multiplier=self.noise_multiplier * scale)

    def events(self) -> tuple[Any, ...]:
        """The DpEvents of the T·k iteration pairs."""
        return _adaptive_events(self.epsilon_svt, self.svt_delta, self.noise_multiplier, self.count)


def adaptive_constants(params: PCAParameters) -> AdaptiveConstants:
    """Calibrate T·k adaptive power iterations to ``params``'s (ε, δ) (or the paper's constants)."""
    from dppca_dask.methods.adaptive_power import calibration as adaptive_calibration
    from dppca_dask.methods.adaptive_power import paper as seed004_paper

    count = params.n_iter * params.n_components
    share = adaptive_calibration.DEFAULT_FAILURE_DELTA_SHARE
    if params.calibration == "paper":
        # the paper's Lemma 3.1 constants, calibrated to the δ left after the second-pass share
        paper = seed004_paper.paper_adaptive_power_calibration(
            epsilon=params.epsilon, delta=params.delta * (1.0 - share), n_iter=count
        )
        # the paper's Lap(2/ε), Lap(4/ε)
        return AdaptiveConstants(paper.epsilon_svt, paper.noise_multiplier, "general", share * params.delta, count)
    cal = adaptive_calibration.calibrate_adaptive_power(
        epsilon=params.epsilon,
        delta=params.delta,
        n_iter=params.n_iter,
        svt_share=params.svt_share,
        n_components=params.n_components,
        failure_delta_share=share,
    )
    # Lyu–Su–Li 2017: Lap(2/ε), Lap(2/ε) for monotonic queries
    return AdaptiveConstants(cal.epsilon_svt, cal.noise_multiplier, "monotone", cal.failure_delta, count)


def _plan_adaptive_power(params: PCAParameters, n_cols: int,
                         constants: AdaptiveConstants | None = None) -> MechanismPlan:
    """The sequential run's plan; ``constants`` (default: :func:`adaptive_constants` of ``params``) fix its noise."""
    from dppca_dask import accounting
    from dppca_dask.methods.adaptive_power import calibration as adaptive_calibration
    from dppca_dask.methods.adaptive_power import paper as seed004_paper
    from dppca_dask.mechanisms import svt_cutoff, svt_replace_one_epsilon, svt_scales

    if constants is None:
        constants = adaptive_constants(params)
    count = constants.count
    epsilon_svt, multiplier, form = constants.epsilon_svt, constants.noise_multiplier, constants.form
    failure_delta, pass_delta = constants.failure_delta, constants.pass_delta
    svt_delta = adaptive_calibration.svt_step_delta(epsilon_svt, pass_delta, count)
    threshold_scale, query_scale = svt_scales(epsilon_svt, form=form)
    cutoff = svt_cutoff(epsilon_svt, params.beta)
    grid = ThresholdGrid.for_bound(
        params.row_norm_bound, per_octave=params.grid_per_octave, octaves=params.grid_octaves
    )
    top_m = pass_row_budget(cutoff=cutoff, threshold_scale=threshold_scale, query_scale=query_scale,
                            n_queries=grid.n_points, n_releases=count, pass_delta=pass_delta)

    def make_run(noise: Any, on_release: Callable[..., None] | None, resume: Any) -> Any:
        return adaptive_power_run(
            n_cols=n_cols,
            n_iter=params.n_iter,
            n_components=params.n_components,
            row_norm_bound=params.row_norm_bound,
            epsilon_svt=epsilon_svt,
            noise_multiplier=multiplier,
            cutoff=cutoff,
            grid=grid,
            noise=noise,
            svt_form=form,
            pass_delta=pass_delta,
            top_m=top_m,
            resume=resume,
            on_release=on_release,
        )

    paper_figure = seed004_paper.paper_adaptive_power_epsilon(
        epsilon_svt=epsilon_svt,
        noise_multiplier=multiplier,
        n_iter=count,
        delta=params.delta,
    )
    epsilon_replace = svt_replace_one_epsilon(threshold_scale, query_scale)
    replace_svt = accounting.EpsilonDeltaDpEvent(
        epsilon_replace, adaptive_calibration.svt_step_delta(epsilon_replace, pass_delta, count)
    )

    def replace_one(events: tuple[Any, ...]) -> list[Any]:
        from dp_accounting import dp_event

        out: list[Any] = []
        for leaf, n in accounting.flatten_events(events):
            if isinstance(leaf, accounting.EpsilonDeltaDpEvent):
                out.append(dp_event.SelfComposedDpEvent(replace_svt, n))
            elif isinstance(leaf, dp_event.GaussianDpEvent):
                out.append(dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(leaf.noise_multiplier / 2.0), n))
            else:
                raise InvalidParameterError(f"unexpected event {leaf!r:.100} in an adaptive power run")
        return out

    method = (
        f"replace one row: each AboveThreshold step is {epsilon_replace:.6g}-DP (its counts keep sensitivity 1 but "
        "are not monotonic: 1/threshold_scale + 2/query_scale, Lyu-Su-Li 2017), with the second-pass term "
        "(1 + e^eps)·delta_pass/K; each Gaussian step has sensitivity 2·theta (noise multiplier halved)"
    )
    return MechanismPlan(
        make_run,
        ADD_REMOVE_ROW,
        {"epsilon_svt": epsilon_svt, "noise_multiplier": multiplier, "cutoff": cutoff, "top_m": top_m,
         "grid": grid.to_json(), "calibration": params.calibration, "svt_form": form,
         "svt_threshold_scale": threshold_scale, "svt_query_scale": query_scale,
         "delta_split": {"total": params.delta, "second_pass": failure_delta,
                         "mechanisms": params.delta - failure_delta, "pass_probability": pass_delta,
                         "per_svt_step": svt_delta}},
        paper_figure,
        count,
        resumed_keys=_adaptive_resumed_keys(params.n_iter),
        planned_events=_adaptive_events(epsilon_svt, svt_delta, multiplier, count),
        replace_one=(replace_one, method),
    )


def _adaptive_events(epsilon_svt: float, svt_delta: float, multiplier: float, count: int) -> tuple[Any, ...]:
    from dp_accounting import dp_event

    from dppca_dask.accounting import EpsilonDeltaDpEvent

    pair = dp_event.ComposedDpEvent([EpsilonDeltaDpEvent(epsilon_svt, svt_delta), dp_event.GaussianDpEvent(multiplier)])
    return (dp_event.SelfComposedDpEvent(pair, count),)
