"""The ``lowrank`` entry's mechanisms in the registry: validation and shape planning of :func:`dppca_dask.lowrank`.

:func:`dppca_dask.methods.hardt_roth.lowrank_plan.plan_lowrank` checks every parameter exactly as a run does and
plans from the store's public shape; these entries expose it per mechanism.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dppca_dask.methods._registry import Mechanism
from dppca_dask.methods.hardt_roth.relations import entry_relation, row_change_relation

__all__ = ["MECHANISMS"]


def _validator(name: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    def validate(params: Mapping[str, Any]) -> dict[str, Any]:
        from dppca_dask.methods.hardt_roth.lowrank_plan import validate_lowrank

        return validate_lowrank(mechanism=name, **dict(params))

    return validate


def _planner(name: str) -> Callable[..., Any]:
    def plan(params: Mapping[str, Any], *, n_rows: int, n_cols: int) -> Any:
        from dppca_dask.methods.hardt_roth.lowrank_plan import _PLAN_DEFAULTS, plan_lowrank

        given = {k: v for k, v in params.items() if k in _PLAN_DEFAULTS and k != "mechanism"}
        return plan_lowrank(n_rows, n_cols, rank=params["rank"], epsilon=params["epsilon"],
                            delta=params["delta"], mechanism=name, **given)

    return plan


_ROW = row_change_relation(1.0)

MECHANISMS = tuple(
    Mechanism(name=name, entry="lowrank", summary=summary, neighbouring=relation, private=True,
              validate=_validator(name), plan=_planner(name))
    for name, summary, relation in (
        ("private-low-rank", "rank-k factors by a noisy range finder (Hardt-Roth 2012)", _ROW),
        ("randomized-response", "rank-k factors of the densified matrix with Gaussian noise (Hardt-Roth 2012)", _ROW),
        ("private-power", "rank-k factors by private power iteration (Hardt-Roth 2013)", entry_relation(1.0)),
    )
)
