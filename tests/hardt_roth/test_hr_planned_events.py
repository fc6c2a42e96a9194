"""Every Hardt–Roth plan states the exact DpEvents a complete run emits, and validates every parameter first."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest

from dppca_dask.api import lowrank, plan_lowrank
from dppca_dask.accounting import ENTRY_CHANGE, build_report
from dppca_dask.datasets import gaussian_factor_matrix, incoherent_psd
from dppca_dask.errors import InvalidInputError, InvalidParameterError


def _run(matrix: Any, seed: int, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        from dppca_dask.errors import NotPrivateWarning
        warnings.simplefilter("ignore", NotPrivateWarning)  # seeded (not private) and paper-calibration warnings
        warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
        return lowrank(matrix, seed=seed, **kwargs)


def _same_events(result: Any, plan: Any, epsilon: float, delta: float) -> None:
    planned = build_report(plan.events, target_epsilon=epsilon, target_delta=delta, neighbouring=plan.neighbouring)
    assert result.privacy.events == planned.events
    assert result.privacy.epsilon == pytest.approx(planned.epsilon, rel=1e-12)
    assert result.privacy.neighbouring == plan.neighbouring


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"projection": "tight"},
        pytest.param({"truncate": True, "oversampling": 3}, marks=pytest.mark.slow),
        {"calibration": "paper"},
        {"projection": "tight", "prune_alpha": 1e-9},  # every entry pruned: the projection event is still emitted
        {"mechanism": "randomized-response"},
        {"mechanism": "randomized-response", "calibration": "paper", "row_norm_bound": 2.0},
    ],
)
def test_row_mechanisms_emit_exactly_the_planned_events(options: dict[str, Any], seed: int) -> None:
    matrix = gaussian_factor_matrix(60, 40, 2, seed=3).matrix / 10.0
    plan = plan_lowrank(60, 40, rank=2, epsilon=1.0, delta=1e-6, **options)
    result = _run(matrix, seed, rank=2, epsilon=1.0, delta=1e-6, **options)
    _same_events(result, plan, 1.0, 1e-6)


@pytest.mark.parametrize(
    ("symmetric", "rank", "options"),
    [
        (True, 2, {}),  # deflation: one value per component
        pytest.param(True, 2, {"c_doubling": True}, marks=pytest.mark.slow),  # rungs skipped after success too
        (True, 1, {"coherence": 4.0, "c_doubling": True, "n_iter": 4}),
        pytest.param(True, 2, {"calibration": "paper", "n_iter": 5}, marks=pytest.mark.slow),
        (False, 1, {"n_iter": 5}),  # the embedding
        pytest.param(False, 1, {"c_doubling": True, "n_iter": 4}, marks=pytest.mark.slow),
    ],
)
def test_private_power_emits_exactly_the_planned_events(
    symmetric: bool, rank: int, options: dict[str, Any], seed: int
) -> None:
    if symmetric:
        matrix = incoherent_psd(80, [50.0, 20.0], seed=4).matrix
    else:
        matrix = gaussian_factor_matrix(50, 30, 1, seed=5).matrix
    n_rows, n_cols = matrix.shape
    plan = plan_lowrank(n_rows, n_cols, rank=rank, epsilon=1.0, delta=1e-6, mechanism="private-power",
                        symmetric=symmetric, **options)
    assert plan.neighbouring == ENTRY_CHANGE
    result = _run(matrix, seed, rank=rank, epsilon=1.0, delta=1e-6, mechanism="private-power",
                  symmetric=symmetric, **options)
    _same_events(result, plan, 1.0, 1e-6)


@pytest.mark.parametrize(
    ("mechanism", "kwargs"),
    [("private-low-rank", {}), ("randomized-response", {}), ("private-power", {"symmetric": True})],
)
def test_default_calibration_reports_its_target_within_one_percent(mechanism: str, kwargs: dict[str, Any]) -> None:
    plan = plan_lowrank(100, 100, rank=2, epsilon=1.0, delta=1e-6, mechanism=mechanism, **kwargs)
    report = build_report(plan.events, target_epsilon=1.0, target_delta=1e-6, neighbouring=plan.neighbouring)
    assert report.meets_target and 0.99 <= report.epsilon <= 1.0


class _Unreadable:
    """A data argument that fails the test if anything reads it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the data was touched ({name}) before the parameters were validated")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 1e308}, "epsilon must be <= 100"),
        ({"epsilon": math.inf}, "epsilon must be finite"),
        ({"delta": 1e-320}, r"delta must be in \[1e-30, 1\)"),
        ({"delta": "x"}, "delta must be a number"),
        ({"rank": 10**9}, "rank must be an integer <= 100000"),
        ({"oversampling": 10**9}, "oversampling must be an integer <= 100000"),
        ({"row_norm_bound": 1e300}, r"row_norm_bound must be in \[1e-100, 1e\+100\]"),
        ({"row_change_bound": 1e-300}, r"row_change_bound must be in \[1e-100, 1e\+100\]"),
        ({"mechanism": "private-power", "entry_bound": 1e300}, r"entry_bound must be in \[1e-100, 1e\+100\]"),
        ({"mechanism": "private-power", "n_iter": 10**6}, "n_iter must be an integer <= 1000"),
        ({"mechanism": "private-power", "coherence": 1e300}, r"coherence must be in \[1e-100, 1e\+100\]"),
        # the run itself refuses C < 1 (coherence is >= 1 for any matrix): the plan must refuse it first
        ({"mechanism": "private-power", "coherence": 0.5}, "coherence must be >= 1"),
        # a flag that is not a bool (bool("False") is True) must not silently switch the mechanism's path
        ({"mechanism": "private-power", "rank": 1, "symmetric": "False"}, "symmetric must be True or False"),
        ({"mechanism": "private-power", "rank": 1, "c_doubling": 1}, "c_doubling must be True or False"),
        ({"mechanism": "private-power", "rank": 1, "signed_values": "yes"}, "signed_values must be True or False"),
        ({"truncate": "no"}, "truncate must be True or False"),
    ],
)
def test_parameter_abuse_fails_before_anything_is_read(kwargs: dict[str, Any], match: str) -> None:
    arguments: dict[str, Any] = {"rank": 2, "epsilon": 1.0, "delta": 1e-6, **kwargs}
    with pytest.raises(InvalidParameterError, match=match):
        lowrank(_Unreadable(), **arguments)
    with pytest.raises(InvalidParameterError, match=match):
        plan_lowrank(100, 100, **arguments)


