"""What a job will spend, from its public parameters and the store's declared shape, before anything is reserved.

:func:`plan_job` asks the library's own planners, which validate every parameter exactly as the runs do and
return the neighbouring relation and the DpEvents a complete run emits, so that the ledger reserves exactly what
the run will spend: the registry's mechanism (:func:`dppca_dask.methods.get_mechanism`) plans it.
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
    from dppca_dask.methods import get_mechanism

    release = {k: v for k, v in parameters.items() if k not in _EXECUTION}
    if "rank" in release or get_mechanism(mechanism).entry == "lowrank":
        plan = get_mechanism(mechanism, "lowrank").plan(
            {**release, "epsilon": epsilon, "delta": delta}, n_rows=n_rows, n_cols=n_cols
        )
        return JobPlan(plan.neighbouring, tuple(plan.events))
    from dppca_dask.api import plan_release

    # the mechanism's own planner states the events exactly from the declared shape (n_rows included)
    release_plan = plan_release(n_cols, n_rows=n_rows, mechanism=mechanism, epsilon=epsilon, delta=delta, **release)
    return JobPlan(release_plan.neighbouring, tuple(release_plan.events))


def plan_job(spec: Any, store: Any) -> JobPlan:
    """:func:`planned_events` for a job spec and its opened store."""
    return planned_events(spec.mechanism, n_rows=int(store.n_rows), n_cols=int(store.n_cols), epsilon=spec.epsilon,
                          delta=spec.delta, parameters=dict(spec.parameters))
