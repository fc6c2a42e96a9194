"""What a job will spend, from its public parameters and the store's declared shape, before anything is reserved.

:func:`plan_job` asks the library's own planners, which validate every parameter exactly as the runs do and
return the neighbouring relation and the DpEvents a complete run emits, so that the ledger reserves exactly what
the run will spend: the registry's entry kind of the mechanism (:attr:`dppca_dask.methods.Entry.plan`) plans it.
A pca job's ``center`` is planned as :func:`dppca_dask.pca` runs it (the private mean and the explained variance
are events of the reservation).
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
    made from the width alone (a dry run before the job's ingest knows only the declared width): its entry's
    answer (:attr:`~dppca_dask.methods.Entry.rows_needed`)."""
    from dppca_dask.jobs.spec import _entry

    return _entry(mechanism).rows_needed(mechanism, parameters)


def planned_events(mechanism: str, *, n_rows: int | None, n_cols: int, epsilon: float, delta: float,
                   parameters: dict[str, Any]) -> JobPlan:
    """The relation and events of ``mechanism`` (a mechanism of a registered entry that plans its events) with
    ``parameters``, from its entry's planner (:attr:`~dppca_dask.methods.Entry.plan`); ``n_rows=None`` (not known
    yet) only where :func:`rows_needed` says it is not needed."""
    assert n_rows is not None or rows_needed(mechanism, parameters) is None, "the caller checks rows_needed"
    from dppca_dask.jobs.spec import _entry

    entry = _entry(mechanism)
    assert entry.plan is not None, f"the jobs of {mechanism!r} are planned by their own runner"
    release = {k: v for k, v in parameters.items() if k not in _EXECUTION}
    neighbouring, events, calibration = entry.plan(mechanism, n_rows=n_rows, n_cols=n_cols, epsilon=epsilon,
                                                   delta=delta, parameters=release)
    return JobPlan(neighbouring, tuple(events), dict(calibration))


def plan_job(spec: Any, store: Any) -> JobPlan:
    """:func:`planned_events` for a job spec and its opened store."""
    return planned_events(spec.mechanism, n_rows=int(store.n_rows), n_cols=int(store.n_cols), epsilon=spec.epsilon,
                          delta=spec.delta, parameters=dict(spec.parameters))
