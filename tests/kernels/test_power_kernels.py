"""The one-pass power kernel against a direct dense computation of the filtered product A(t)x."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.kernels import (
    ThresholdGrid,
    filtered_sum,
    gram_matrix,
    gram_times,
    merge_power_partials,
    plain_gram_times,
    power_partial,
    select_filtered,
)
from dppca_dask.storage import row_norms_of


def _reference(blocks: list[np.ndarray], x: np.ndarray, bound: float, theta: float) -> tuple[np.ndarray, int]:
    """Dense two-pass reference: clip, score, keep rows with score <= theta, sum a'(a'^T x)."""
    total = np.zeros(x.shape[0])
    filtered = 0
    for a in blocks:
        norms = np.linalg.norm(a, axis=1)
        scale = np.minimum(1.0, bound / np.where(norms > 0, norms, np.inf))
        clipped = a * scale[:, None]
        scores = np.linalg.norm(clipped, axis=1) * np.abs(clipped @ x)
        keep = scores <= theta
        filtered += int((~keep).sum())
        total += clipped[keep].T @ (clipped[keep] @ x)
    return total, filtered


def _one_pass(blocks, x, bound, grid, top_m, index, fan_in=2):
    sparse = [sp.csr_array(b) for b in blocks]
    partials = [
        power_partial(b, row_norms_of(b), x, partition=i, row_norm_bound=bound, grid=grid, top_m=top_m)
        for i, b in enumerate(sparse)
    ]
    while len(partials) > 1:  # a tree reduction, as the coordinator does
        partials = [merge_power_partials(*partials[i : i + fan_in]) for i in range(0, len(partials), fan_in)]
    total = partials[0]
    filtered, incomplete = select_filtered(total, index)
    result = total.full_sum - filtered
    for p, cut in incomplete.items():
        b = sparse[p]
        result = result - filtered_sum(b, row_norms_of(b), x, row_norm_bound=bound, grid=grid, index=index,
                                       above=cut)
    count = int(np.cumsum(total.histogram)[index])
    return result, count, incomplete


@pytest.mark.parametrize("top_m", [0, 1, 5, 50, 10_000])
@pytest.mark.parametrize("bound", [0.5, 1.0, 3.0])
def test_one_pass_equals_two_pass(rng: np.random.Generator, top_m: int, bound: float) -> None:
    d = 30
    sizes = [40, 0, 1, 75, 20, 0, 33]  # includes empty partitions
    blocks = []
    for n in sizes:
        dense = rng.standard_normal((n, d)) * (rng.random((n, d)) < 0.3) * rng.uniform(0.1, 3, size=(n, 1))
        dense[: n // 5] = 0.0  # all-zero rows
        blocks.append(dense)
    grid = ThresholdGrid.for_bound(bound, per_octave=4, octaves=16)
    x = rng.standard_normal(d)
    x /= np.linalg.norm(x)
    for index in (0, 3, 10, 25, grid.n_points - 1):
        got, count, incomplete = _one_pass(blocks, x, bound, grid, top_m, index)
        want, filtered = _reference(blocks, x, bound, grid.thetas[index])
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
        assert count == filtered
        if top_m >= sum(sizes):
            assert incomplete == {}


def test_many_filtered_rows_need_the_second_pass(rng: np.random.Generator) -> None:
    # Every row aligned with x: all are filtered at small thresholds; top_m = 3 cannot hold them.
    d = 10
    x = np.zeros(d)
    x[0] = 1.0
    blocks = [np.outer(rng.uniform(0.5, 1.0, 50), x) + 0.01 * rng.standard_normal((50, d)) for _ in range(3)]
    grid = ThresholdGrid.for_bound(1.0, per_octave=2, octaves=10)
    index = grid.n_points - 1
    got, count, incomplete = _one_pass(blocks, x, 1.0, grid, 3, index)
    want, filtered = _reference(blocks, x, 1.0, grid.thetas[index])
    assert sorted(incomplete) == [0, 1, 2]
    assert count == filtered == 150
    np.testing.assert_allclose(got, want, atol=1e-10)


def test_grid_bins_match_definition(rng: np.random.Generator) -> None:
    grid = ThresholdGrid.for_bound(2.0, per_octave=3, octaves=5)
    assert grid.thetas[0] == 4.0
    np.testing.assert_allclose(grid.thetas[3], 2.0)
    scores = np.concatenate([grid.thetas, grid.thetas * (1 + 1e-12), grid.thetas * (1 - 1e-12),
                             rng.uniform(0, 4, 100), [0.0, 4.0]])
    bins = grid.bins(scores)
    for s, b in zip(scores, bins):
        filtered_at = np.flatnonzero(s > grid.thetas)
        assert b == (filtered_at[0] if filtered_at.size else grid.n_points)


def test_grid_rejects_bad_parameters() -> None:
    from dppca_dask.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="row_norm_bound must be finite and > 0"):
        ThresholdGrid.for_bound(0.0)
    with pytest.raises(InvalidParameterError, match="octaves must be >= 1"):
        ThresholdGrid.for_bound(1.0, octaves=0)
    with pytest.raises(InvalidParameterError, match="per_octave must be >= 1"):
        ThresholdGrid(top=1.0, per_octave=0)
    with pytest.raises(InvalidParameterError, match="n_points must be >= 1"):
        ThresholdGrid(top=1.0, n_points=0)
    with pytest.raises(InvalidParameterError, match="grid top must be finite"):
        ThresholdGrid(top=float("inf"))


@pytest.mark.parametrize("dense", [False, True])
def test_gram_kernels(rng: np.random.Generator, dense: bool) -> None:
    a = rng.standard_normal((60, 12)) * (rng.random((60, 12)) < 0.5) * 2
    block = a if dense else sp.csr_array(a)
    norms = np.linalg.norm(a, axis=1)
    scale = np.minimum(1.0, 1.5 / np.where(norms > 0, norms, np.inf))
    clipped = a * scale[:, None]
    x = rng.standard_normal(12)
    xb = rng.standard_normal((12, 3))
    np.testing.assert_allclose(gram_times(block, norms, x, row_norm_bound=1.5), clipped.T @ clipped @ x)
    np.testing.assert_allclose(gram_times(block, norms, xb, row_norm_bound=1.5), clipped.T @ clipped @ xb)
    np.testing.assert_allclose(gram_times(block, norms, x, row_norm_bound=np.inf), a.T @ a @ x)
    np.testing.assert_allclose(plain_gram_times(block, x), a.T @ a @ x)
    np.testing.assert_allclose(gram_matrix(block, norms, row_norm_bound=1.5), clipped.T @ clipped)


def test_no_row_is_ever_filtered_at_the_top_of_the_grid(rng: np.random.Generator) -> None:
    """Rows along x clipped to c have score c² exactly, but rounding computes up to a few ulps more (141 of these
    2,000 rows without the clamp); the clamp keeps bin 0 empty, so θ_0 = c² filters nothing on every dataset and a
    step whose SVT answers nothing (θ = c²) needs no second pass."""
    d, c = 7, 0.3
    x = rng.standard_normal(d)
    x /= np.linalg.norm(x)
    rows = np.array([s * x for s in rng.uniform(0.5, 3.0, 2_000)])
    norms = np.linalg.norm(rows, axis=1)
    grid = ThresholdGrid.for_bound(c)
    partial = power_partial(rows, norms, x, partition=0, row_norm_bound=c, grid=grid, top_m=5)
    assert partial.histogram[0] == 0 and partial.histogram[1] == 2_000
