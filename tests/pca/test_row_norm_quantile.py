"""``row_norm_bound="auto"``: the private quantile of row norms on a public log grid — its accuracy, its event
inside the run's events, and its errors."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.accounting.events import EpsilonDeltaDpEvent
from dppca_dask.methods.adaptive_power.block_plan import BLOCK_POWER, plan_block_power
from dppca_dask.api import validate_parameters
from dppca_dask.coordinator import LocalExecutor, as_source, run_algorithm
from dppca_dask.errors import InvalidParameterError
from dppca_dask.kernels.block import merge_norm_counts, norm_counts
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.quantile import NormGrid, private_quantile, quantile_error_bound
from dppca_dask.mechanisms.testing import ZeroNoiseSource

BETA = 1e-6  # α: the accuracy assertion fails only if some Laplace draw exceeds its ln(J/β) tail


def _seeded(seed: int) -> NoiseSource:
    return NoiseSource(np.random.default_rng(seed), private=False, description="test")


def test_norm_counts_kernel_and_merge(rng: np.random.Generator) -> None:
    grid = NormGrid()
    norms = np.exp(rng.normal(0.0, 2.0, 1_000))
    merged = merge_norm_counts(norm_counts(norms[:300], grid.values), norm_counts(norms[300:], grid.values))
    expected = np.array([np.sum(norms <= c) for c in grid.values])
    np.testing.assert_array_equal(merged.counts, expected)
    assert merged.count == 1_000


@pytest.mark.parametrize("quantile", [0.5, 0.9])
def test_quantile_is_accurate_within_the_stated_bound(seed: int, quantile: float) -> None:
    rng = np.random.default_rng(seed)
    n = 20_000
    norms = np.exp(rng.normal(0.5, 0.7, n))
    grid = NormGrid()
    counts = norm_counts(norms, grid.values).counts
    for r in range(20):
        bound, event = private_quantile(counts, n, grid=grid, quantile=quantile, epsilon=0.05,
                                        noise=_seeded(seed + r))
        assert event == EpsilonDeltaDpEvent(0.05, 0.0)
        best = np.min(np.abs(counts - quantile * n))
        j = int(np.flatnonzero(grid.values == bound)[0])
        slack = quantile_error_bound(quantile=quantile, epsilon=0.05, n_points=grid.n_points, beta=BETA)
        assert abs(counts[j] - quantile * n) <= best + slack
        assert abs(np.mean(norms <= bound) - quantile) < 0.05  # the clipped share is about 1 − q


def test_noise_off_picks_the_nearest_candidate() -> None:
    grid = NormGrid(low=1.0, per_octave=1, n_points=6)  # 1, 2, 4, 8, 16, 32
    norms = np.array([0.5] * 10 + [3.0] * 80 + [7.0] * 10)
    counts = norm_counts(norms, grid.values).counts
    bound, _ = private_quantile(counts, 100, grid=grid, quantile=0.9, epsilon=1.0, noise=ZeroNoiseSource())
    assert bound == 4.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"quantile": 0.905}, r"quantile must be a whole percent in \[0.01, 0.99\]; got 0.905; e.g. 0.9"),
    ({"quantile": 1.0}, "quantile must be a whole percent"),
    ({"epsilon": 0.0}, "epsilon must be finite and > 0"),
])
def test_quantile_refuses_bad_parameters(kwargs: dict, message: str) -> None:
    grid = NormGrid()
    params = {"quantile": 0.9, "epsilon": 1.0, **kwargs}
    noise = ZeroNoiseSource()
    with pytest.raises(InvalidParameterError, match=message):
        private_quantile(np.zeros(grid.n_points, dtype=np.int64), 10, grid=grid, noise=noise, **params)
    assert noise.released_keys == frozenset()


def test_quantile_refuses_counts_of_the_wrong_length_and_bad_grids() -> None:
    with pytest.raises(InvalidParameterError, match=r"counts must have one entry per candidate \(121\); got \(3,\)"):
        private_quantile(np.zeros(3), 10, grid=NormGrid(), quantile=0.9, epsilon=1.0, noise=ZeroNoiseSource())
    with pytest.raises(InvalidParameterError, match="a norm grid needs per_octave >= 1 and n_points >= 2"):
        NormGrid(n_points=1)


def test_auto_bound_in_a_block_run_emits_the_quantile_event_first(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = sp.csr_array(rng.standard_normal((3_000, 20)) * 3.0)
    params = validate_parameters(mechanism=BLOCK_POWER, epsilon=1.0, delta=1e-6, n_components=2, n_iter=2,
                                 row_norm_bound=1.0, svt_share=0.1, beta=0.05, grid_per_octave=4, grid_octaves=24,
                                 calibration="standard", max_dense_dim=100)
    plan = plan_block_power(params, 20, center="private", auto_bound=True)
    out = run_algorithm(LocalExecutor(as_source(rows)), plan.make_run(_seeded(seed), None, None))
    # 5% of epsilon, divided by the common noise scale that makes the run spend its whole budget
    scale = plan.calibration["noise_scale"]
    assert 0.5 < scale < 1.0
    assert out.events[0] == EpsilonDeltaDpEvent(0.05 / scale, 0.0) == plan.planned_events[0]
    norms = np.linalg.norm(rows.toarray(), axis=1)
    assert 0.8 < np.mean(norms <= out.row_norm_bound) < 0.97
    assert plan.calibration["shares"]["row_norm_quantile_epsilon"] == 0.05
    replaced = plan.replace_one[0](out.events)
    assert replaced[0] == EpsilonDeltaDpEvent(0.05 / scale * 100 / 90, 0.0)