def test_plan_checks_the_public_shape_and_unknown_parameters() -> None:
    with pytest.raises(InvalidParameterError, match="rank \\+ oversampling = 4 must be <= min"):
        plan_lowrank(3, 100, rank=2, epsilon=1.0, delta=1e-6)
    with pytest.raises(InvalidParameterError, match="unknown lowrank parameters: n_components"):
        plan_lowrank(100, 100, rank=2, epsilon=1.0, delta=1e-6, n_components=2)
    with pytest.raises(InvalidInputError, match="square store"):
        plan_lowrank(100, 90, rank=1, epsilon=1.0, delta=1e-6, mechanism="private-power", symmetric=True)
    with pytest.raises(InvalidParameterError, match="n_rows must be an integer >= 1"):
        plan_lowrank(0, 90, rank=1, epsilon=1.0, delta=1e-6)
    assert isinstance(plan_lowrank(100, 90, rank=1, epsilon=1.0, delta=1e-6).events, tuple)
    assert np.isfinite(plan_lowrank(100, 90, rank=1, epsilon=100.0, delta=1e-30).calibration["range_rho"])


@pytest.mark.parametrize("options", [{"symmetric": True, "n_components": 2}, {"symmetric": True, "c_doubling": True},
                                     {"coherence": 60.0}])
def test_pca_private_power_plan_states_the_emitted_events(options: dict[str, Any], seed: int) -> None:
    from dppca_dask import pca
    from dppca_dask.api import plan_release

    matrix = incoherent_psd(60, [40.0, 15.0], seed=6).matrix
    plan = plan_release(60, mechanism="private-power", epsilon=1.0, delta=1e-6, n_iter=6, **options)
    with warnings.catch_warnings():
        from dppca_dask.errors import NotPrivateWarning
        warnings.simplefilter("ignore", NotPrivateWarning)
        warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
        result = pca(matrix, mechanism="private-power", epsilon=1.0, delta=1e-6, n_iter=6, seed=seed, **options)
    planned = build_report(plan.events, target_epsilon=1.0, target_delta=1e-6, neighbouring=plan.neighbouring)
    assert result.privacy.events == planned.events


def test_job_runner_reserves_the_planned_lowrank_events() -> None:
    from types import SimpleNamespace

    from dppca_dask.accounting import EpsilonDeltaDpEvent
    from dppca_dask.jobs.runner import _plan

    spec = SimpleNamespace(kind="lowrank", mechanism="private-low-rank", epsilon=0.3, delta=1e-7,
                           parameters={"rank": 2, "row_norm_bound": 2.0})
    store = SimpleNamespace(n_rows=400, n_cols=50)  # the store's public shape
    neighbouring, events = _plan(spec, store)  # type: ignore[arg-type]
    plan = plan_lowrank(400, 50, rank=2, epsilon=0.3, delta=1e-7, row_norm_bound=2.0)
    assert neighbouring == plan.neighbouring and events == plan.events
    assert not any(isinstance(e, EpsilonDeltaDpEvent) and e.epsilon > 0 for e in events)  # no worst-case event
    bad = SimpleNamespace(kind="lowrank", mechanism="private-low-rank", epsilon=0.3, delta=1e-7,
                          parameters={"rank": 60})
    with pytest.raises(InvalidParameterError, match="rank \\+ oversampling = 62"):
        _plan(bad, store)  # type: ignore[arg-type]
