"""What a job will spend, from its public parameters and the store's declared shape, before anything is reserved.

:func:`plan_job` asks the library's own planners, which validate every parameter exactly as the runs do and
return the neighbouring relation and the DpEvents a complete run emits, so that the ledger reserves exactly what
the run will spend: the registry's mechanism (:func:`dppca_dask.methods.get_mechanism`) plans it. A pca job's
``center`` is planned as :func:`dppca_dask.pca` runs it (the private mean and the explained variance are events
of the reservation); a ``topics`` job is planned by the topic model's registry entry.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["JobPlan", "plan_job", "planned_events", "rows_needed"]

#: Parameters about execution, not about the release (they never shape the noise).
_EXECUTION = frozenset({"persist"})


@dataclass(frozen=True)
class JobPlan:
    neighbouring: str
    events: tuple[Any, ...]
    calibration: Mapping[str, Any] = field(default_factory=dict)
    """Public calibrated constants of the planner (for the dry run's description)."""

    def describe(self) -> tuple[str, ...]:
        """One line per part of the release the reservation covers (public constants only)."""
        cal = self.calibration
        lines: list[str] = []
        if "whitening_multiplier" in cal:  # the topic model
            lines.append(f"whitening: {cal['n_whitening_releases']} Gaussian releases, noise multiplier "
                         f"{cal['whitening_multiplier']:.4g}")
            lines.append(f"tensor power method: {cal['n_tensor_releases']} Gaussian releases, noise multiplier "
                         f"{cal['tensor_multiplier']:.4g}")
            return tuple(lines)
        center = cal.get("center")
        if center is not None:
            shares = cal.get("shares", {})
            if center == "private":
                lines.append(f"center: private (the mean of the clipped rows: one Gaussian release, noise multiplier "
                             f"{cal['mean_noise_multiplier']:.4g}, {shares.get('mean', 0):g} of the budget)")
            else:
                lines.append(f"center: {center}")
            if cal.get("variance_noise_multiplier") is not None:
                lines.append(f"explained variance: one Gaussian release, noise multiplier "
                             f"{cal['variance_noise_multiplier']:.4g}, {shares.get('explained_variance', 0):g} of "
                             "the budget")
        lines.append(f"events reserved: {len(self.events)}")
        return tuple(lines)


def rows_needed(mechanism: str, parameters: Mapping[str, Any]) -> str | None:
    """Why the plan of ``mechanism`` with ``parameters`` needs the store's number of rows, or ``None`` when it is
    made from the width alone (a dry run before the job's ingest knows only the declared width)."""
    from dppca_dask.methods import get_mechanism

    if mechanism == "topics":
        return None
    if "rank" in parameters or get_mechanism(mechanism).entry == "lowrank":
        return "a low-rank release is planned and checked against the store's number of rows"
    if mechanism == "private-power" and parameters.get("c_doubling") and not parameters.get("symmetric"):
        return "private power's C-doubling on the embedding plans its ladder from the store's number of rows"
    return None


def planned_events(mechanism: str, *, n_rows: int | None, n_cols: int, epsilon: float, delta: float,
                   parameters: dict[str, Any]) -> JobPlan:
    """The relation and events of ``mechanism`` (a ``pca``, ``lowrank`` or ``topics`` mechanism) with
    ``parameters``; ``n_rows=None`` (not known yet) only where :func:`rows_needed` says it is not needed."""
    assert n_rows is not None or rows_needed(mechanism, parameters) is None, "the caller checks rows_needed"
    from dppca_dask.methods import get_mechanism

    release = {k: v for k, v in parameters.items() if k not in _EXECUTION}
    if mechanism == "topics":
        plan = get_mechanism("topics", "topics").plan({**release, "epsilon": epsilon, "delta": delta},
                                                      n_rows=n_rows, n_cols=n_cols)
        return JobPlan(plan.neighbouring, tuple(plan.planned_events), dict(plan.calibration))
    if "rank" in release or get_mechanism(mechanism).entry == "lowrank":
        assert n_rows is not None  # rows_needed says a low-rank plan needs it
        plan = get_mechanism(mechanism, "lowrank").plan(
            {**release, "epsilon": epsilon, "delta": delta}, n_rows=n_rows, n_cols=n_cols
        )
        return JobPlan(plan.neighbouring, tuple(plan.events))
    from dppca_dask.api import plan_release

    # the mechanism's own planner states the events exactly from the declared shape (n_rows included)
    release_plan = plan_release(n_cols, n_rows=n_rows, mechanism=mechanism, epsilon=epsilon, delta=delta, **release)
    return JobPlan(release_plan.neighbouring, tuple(release_plan.events), dict(release_plan.calibration))


def plan_job(spec: Any, store: Any) -> JobPlan:
    """:func:`planned_events` for a job spec and its opened store."""
    return planned_events(spec.mechanism, n_rows=int(store.n_rows), n_cols=int(store.n_cols), epsilon=spec.epsilon,
                          delta=spec.delta, parameters=dict(spec.parameters))
