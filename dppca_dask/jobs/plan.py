"""What a job will spend, from its public parameters and the store's declared shape, before anything is reserved.

:func:`plan_job` validates every parameter of the job's mechanism (the checks :func:`dppca_dask.pca` and
:func:`dppca_dask.lowrank.lowrank` make before reading data, and the shape checks they make after opening the
store) and returns the neighbouring relation and the DpEvents the run emits, so that the ledger reserves exactly
what the run will spend: ``pca`` mechanisms through :func:`dppca_dask.api.plan_release` (its planned events),
private power iteration and the ``lowrank`` mechanisms from the same calibration functions the runs call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dppca_dask.errors import InvalidParameterError

__all__ = ["JobPlan", "plan_job", "planned_events"]


@dataclass(frozen=True)
class JobPlan:
    neighbouring: str
    events: tuple[Any, ...]


def planned_events(mechanism: str, *, n_rows: int, n_cols: int, epsilon: float, delta: float,
                   parameters: dict[str, Any]) -> JobPlan:
    """The relation and events of ``mechanism`` (a ``pca`` or ``lowrank`` mechanism) with ``parameters``."""
    from dppca_dask.jobs.spec import LOWRANK_JOB_MECHANISMS

    if mechanism in LOWRANK_JOB_MECHANISMS or "rank" in parameters:
        return _plan_lowrank(mechanism, n_rows=n_rows, n_cols=n_cols, epsilon=epsilon, delta=delta,
                             parameters=dict(parameters))
    return _plan_pca(mechanism, n_rows=n_rows, n_cols=n_cols, epsilon=epsilon, delta=delta,
                     parameters=dict(parameters))


def plan_job(spec: Any, store: Any) -> JobPlan:
    """:func:`planned_events` for a job spec and its opened store."""
    return planned_events(spec.mechanism, n_rows=int(store.n_rows), n_cols=int(store.n_cols), epsilon=spec.epsilon,
                          delta=spec.delta, parameters=dict(spec.parameters))


def _private_power_events(*, epsilon: float, delta: float, n_iter: int, n_components: int, symmetric: bool,
                          coherence: float | None, c_doubling: bool, n_values: int, calibration: str,
                          n_rows: int, n_cols: int) -> tuple[Any, ...]:
    from dppca_dask.accounting.hardt_roth import calibrate_private_power
    from dppca_dask.algorithms.private_power import coherence_ladder, default_ladder_start

    dimension = n_cols if symmetric else n_rows + n_cols
    if c_doubling:
        ladder = coherence_ladder(default_ladder_start(dimension) if coherence is None else coherence, dimension)
    else:
        ladder = (float(dimension) if coherence is None else min(float(coherence), float(dimension)),)
    cal = calibrate_private_power(epsilon=epsilon, delta=delta, n_iter=int(n_iter), n_components=int(n_components),
                                  n_runs=len(ladder), n_values=n_values, embedding=not symmetric,
                                  calibration=calibration)
    return tuple(cal.events())


def _plan_pca(mechanism: str, *, n_rows: int, n_cols: int, epsilon: float, delta: float,
              parameters: dict[str, Any]) -> JobPlan:
    from dppca_dask.api import plan_release

    plan = plan_release(n_cols, mechanism=mechanism, epsilon=epsilon, delta=delta, **parameters)
    events = tuple(plan.events)
    if mechanism == "private-power":
        from dppca_dask.algorithms.private_power import DEFAULT_PRIVATE_POWER_N_ITER

        n_components = int(parameters.get("n_components", 1))
        symmetric = bool(parameters.get("symmetric", False))
        if symmetric and n_rows != n_cols:
            raise InvalidParameterError(
                f"symmetric=True needs a square store; the store's declared shape is {n_rows} x {n_cols}; "
                "pass symmetric=False"
            )
        from dppca_dask.accounting import EpsilonDeltaDpEvent

        if events == (EpsilonDeltaDpEvent(epsilon, delta),):  # the planner has no exact events for it (yet)
            events = _private_power_events(
                epsilon=epsilon, delta=delta, n_iter=int(parameters.get("n_iter") or DEFAULT_PRIVATE_POWER_N_ITER),
                n_components=n_components, symmetric=symmetric, coherence=parameters.get("coherence"),
                c_doubling=bool(parameters.get("c_doubling", False)), n_values=n_components - 1,
                calibration=str(parameters.get("calibration", "standard")), n_rows=n_rows, n_cols=n_cols)
    return JobPlan(plan.neighbouring, events)


def _plan_lowrank(mechanism: str, *, n_rows: int, n_cols: int, epsilon: float, delta: float,
                  parameters: dict[str, Any]) -> JobPlan:
    """Every check :func:`dppca_dask.lowrank.lowrank` makes before and after opening the data, then the events."""
    from dp_accounting import dp_event

    from dppca_dask.accounting.hardt_roth import (
        calibrate_private_low_rank,
        entry_relation,
        row_change_relation,
        rr_sigma,
    )
    from dppca_dask.algorithms.private_power import DEFAULT_PRIVATE_POWER_N_ITER
    from dppca_dask.algorithms.randomized_response import DEFAULT_MAX_DENSE_BYTES, dense_bytes_needed
    from dppca_dask.lowrank import _ROW_PARAMETERS, _SPECIFIC, LOWRANK_MECHANISMS, _integer, _positive

    p = dict(parameters)
    if mechanism not in LOWRANK_MECHANISMS:
        raise InvalidParameterError(f"mechanism must be one of {', '.join(LOWRANK_MECHANISMS)}; got {mechanism!r}")
    allowed = set(_SPECIFIC[mechanism]) | (set(_ROW_PARAMETERS) if mechanism != "private-power" else set())
    known = {"rank", "calibration", "persist"} | {n for names in _SPECIFIC.values() for n in names} | set(
        _ROW_PARAMETERS)
    unknown = sorted(set(p) - known)
    if unknown:
        raise InvalidParameterError(f"unknown parameter(s) {', '.join(unknown)} for mechanism={mechanism!r}")
    wrong = sorted(set(p) - allowed - {"rank", "calibration", "persist"})
    if wrong:
        raise InvalidParameterError(f"{', '.join(wrong)} do not apply to mechanism={mechanism!r}")
    epsilon = _positive("epsilon", epsilon)
    delta = float(delta)
    if not 0.0 < delta < 1.0:
        raise InvalidParameterError(f"delta must be in (0, 1); got {delta}")
    rank = _integer("rank", p.get("rank"), 1)
    calibration = p.get("calibration", "standard")
    if calibration not in ("standard", "paper"):
        raise InvalidParameterError(f"calibration must be 'standard' or 'paper'; got {calibration!r}")
    if mechanism == "private-power":
        entry_bound = _positive("entry_bound", p.get("entry_bound", 1.0))
        coherence = p.get("coherence")
        if coherence is not None:
            coherence = _positive("coherence", coherence)
            if coherence < 1.0:
                raise InvalidParameterError(f"coherence must be finite and >= 1 (mu >= 1 always); got {coherence}")
        n_iter = p.get("n_iter")
        iters = DEFAULT_PRIVATE_POWER_N_ITER if n_iter is None else _integer("n_iter", n_iter, 1)
        symmetric = bool(p.get("symmetric", False))
        if rank > 1 and not symmetric:
            raise InvalidParameterError(
                f"mechanism='private-power' with rank={rank} needs symmetric=True (a symmetric PSD store); use "
                "mechanism='private-low-rank' for an asymmetric store"
            )
        if rank > n_cols:
            raise InvalidParameterError(f"rank must be <= the number of columns ({n_cols}); got {rank}")
        if symmetric and n_rows != n_cols:
            raise InvalidParameterError(
                f"symmetric=True needs a square store; the store's declared shape is {n_rows} x {n_cols}"
            )
        events = _private_power_events(
            epsilon=epsilon, delta=delta, n_iter=iters, n_components=rank, symmetric=symmetric, coherence=coherence,
            c_doubling=bool(p.get("c_doubling", False)), n_values=rank, calibration=calibration, n_rows=n_rows,
            n_cols=n_cols)
        return JobPlan(entry_relation(entry_bound), events)
    clip = _positive("row_norm_bound", p.get("row_norm_bound", 1.0), allow_inf=True)
    change = p.get("row_change_bound")
    if change is None:
        if math.isinf(clip):
            raise InvalidParameterError(
                "row_norm_bound=inf leaves rows unbounded; give row_change_bound (the L2 change of one row the "
                "guarantee covers) or a finite row_norm_bound"
            )
        change = clip
    else:
        change = _positive("row_change_bound", change)
    neighbouring = row_change_relation(change)
    if mechanism == "private-low-rank":
        oversampling = _integer("oversampling", p.get("oversampling", 2), 0)
        _positive("prune_alpha", p.get("prune_alpha", 1.0))
        left_factor = p.get("left_factor", "orthonormal")
        if left_factor not in ("orthonormal", "pruned"):
            raise InvalidParameterError(f"left_factor must be 'orthonormal' or 'pruned'; got {left_factor!r}")
        projection = p.get("projection", "paper")
        if projection not in ("paper", "tight"):
            raise InvalidParameterError(f"projection must be 'paper' or 'tight'; got {projection!r}")
        width = rank + oversampling
        if width > min(n_rows, n_cols):
            raise InvalidParameterError(  # the row count is not public: it is not named
                f"rank + oversampling = {width} must be at most the store's numbers of rows and of columns "
                f"({n_cols} columns); lower them"
            )
        cal = calibrate_private_low_rank(epsilon=epsilon, delta=delta, rank=rank, oversampling=oversampling,
                                         calibration=calibration, projection=projection)
        return JobPlan(neighbouring, tuple(cal.events()))
    limit = p.get("max_dense_bytes")
    limit = DEFAULT_MAX_DENSE_BYTES if limit is None else _integer("max_dense_bytes", limit, 1)
    if rank > min(n_rows, n_cols):
        raise InvalidParameterError(
            f"rank must be at most the store's numbers of rows and of columns ({n_cols} columns); got {rank}"
        )
    if dense_bytes_needed(n_rows, n_cols) > limit:  # the figure would tell the row count: not named
        raise InvalidParameterError(
            f"randomized-response densifies the matrix at the coordinator and would need more than "
            f"max_dense_bytes={limit}; use mechanism='private-low-rank', or raise max_dense_bytes if the "
            "coordinator has the memory"
        )
    return JobPlan(neighbouring, (dp_event.GaussianDpEvent(rr_sigma(epsilon, delta, calibration=calibration)),))

