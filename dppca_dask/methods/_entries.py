"""The ``pca``, ``lowrank`` and ``window`` entry kinds: what a job naming one of their mechanisms runs
(:func:`dppca_dask.pca`, :func:`dppca_dask.lowrank`, :func:`dppca_dask.window`), checks, plans and loads (see
:class:`~dppca_dask.methods.Entry`; registered in :mod:`dppca_dask.methods`).

A mechanism of both entries (``private-power``) runs through ``pca``, which hands a job that sets ``rank`` to
``lowrank``: its plan is then the low-rank one. A ``sliding-window`` job has its own runner and dry run
(:mod:`dppca_dask.methods.window.job`): its budget is the partitions it reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dppca_dask.errors import JobSpecError
from dppca_dask.methods._params import DEFAULT_N_ITER
from dppca_dask.methods._registry import Entry, get_mechanism, resolve

__all__ = ["CENTER_VALUES", "LOWRANK_ENTRY", "PCA_ENTRY", "WINDOW_ENTRY"]

#: ``[mechanism] center`` of a pca job: the values ``dppca-dask pca --center`` takes.
CENTER_VALUES = ("none", "private")


def _check_center(source: str, mechanism: str, mech: dict[str, Any]) -> None:
    """``center`` of a pca job: ``"none"`` or ``"private"``; by default what ``dppca-dask pca`` does (private for
    the mechanisms that centre), written into the parameters so that the plan, the run and ``job.json`` agree."""
    from dppca_dask.methods.adaptive_power.centring import CENTRING_MECHANISMS
    from dppca_dask.jobs.spec import _where

    if "center" not in mech:
        mech["center"] = "private" if mechanism in CENTRING_MECHANISMS else "none"
        return
    value = mech["center"]
    if isinstance(value, bool):  # as the Python API reads it
        value = "private" if value else "none"
    if value not in CENTER_VALUES:
        raise JobSpecError(f"{_where(source, 'mechanism', 'center')} must be \"none\" or \"private\"; got {value!r} "
                           "(a public mean vector is for the Python API)")
    if value == "private" and mechanism not in CENTRING_MECHANISMS:
        raise JobSpecError(f"{_where(source, 'mechanism', 'center')} = \"private\" applies to "
                           f"{', '.join(CENTRING_MECHANISMS)}; got mechanism {mechanism!r}: drop it, or set \"none\"")
    mech["center"] = value


def _check_pca(source: str, mechanism: str, mech: dict[str, Any], *, ingest: Any, n_features: Any) -> None:
    """A pca job's ``center`` (:func:`_check_center`), unless it sets ``rank`` (a low-rank release)."""
    if "rank" not in mech:
        _check_center(source, mechanism, mech)


def _check_lowrank(source: str, mechanism: str, mech: dict[str, Any], *, ingest: Any, n_features: Any) -> None:
    """A lowrank job names its ``rank``."""
    from dppca_dask.jobs.spec import _where

    if "rank" not in mech:
        raise JobSpecError(f"{_where(source, 'mechanism', 'rank')} is required for {mechanism!r}")


def _rows_needed(mechanism: str, parameters: Mapping[str, Any]) -> str | None:
    """Why the plan needs the store's number of rows (a low-rank release, private power's C-doubling on the
    embedding), or None."""
    if "rank" in parameters or get_mechanism(mechanism).entry == "lowrank":
        return "a low-rank release is planned and checked against the store's number of rows"
    if mechanism == "private-power" and parameters.get("c_doubling") and not parameters.get("symmetric"):
        return "private power's C-doubling on the embedding plans its ladder from the store's number of rows"
    return None


def _plan_lowrank(mechanism: str, *, n_rows: int | None, n_cols: int, epsilon: float, delta: float,
                  parameters: dict[str, Any]) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    """The low-rank release's relation and events, from its registry entry's planner."""
    assert n_rows is not None  # rows_needed says a low-rank plan needs it
    plan = get_mechanism(mechanism, "lowrank").plan(
        {**parameters, "epsilon": epsilon, "delta": delta}, n_rows=n_rows, n_cols=n_cols
    )
    return plan.neighbouring, tuple(plan.events), {}


def _plan_pca(mechanism: str, *, n_rows: int | None, n_cols: int, epsilon: float, delta: float,
              parameters: dict[str, Any]) -> tuple[str, tuple[Any, ...], dict[str, Any]]:
    """As :func:`dppca_dask.pca` plans the release (``center`` included: the private mean and the explained
    variance are events of the reservation); with ``rank``, the low-rank release it hands the job to."""
    if "rank" in parameters or get_mechanism(mechanism).entry == "lowrank":
        return _plan_lowrank(mechanism, n_rows=n_rows, n_cols=n_cols, epsilon=epsilon, delta=delta,
                             parameters=parameters)
    plan_release = resolve("dppca_dask.api.plan_release")

    # the mechanism's own planner states the events exactly from the declared shape (n_rows included)
    release_plan = plan_release(n_cols, n_rows=n_rows, mechanism=mechanism, epsilon=epsilon, delta=delta,
                                **parameters)
    return release_plan.neighbouring, tuple(release_plan.events), dict(release_plan.calibration)


def _state_loader(mechanism: str, params: Mapping[str, Any]) -> Any:
    """How the job's run reads its checkpoint back, or None for a run that does not resume: the mechanism's own
    reader, except that a centred adaptive power run (or one with ``row_norm_bound="auto"``) is a block run and
    checkpoints block states."""
    name = mechanism
    if name == "adaptive-power" and (params.get("center", "none") not in ("none", False, None)
                                     or params.get("row_norm_bound") == "auto"):
        name = "adaptive-power-block"
    return get_mechanism(name, "pca").load_state


PCA_ENTRY = Entry(
    name="pca", function="dppca_dask.pca", load_result="dppca_dask.load_result", plan=_plan_pca,
    run_arguments=frozenset({"mechanism", "on_release", "resume", "progress"}), check_spec=_check_pca,
    rows_needed=_rows_needed, load_state=_state_loader, default_n_iter=DEFAULT_N_ITER,
)
LOWRANK_ENTRY = Entry(
    name="lowrank", function="dppca_dask.lowrank", load_result="dppca_dask.load_lowrank", plan=_plan_lowrank,
    check_spec=_check_lowrank, rows_needed=_rows_needed,
)
#: A ``sliding-window`` job appends its day, releases the window through :func:`dppca_dask.window` and is charged
#: to the partitions it read, by its own runner and dry run.
WINDOW_ENTRY = Entry(
    name="window", function="dppca_dask.window", load_result="dppca_dask.methods.window.release.load_release",
    job_mechanisms=("sliding-window",), reserved=frozenset({"store", "ledger", "dataset", "job_id", "persist"}),
    appends=True, run_job="dppca_dask.methods.window.job.run_window_job",
    dry_run="dppca_dask.methods.window.job.dry_run_window_job",
)
