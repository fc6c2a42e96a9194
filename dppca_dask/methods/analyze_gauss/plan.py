"""Analyze Gauss's plan: one Gaussian release of the Gram matrix calibrated to the user's (ε, δ), its planned event
and its replace-one event."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from dppca_dask.methods._params import ADD_REMOVE_ROW, PCAParameters
from dppca_dask.methods._registry import MechanismPlan
from dppca_dask.methods.analyze_gauss.algorithm import analyze_gauss_run, check_dense_dim

__all__ = ["plan_analyze_gauss"]


def plan_analyze_gauss(params: PCAParameters, n_cols: int) -> MechanismPlan:
    from dppca_dask import accounting

    check_dense_dim(n_cols, params.max_dense_dim, "analyze-gauss")
    multiplier = accounting.calibrate_gaussian(epsilon=params.epsilon, delta=params.delta)

    def make_run(noise: Any, on_release: Callable[..., None] | None, resume: Any) -> Any:
        return analyze_gauss_run(
            n_cols=n_cols,
            n_components=params.n_components,
            row_norm_bound=params.row_norm_bound,
            noise_multiplier=multiplier,
            noise=noise,
            max_dense_dim=params.max_dense_dim,
        )

    from dp_accounting import GaussianDpEvent

    def replace_one(events: tuple[Any, ...]) -> list[Any]:
        # replacing row a by b moves the upper triangle by that of aaᵀ − bbᵀ, whose squared norm is
        # (‖aaᵀ − bbᵀ‖_F² + Σ(a_i² − b_i²)²)/2 ≤ (2c⁴ + 2c⁴)/2: sensitivity √2·c², not 2·c²
        return [GaussianDpEvent(multiplier / math.sqrt(2.0))]

    return MechanismPlan(make_run, ADD_REMOVE_ROW, {"noise_multiplier": multiplier}, None, 1,
                         planned_events=(GaussianDpEvent(multiplier),),
                         replace_one=(replace_one, "replace one row: the Gram matrix's upper triangle moves by at "
                                      "most sqrt(2)·c² (noise multiplier divided by sqrt(2))"))
