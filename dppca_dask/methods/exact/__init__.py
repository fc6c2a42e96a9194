"""The exact, non-private reference (``mechanism='exact'``) of :func:`dppca_dask.pca`: a baseline, never a release.

No paper: the top right singular vectors of the clipped matrix, against which the private mechanisms are measured
(the error metrics of ``specs/seed004.md`` in the shared specs folder, §5).

Mechanism (registered by :mod:`dppca_dask.methods`): ``exact`` (:data:`MECHANISM`), labelled not private.

Modules, in reading order: this module (the mechanism and its plan), then
:mod:`~dppca_dask.methods.exact.algorithm` (the run: the dense Gram matrix, or subspace iteration above
``max_dense_dim``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dppca_dask.methods._params import PCAParameters, pca_planner, pca_validator
from dppca_dask.methods._registry import Mechanism, MechanismPlan
from dppca_dask.methods.exact.algorithm import exact_run

__all__ = ["MECHANISM"]


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
