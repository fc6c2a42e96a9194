"""What a job will spend, from its public parameters and the store's declared shape, before anything is reserved.

:func:`plan_job` asks the library's own planners, which validate every parameter exactly as the runs do and
return the neighbouring relation and the DpEvents a complete run emits, so that the ledger reserves exactly what
the run will spend: ``pca`` mechanisms through :func:`dppca_dask.api.plan_release`, ``lowrank`` mechanisms
through :func:`dppca_dask.lowrank.plan_lowrank`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["JobPlan", "plan_job", "planned_events"]

#: Parameters about execution, not about the release (they never shape the noise).
_EXECUTION = frozenset({"persist"})


@dataclass(frozen=True)
class JobPlan:
    neighbouring: str
    events: tuple[Any, ...]


def planned_events(mechanism: str, *, n_rows: int, n_cols: int, epsilon: float, delta: float,
                   parameters: dict[str, Any]) -> JobPlan:
    """The relation and events of ``mechanism`` (a ``pca`` or ``lowrank`` mechanism) with ``parameters``."""
    from dppca_dask.jobs.spec import LOWRANK_JOB_MECHANISMS

    release = {k: v for k, v in parameters.items() if k not in _EXECUTION}
    if mechanism in LOWRANK_JOB_MECHANISMS or "rank" in release:
        from dppca_dask.lowrank import plan_lowrank

        low = plan_lowrank(n_rows, n_cols, epsilon=epsilon, delta=delta, mechanism=mechanism, **release)
        return JobPlan(low.neighbouring, tuple(low.events))
    from dppca_dask.api import plan_release

    plan = plan_release(n_cols, mechanism=mechanism, epsilon=epsilon, delta=delta, **release)
    events = tuple(plan.events)
    if mechanism == "private-power" and release.get("c_doubling") and not release.get("symmetric"):
        # The ladder of the embedding [[0, A], [Aᵀ, 0]] depends on n_rows, which plan_release is not given.
        from dppca_dask.algorithms.private_power import DEFAULT_PRIVATE_POWER_N_ITER, planned_private_power

        cal = planned_private_power(
            n_rows=n_rows, n_cols=n_cols, epsilon=epsilon, delta=delta,
            n_iter=int(release.get("n_iter") or DEFAULT_PRIVATE_POWER_N_ITER),
            n_components=int(release.get("n_components", 1)), symmetric=False,
            coherence=release.get("coherence"), c_doubling=True,
            calibration=str(release.get("calibration", "standard")),
        )
        events = tuple(cal.events())
    return JobPlan(plan.neighbouring, events)


def plan_job(spec: Any, store: Any) -> JobPlan:
    """:func:`planned_events` for a job spec and its opened store."""
    return planned_events(spec.mechanism, n_rows=int(store.n_rows), n_cols=int(store.n_cols), epsilon=spec.epsilon,
                          delta=spec.delta, parameters=dict(spec.parameters))
