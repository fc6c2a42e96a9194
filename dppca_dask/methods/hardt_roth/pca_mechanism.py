"""``pca(mechanism="private-power")``: the planner that turns :class:`~dppca_dask.api.PCAParameters` into a run.

Private power iteration (Hardt & Roth 2013; :mod:`dppca_dask.methods.hardt_roth.power_iteration`) is private for
one entry of the store changing by at most ``entry_bound``, not for a row: :func:`~dppca_dask.pca` reports that
relation. ``row_norm_bound`` plays no part (entries are not clipped; the relation itself bounds the change).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods._params import PCAParameters, pca_planner, pca_validator
from dppca_dask.methods._registry import Mechanism, MechanismPlan
from dppca_dask.methods.hardt_roth.power_iteration import (
    DEFAULT_PRIVATE_POWER_N_ITER,
    planned_private_power,
    private_power_run,
)
from dppca_dask.methods.hardt_roth.relations import entry_relation

__all__ = ["MECHANISM", "PRIVATE_POWER", "plan_private_power"]

PRIVATE_POWER = "private-power"


def plan_private_power(params: Any, n_cols: int) -> Any:
    """``planner(params, n_cols) -> MechanismPlan`` (the registry wraps it in :func:`plan`).

    The noise is calibrated inside the run, once the first pass has told the public dimension N (the number of
    rows, hence the embedding's size and the C-doubling ladder's length); nothing is released before that.
    """
    from dppca_dask.methods.hardt_roth.power_calibration import calibrate_private_power

    if not params.symmetric and params.n_components > 1:
        raise InvalidParameterError(
            f"mechanism='private-power' with n_components={params.n_components} needs symmetric=True (a symmetric "
            "PSD store, e.g. A^T A); on an asymmetric store it runs on the embedding [[0, A], [A^T, 0]] and gives "
            "rank 1 only; use mechanism='private-low-rank' through dppca_dask.lowrank for higher rank"
        )
    # What can be fixed now: without C-doubling the multiplier does not depend on N.
    calibration: dict[str, Any] = {
        "calibration": params.calibration,
        "coherence": params.coherence,
        "c_doubling": params.c_doubling,
        "entry_bound": params.entry_bound,
        "symmetric": params.symmetric,
        "n_iter": params.n_iter,
    }
    paper_figure = None
    planned_events = None
    cal = None
    if not params.c_doubling:
        cal = calibrate_private_power(
            epsilon=params.epsilon, delta=params.delta, n_iter=params.n_iter, n_components=params.n_components,
            n_values=params.n_components - 1, embedding=not params.symmetric, calibration=params.calibration,
        )
        calibration.update(noise_multiplier=cal.noise_multiplier, sigma=cal.sigma, gdp_mu=cal.gdp_mu,
                           value_epsilon=cal.value_epsilon)
        if params.calibration == "paper":  # the paper's own statement about the paper's noise
            paper_figure = cal.paper_figure()
    elif params.symmetric:  # the ladder's length depends on N = n_cols only
        cal = planned_private_power(
            n_rows=n_cols, n_cols=n_cols, epsilon=params.epsilon, delta=params.delta, n_iter=params.n_iter,
            n_components=params.n_components, symmetric=True, coherence=params.coherence, c_doubling=True,
            calibration=params.calibration,
        )
    if cal is not None:
        # Exactly the events a complete run emits (every rung, every value), under either calibration; with
        # C-doubling on the embedding the ladder depends on n_rows, which the planner is not given.
        planned_events = tuple(cal.events())

    def make_run(noise: Any, on_release: Callable[..., None] | None, resume: Any) -> Any:
        if resume is not None:
            raise InvalidParameterError("mechanism='private-power' cannot resume an interrupted run; start it again")
        return private_power_run(
            n_cols=n_cols,
            epsilon=params.epsilon,
            delta=params.delta,
            n_iter=params.n_iter,
            n_components=params.n_components,
            symmetric=params.symmetric,
            coherence=params.coherence,
            c_doubling=params.c_doubling,
            entry_bound=params.entry_bound,
            calibration=params.calibration,
            noise=noise,
            on_release=on_release,
        )

    return MechanismPlan(
        make_run,
        entry_relation(params.entry_bound),
        calibration,
        paper_figure,
        params.n_iter * params.n_components,
        planned_events=planned_events,
    )


def plan(params: PCAParameters, *, n_rows: int | None = None, n_cols: int) -> MechanismPlan:
    """``Mechanism.plan``: :func:`plan_private_power`, and with C-doubling on the embedding ``[[0, A], [Aᵀ, 0]]``
    (whose ladder depends on ``n_rows``) the exact events when ``n_rows`` is known (a job's declared shape)."""
    planned = pca_planner(plan_private_power)(params, n_rows=n_rows, n_cols=n_cols)
    if params.c_doubling and not params.symmetric and n_rows is not None:
        cal = planned_private_power(
            n_rows=n_rows, n_cols=n_cols, epsilon=params.epsilon, delta=params.delta, n_iter=params.n_iter,
            n_components=params.n_components, symmetric=False, coherence=params.coherence, c_doubling=True,
            calibration=params.calibration,
        )
        planned.planned_events = tuple(cal.events())
    return planned


MECHANISM = Mechanism(
    name=PRIVATE_POWER, entry="pca",
    summary="top eigenvectors by private power iteration (Hardt-Roth 2013; one entry changing, not a row)",
    neighbouring=entry_relation(1.0), private=True, validate=pca_validator(PRIVATE_POWER), plan=plan,
    default_n_iter=DEFAULT_PRIVATE_POWER_N_ITER,
)
