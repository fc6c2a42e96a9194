"""``mechanism="auto"`` with centring and ``row_norm_bound="auto"``: the ledger's reservation is what either branch
spends (privacy invariants 1 and 6).

``plan_release(mechanism="auto", center=..., row_norm_bound="auto")`` reserves the bound's quantile, the mean, the
pilot's iterations and one ``(ε_main, δ_main)`` event for the chosen release. Checked here: (1) a run emits exactly
those events whichever branch its pilot chooses, with the report within the target; (2) each branch, calibrated
from the same public parameters as the run calibrates it, composes (PLD, at δ_main) to at most ε_main, so the one
event reserved for the chosen release covers what either branch releases, for every centring option. The data are
those of ``test_auto.py``'s branch test (low and high coherence); deterministic for a given seed (seeded noise).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from dppca_dask import pca
from dppca_dask.accounting import epsilon_for, event_to_json, summarise_events
from dppca_dask.methods.adaptive_power.block_plan import plan_block_power
from dppca_dask.methods.analyze_gauss.centred import plan_centred_gauss
from dppca_dask.api import plan_release
from dppca_dask.datasets import PlantedSpec, low_coherence_matrix
from dppca_dask.mechanisms.testing import AuditingNoiseSource
from dppca_dask.methods._params import PCA_DEFAULTS, validate_parameters

D = 80
PARAMS: dict[str, Any] = {"epsilon": 1.0, "delta": 1e-6, "n_iter": 3, "mechanism": "auto", "center": True,
                          "row_norm_bound": "auto"}


def test_a_centred_auto_bound_run_emits_the_reserved_events_in_both_branches(seed: int) -> None:
    plan = plan_release(D, **PARAMS)
    chosen = set()
    for share in (0.015, 0.6):
        spec = PlantedSpec(n_rows=20_000, n_cols=D, nnz_per_row=15, support=20, signal_share=share, seed=seed % 1000)
        result = pca(low_coherence_matrix(spec), client="local", noise=AuditingNoiseSource(seed), progress=False,
                     **PARAMS)
        chosen.add(result.mechanism)
        assert result.privacy.events == tuple(event_to_json(e) for e in summarise_events(plan.events))
        assert result.privacy.epsilon <= PARAMS["epsilon"]
        assert result.extras["row_norm_bound"] > 0 and result.mean is not None  # both released, as planned
    assert chosen == {"adaptive-power-block", "analyze-gauss"}  # both branches ran


@pytest.mark.parametrize("center", [None, "private", "given"])
@pytest.mark.parametrize("auto_bound", [False, True])
def test_each_branch_fits_in_the_event_reserved_for_the_chosen_release(center: str | None, auto_bound: bool) -> None:
    given = {"given": np.full(D, 0.05), "private": "private", None: "none"}[center]
    bound = "auto" if auto_bound else 1.0
    plan = plan_release(D, epsilon=1.0, delta=1e-6, mechanism="auto", n_iter=3, n_components=2, center=given,
                        row_norm_bound=bound)
    main = plan.calibration["auto"]["main"]
    reserved = plan.events[-1]
    assert (reserved.epsilon, reserved.delta) == (main["epsilon"], main["delta"])
    # the chosen release's parameters as the run builds them: the user's, with the rest of the budget, a numeric
    # bound (the released one) and a public centre (the released mean, or the given one)
    params = validate_parameters(mechanism="auto", epsilon=1.0, delta=1e-6,
                                 **{**PCA_DEFAULTS, "n_iter": 3, "n_components": 2})
    branch = dataclasses.replace(params, mechanism="adaptive-power-block", epsilon=main["epsilon"],
                                 delta=main["delta"])
    centre = None if center is None else np.full(D, 0.05)
    for branch_plan in (plan_block_power(branch, D, center=centre), plan_centred_gauss(branch, D, center=centre)):
        events = list(branch_plan.planned_events)
        assert epsilon_for(events, delta=main["delta"]) <= main["epsilon"] * (1 + 1e-9)
    # and the whole reservation within the user's target
    assert epsilon_for(list(plan.events), delta=1e-6) <= 1.0 * (1 + 1e-9)
