"""Adaptive power iteration: the seed-004 mechanism family of :func:`dppca_dask.pca`.

Paper: Nguyen, Ene & Nguyen, "Adaptive Power Iteration Method for Differentially Private PCA" (arXiv 2602.11454);
implementation spec ``specs/seed004.md`` (the shared specs folder), with its corrections (§3: accounting, second pass,
monotone AboveThreshold) and the block, centred and automatic variants built on it.

Mechanisms (registered by :mod:`dppca_dask.methods`):

- ``adaptive-power`` (:data:`MECHANISM`): k components by k sequential runs of T noisy power steps, each an
  AboveThreshold step choosing a filter threshold θ and a Gaussian release of the filtered product;
- ``adaptive-power-block`` (:data:`BLOCK_MECHANISM`): k components in one block of T releases, optionally centred,
  with a private row-norm bound and the explained variance;
- ``auto`` (:data:`AUTO_MECHANISM`): block adaptive power or centred Analyze Gauss, chosen from a pilot run's
  released threshold.

Modules, in reading order (a newcomer reads them in this order to understand the family end to end):

1. this module: the mechanisms and what each plans;
2. :mod:`~dppca_dask.methods.adaptive_power.sequential`: Algorithm 1 as a generator of requests (the AboveThreshold
   step, the filtered product, the Gaussian release, the rare second pass), its state and output;
3. :mod:`~dppca_dask.methods.adaptive_power.calibration`: the per-step AboveThreshold ε and the Gaussian noise
   multiplier that make T·k iterations meet the user's (ε, δ) under the PLD accountant;
4. :mod:`~dppca_dask.methods.adaptive_power.paper`: the paper's own Lemma 3.1 arithmetic (``calibration="paper"``
   and the figure reported beside the accountant's);
5. :mod:`~dppca_dask.methods.adaptive_power.plan`: the sequential plan (constants, planned events, replace-one
   events, resumption keys);
6. :mod:`~dppca_dask.methods.adaptive_power.requests`: what the block run asks of the data, and the per-partition
   kernels registered for it;
7. :mod:`~dppca_dask.methods.adaptive_power.block`: the block run's loop, its resumable state and its output;
8. :mod:`~dppca_dask.methods.adaptive_power.row_norm_bound`: the private row-norm quantile (``row_norm_bound="auto"``)
   and the clipped fraction of a public bound;
9. :mod:`~dppca_dask.methods.adaptive_power.centring`: the centre (none, given, private mean), the analyst's
   centring options, and the split of the budget between the releases beside a plan's main one;
10. :mod:`~dppca_dask.methods.adaptive_power.explained_variance`: the explained variance's release and the order of
    the components;
11. :mod:`~dppca_dask.methods.adaptive_power.joint_scale`: one common noise scale so that all releases of a plan
    spend exactly its budget;
12. :mod:`~dppca_dask.methods.adaptive_power.block_plan`: the block run's plan from public parameters;
13. :mod:`~dppca_dask.methods.adaptive_power.auto`: the accounted choice between block power and centred Analyze
    Gauss (:mod:`dppca_dask.methods.analyze_gauss.centred`);
14. :mod:`~dppca_dask.methods.adaptive_power.centring_plan`: which plan a ``pca`` run with centring or an automatic
    bound gets.
"""

from __future__ import annotations

from typing import Any

from dppca_dask.methods._params import ADD_REMOVE_ROW, PCAParameters, pca_planner, pca_validator
from dppca_dask.methods._registry import Mechanism, MechanismPlan
from dppca_dask.methods.adaptive_power.plan import _plan_adaptive_power

__all__ = ["AUTO_MECHANISM", "BLOCK_MECHANISM", "MECHANISM"]


def _load_sequential_state(obj: Any) -> Any:
    from dppca_dask.methods.adaptive_power.sequential import AdaptivePowerState

    return AdaptivePowerState.from_json(dict(obj))


def _load_block_state(obj: Any) -> Any:
    from dppca_dask.methods.adaptive_power.block import BlockPowerState

    return BlockPowerState.from_json(dict(obj))


MECHANISM = Mechanism(
    name="adaptive-power", entry="pca",
    summary="top components by noisy power iteration, rows of large norm filtered by sparse vector",
    neighbouring=ADD_REMOVE_ROW, private=True, validate=pca_validator("adaptive-power"),
    plan=pca_planner(_plan_adaptive_power), load_state=_load_sequential_state,
)


def _plan_block(params: PCAParameters, n_cols: int) -> MechanismPlan:
    from dppca_dask.methods.adaptive_power.block_plan import plan_block_power

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
    from dppca_dask.methods.adaptive_power.auto import plan_auto

    return plan_auto(params, n_cols)


#: An accounted choice between block adaptive power and Analyze Gauss from a released pilot threshold.
AUTO_MECHANISM = Mechanism(
    name="auto", entry="pca",
    summary="adaptive-power-block or analyze-gauss, chosen from a private pilot run's released threshold (10% of "
            "the budget); adaptive power only above max_dense_dim",
    neighbouring=ADD_REMOVE_ROW, private=True, validate=pca_validator("auto"),
    plan=pca_planner(_plan_auto),
)
