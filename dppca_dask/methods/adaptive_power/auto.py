"""``mechanism="auto"``: an accounted choice between block adaptive power iteration and Analyze Gauss.

Adaptive power adds noise of std ``m·θ`` per coordinate of ``A(t)X`` (m: its noise multiplier for T iterations,
θ: the released filter threshold); Analyze Gauss adds noise of std ``σ·(c + r)²`` per entry of the Gram matrix
(σ: its multiplier for one release, ``(c + r)²``: the Gram's sensitivity). Both errors are, to first order, the
noise projected on the top directions over the eigen-gap — the same gap for both — so the mechanism with the
smaller noise per entry wins (the seed 004 spec's §5: adaptive power wins by the factor ≈ ``(σ(c+r)²/(mθ))²`` when
θ settles far below c², and loses when θ stays near c²). θ is the one unknown, and it is private: the run
releases it first.

1. (``row_norm_bound="auto"``) the bound c, or (a fixed bound) the fraction of rows it clips, then
   (``center="private"``) the mean, each once, as in a block run;
2. the *pilot*: a block run of :data:`DEFAULT_PILOT_ITER` iterations from the public share
   :data:`DEFAULT_DECISION_SHARE` of (ε, δ) (its own release keys ``decision/...``); its last released threshold θ̂
   estimates the threshold a full run would settle at;
3. the *decision*, post-processing of θ̂ and public constants: adaptive power when ``m·θ̂ ≤ γ·σ·(c + r)²``
   (γ = :data:`DEFAULT_GAMMA`), else Analyze Gauss;
4. the chosen mechanism with the rest of the budget (its explained variance included), centred at the released
   mean; adaptive power starts from the pilot's released iterate (post-processing), so the pilot's iterations are
   not lost when it wins.

For ``d`` above ``max_dense_dim`` Analyze Gauss cannot run, and ``auto`` is block adaptive power with the whole
budget: that branch depends on the public d only.

Privacy contract: add/remove one row. Events, in order: the quantile's and the mean's (as in
:func:`~dppca_dask.methods.adaptive_power.block_plan.plan_block_power`), the pilot's T_p pairs of AboveThreshold and Gaussian
events (the decision costs nothing more: it is post-processing of the pilot's released θ), then one
``EpsilonDeltaDpEvent(ε_main, δ_main)`` for the chosen mechanism. Both branches are calibrated from public
parameters to be (ε_main, δ_main)-DP (their own events compose to at most that: calibration never overshoots and
their parts are split by basic composition), so the event does not depend on the branch, and the ledger reserves
exactly the events the run emits. The parts compose to at most the user's total by basic composition; the report
composes the events with the PLD accountant. What the run does after the decision (Analyze Gauss's dense Gram
pass, or adaptive power's T passes) depends on the data only through the released decision.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from dppca_dask.coordinator.requests import AlgorithmRun
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.methods.adaptive_power.block import BlockPowerOutput
from dppca_dask.methods.adaptive_power.block_plan import block_constants, plan_block_power
from dppca_dask.methods.adaptive_power.centring import (
    DEFAULT_MEAN_SHARE,
    centred_bound,
    plan_centred_releases,
    release_private_mean,
)
from dppca_dask.methods.adaptive_power.joint_scale import joint_noise_scale
from dppca_dask.methods.adaptive_power.row_norm_bound import (
    DEFAULT_NORM_QUANTILE,
    DEFAULT_QUANTILE_SHARE,
    AutoBound,
    release_clipped_fraction,
    release_row_norm_bound,
)

__all__ = ["AUTO", "DEFAULT_DECISION_SHARE", "DEFAULT_GAMMA", "DEFAULT_PILOT_ITER", "plan_auto"]

#: The mechanism's name in the registry.
AUTO = "auto"
#: Public share of the user's (ε, δ) spent on the pilot whose released threshold decides.
DEFAULT_DECISION_SHARE = 0.1
#: Iterations of the pilot.
DEFAULT_PILOT_ITER = 2
#: Adaptive power is chosen when its predicted noise per entry ``m·θ̂`` is at most γ times Analyze Gauss's.
DEFAULT_GAMMA = 1.0


def plan_auto(
    params: Any,
    n_cols: int,
    *,
    center: str | np.ndarray | None = None,
    auto_bound: bool = False,
    decision_share: float = DEFAULT_DECISION_SHARE,
    pilot_iter: int = DEFAULT_PILOT_ITER,
    gamma: float = DEFAULT_GAMMA,
    mean_share: float = DEFAULT_MEAN_SHARE,
    quantile_share: float = DEFAULT_QUANTILE_SHARE,
    quantile: float = DEFAULT_NORM_QUANTILE,
) -> Any:
    """Calibrate ``mechanism="auto"`` from public parameters only (see the module docstring)."""
    from dppca_dask import accounting
    from dppca_dask.methods.analyze_gauss.centred import plan_centred_gauss
    from dppca_dask.methods._registry import MechanismPlan

    if params.calibration != "standard":
        raise InvalidParameterError(
            f"mechanism={AUTO!r} needs calibration='standard' (its chosen release is reported as the (epsilon, delta) "
            f"it is calibrated to); got calibration={params.calibration!r}; name the mechanism to reproduce a paper"
        )
    block_params = dataclasses.replace(params, mechanism="adaptive-power-block")
    if n_cols > params.max_dense_dim:  # Analyze Gauss cannot run: a decision on the public d alone
        plan = plan_block_power(block_params, n_cols, center=center, auto_bound=auto_bound, mean_share=mean_share,
                                quantile_share=quantile_share, quantile=quantile)
        inner = plan.make_run

        def make_block(noise: Any, on_release: Callable[..., None] | None, resume: Any) -> Any:
            return _labelled(inner(noise, on_release, resume), {
                "chosen": "adaptive-power-block",
                "rule": f"d = {n_cols} > max_dense_dim = {params.max_dense_dim}: Analyze Gauss cannot run"})

        plan.make_run = make_block
        plan.calibration = {**dict(plan.calibration), "auto": {"rule": "d above max_dense_dim"}}
        return plan

    if not (0.0 < decision_share < 1.0):
        raise InvalidParameterError(f"decision_share must be in (0, 1); got {decision_share}")
    uses_mean = isinstance(center, str)
    shared = plan_centred_releases(params, center=center, auto_bound=auto_bound, quantile=quantile,
                                   quantile_share=quantile_share, mean_share=mean_share, explained_variance=None,
                                   other_shares={"decision": decision_share}, main="release",
                                   main_label="the release", clipped_fraction=not auto_bound)
    epsilon_main, delta_main = params.epsilon * (1.0 - shared.used_epsilon), params.delta * (1.0 - shared.used)
    pilot_params = dataclasses.replace(block_params, epsilon=params.epsilon * decision_share,
                                       delta=params.delta * decision_share, n_iter=pilot_iter)
    given = None if center is None or uses_mean else np.asarray(center, dtype=np.float64)
    # the calibrations do not depend on the released bound or mean (only the grids do): plan them once here
    probe_center = given if given is not None else (np.zeros(n_cols) if uses_mean else None)
    _, _, pilot_constants = block_constants(
        pilot_params, center=probe_center, explained_variance=False, mean_share=mean_share, variance_share=0.0,
        auto_bound=False, quantile=quantile, quantile_share=quantile_share, norm_grid=None, clipped_fraction=False)

    def events_at(scale: float) -> list[Any]:  # the main release's noise scales as 1/epsilon_main
        return [*shared.scaled(scale).planned_events(), *pilot_constants.scaled(scale).events(),
                accounting.EpsilonDeltaDpEvent(epsilon_main / scale, delta_main)]

    pilot_scale = joint_noise_scale(params, events_at, needed=True)
    shared, epsilon_main = shared.scaled(pilot_scale), epsilon_main / pilot_scale
    main_params = dataclasses.replace(block_params, epsilon=epsilon_main, delta=delta_main)
    auto, mean_multiplier = shared.auto, shared.mean_multiplier
    pilot_probe = plan_block_power(pilot_params, n_cols, center=probe_center, explained_variance=False,
                                   release_prefix="decision/", noise_scale=pilot_scale, clipped_fraction=False)
    block_probe = plan_block_power(main_params, n_cols, center=probe_center, clipped_fraction=False)
    gauss_probe = plan_centred_gauss(main_params, n_cols, center=probe_center, clipped_fraction=False)
    power_multiplier = float(block_probe.calibration["noise_multiplier"])
    gauss_multiplier = float(gauss_probe.calibration["noise_multiplier"])
    main_event = accounting.EpsilonDeltaDpEvent(epsilon_main, delta_main)

    def make_run(noise: Any, on_release: Callable[..., None] | None, resume: Any) -> Any:
        if resume is not None:
            raise InvalidParameterError(f"mechanism={AUTO!r} does not resume an interrupted run; run it again")
        return auto_run(n_cols=n_cols, params=params, pilot_params=pilot_params, main_params=main_params,
                        pilot_scale=pilot_scale, center=center, auto=auto, mean_multiplier=mean_multiplier, gamma=gamma,
                        clipped_multiplier=shared.clipped_multiplier,
                        power_multiplier=power_multiplier, gauss_multiplier=gauss_multiplier,
                        main_event=main_event, noise=noise, on_release=on_release)

    planned = shared.planned_events()
    planned.extend(pilot_probe.planned_events or ())
    planned.append(main_event)
    calibration = {
        "auto": {"decision_share": decision_share, "pilot_iter": pilot_iter, "gamma": gamma,
                 "rule": "adaptive-power-block if m * theta_pilot <= gamma * sigma * (c + r)^2, else analyze-gauss",
                 "power_noise_multiplier": power_multiplier, "gauss_noise_multiplier": gauss_multiplier,
                 "main": {"epsilon": epsilon_main, "delta": delta_main}},
        "noise_scale": pilot_scale,
        "pilot": dict(pilot_probe.calibration),
        "mean_noise_multiplier": mean_multiplier,
        "clipped_noise_multiplier": shared.clipped_multiplier,
        "center": shared.center,
        "row_norm_quantile": shared.quantile_json,
        "shares": dict(shared.shares),
    }
    return MechanismPlan(make_run, pilot_probe.neighbouring, calibration, None, pilot_iter + params.n_iter,
                         planned_events=tuple(planned))


def _labelled(run: Any, decision: dict[str, Any]) -> AlgorithmRun[BlockPowerOutput]:
    output = yield from run
    return dataclasses.replace(output, mechanism=decision["chosen"], decision=decision)


def auto_run(
    *,
    n_cols: int,
    params: Any,
    pilot_params: Any,
    main_params: Any,
    center: str | np.ndarray | None,
    pilot_scale: float = 1.0,
    clipped_multiplier: float | None = None,
    auto: AutoBound | None,
    mean_multiplier: float | None,
    gamma: float,
    power_multiplier: float,
    gauss_multiplier: float,
    main_event: Any,
    noise: NoiseSource,
    on_release: Callable[..., None] | None = None,
) -> AlgorithmRun[BlockPowerOutput]:
    """The run of ``mechanism="auto"`` as a generator of requests (see the module docstring).

    ``on_release`` receives the released states of the pilot's and the chosen block run's iterations (progress);
    the events passed with them are those of the inner run (a resume is not offered)."""
    from dppca_dask.methods.analyze_gauss.centred import plan_centred_gauss

    events: list[Any] = []
    bound = float(params.row_norm_bound)
    if auto is not None:  # Step 1: the bound, as a block run releases it
        bound, quantile_event = yield from release_row_norm_bound(auto, noise)
        events.append(quantile_event)
    clipped = None
    if auto is None and clipped_multiplier is not None:  # the share of rows the fixed bound clips
        clipped, clipped_event = yield from release_clipped_fraction(bound, clipped_multiplier=clipped_multiplier,
                                                                     noise=noise)
        events.append(clipped_event)
    mean: np.ndarray | None = None if center is None or isinstance(center, str) else np.asarray(center, float)
    mean_count = None
    if isinstance(center, str):  # the mean, once; both later runs use it as a given (released) centre
        assert mean_multiplier is not None
        mean, mean_count, mean_event = yield from release_private_mean(bound, mean_multiplier=mean_multiplier,
                                                                        noise=noise)
        events.append(mean_event)
    pilot_params = dataclasses.replace(pilot_params, row_norm_bound=bound)
    main_params = dataclasses.replace(main_params, row_norm_bound=bound)
    # Step 2: the pilot
    pilot = plan_block_power(pilot_params, n_cols, center=mean, explained_variance=False, release_prefix="decision/",
                             noise_scale=pilot_scale, clipped_fraction=False)
    pilot_out = yield from pilot.make_run(noise, on_release, None)
    events.extend(pilot_out.events)
    theta = float(pilot_out.thresholds[0, -1])
    sensitivity = centred_bound(bound, mean) ** 2
    # Step 3: the decision (post-processing of the released θ and public constants)
    predicted_power, predicted_gauss = power_multiplier * theta, gauss_multiplier * sensitivity
    chosen = "adaptive-power-block" if predicted_power <= gamma * predicted_gauss else "analyze-gauss"
    decision = {"chosen": chosen, "pilot_thresholds": [float(t) for t in pilot_out.thresholds[0]],
                "predicted_noise": {"adaptive-power-block": predicted_power, "analyze-gauss": predicted_gauss},
                "gamma": gamma}
    # Step 4: the chosen mechanism, with the rest of the budget
    if chosen == "analyze-gauss":
        plan = plan_centred_gauss(main_params, n_cols, center=mean, clipped_fraction=False)
    else:
        plan = plan_block_power(main_params, n_cols, center=mean, start=pilot_out.basis.T, clipped_fraction=False)
    output = yield from plan.make_run(noise, on_release, None)
    events.append(main_event)  # the branch's own events compose to at most this, whichever branch ran
    diag = output.diagnostics
    if isinstance(center, str) and mean_multiplier is not None and diag is not None and output.signal is not None:
        from dppca_dask.diagnostics import with_mean_error

        diag = with_mean_error(diag, output.signal, row_norm_bound=bound, mean_multiplier=mean_multiplier,
                               mean_count=mean_count, dim=n_cols)  # the branch ran with the mean as given
    return dataclasses.replace(output, mean=mean if isinstance(center, str) else output.mean, mean_count=mean_count,
                               events=tuple(events), row_norm_bound=bound, mechanism=chosen, decision=decision,
                               diagnostics=diag, clipped_fraction=clipped)

