"""Adaptive power iteration (seed 004) as a ``pca`` mechanism: its calibration, planned events and run."""

from __future__ import annotations

from typing import Any

from dppca_dask.methods._params import ADD_REMOVE_ROW, PCAParameters, pca_planner, pca_validator
from dppca_dask.methods._registry import Mechanism, MechanismPlan
from dppca_dask.methods.adaptive_plan import (  # noqa: F401  (re-exported: their public home before the split)
    AdaptiveConstants,
    _adaptive_events,
    _adaptive_resumed_keys,
    _plan_adaptive_power,
    adaptive_constants,
)

def _load_sequential_state(obj: Any) -> Any:
    from dppca_dask.algorithms.adaptive_power import AdaptivePowerState

    return AdaptivePowerState.from_json(dict(obj))


def _load_block_state(obj: Any) -> Any:
    from dppca_dask.algorithms.block_power import BlockPowerState

    return BlockPowerState.from_json(dict(obj))


MECHANISM = Mechanism(
    name="adaptive-power", entry="pca",
    summary="top components by noisy power iteration, rows of large norm filtered by sparse vector",
    neighbouring=ADD_REMOVE_ROW, private=True, validate=pca_validator("adaptive-power"),
    plan=pca_planner(_plan_adaptive_power), load_state=_load_sequential_state,
)


def _plan_block(params: PCAParameters, n_cols: int) -> MechanismPlan:
    from dppca_dask.algorithms.block_power import plan_block_power

    return plan_block_power(params, n_cols)


#: k components in one block of T releases (also what ``pca(center=...)`` and ``row_norm_bound="auto"`` run for
#: adaptive power); releases the explained variance from 5% of the budget.
BLOCK_MECHANISM = Mechanism(
    name="adaptive-power-block", entry="pca",
    summary="k components in one block of T noisy power steps (T releases, not k·T), with explained variance",
    neighbouring=ADD_REMOVE_ROW, private=True, validate=pca_validator("adaptive-power-block"),
    plan=pca_planner(_plan_block), load_state=_load_block_state,
)


def _plan_auto(params: PCAParameters, n_cols: int) -> MechanismPlan:
    from dppca_dask.algorithms.auto_choice import plan_auto

    return plan_auto(params, n_cols)


#: An accounted choice between block adaptive power and Analyze Gauss from a released pilot threshold.
AUTO_MECHANISM = Mechanism(
    name="auto", entry="pca",
    summary="adaptive-power-block or analyze-gauss, chosen from a private pilot run's released threshold (10% of "
            "the budget); adaptive power only above max_dense_dim",
    neighbouring=ADD_REMOVE_ROW, private=True, validate=pca_validator("auto"),
    plan=pca_planner(_plan_auto),
)
