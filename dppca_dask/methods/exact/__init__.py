"""The exact, non-private reference (``mechanism='exact'``): a baseline, never a release."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dppca_dask.algorithms.exact import exact_run
from dppca_dask.methods._params import PCAParameters, pca_planner, pca_validator
from dppca_dask.methods._registry import Mechanism, MechanismPlan

def _plan_exact(params: PCAParameters, n_cols: int) -> MechanismPlan:
    def make_exact(noise: Any, on_release: Callable[..., None] | None, resume: Any) -> Any:
        return exact_run(
            n_cols=n_cols,
            n_components=params.n_components,
            row_norm_bound=params.row_norm_bound,
            max_dense_dim=params.max_dense_dim,
        )

    return MechanismPlan(make_exact, "none (not private)", {}, None, 1, private=False)


MECHANISM = Mechanism(
    name="exact", entry="pca", summary="exact top components, NOT private (a baseline)",
    neighbouring="none (not private)", private=False, validate=pca_validator("exact"), plan=pca_planner(_plan_exact),
)
