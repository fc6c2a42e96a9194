"""Block and centred kernels against dense references: every field of a partial, sparse and dense blocks, merged
over partitions, with and without a centre."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.kernels import ThresholdGrid
from dppca_dask.kernels import block as B

GRID = ThresholdGrid.for_bound(2.0)  # centred rows have norm <= c + ‖μ‖ <= 2c


def _centred_clipped(rows: np.ndarray, mean: np.ndarray | None, bound: float) -> np.ndarray:
    """Rows clipped to the bound, then centred (scikit-learn's PCA given the clipped rows centres them so)."""
    norms = np.linalg.norm(rows, axis=1)
    clipped = rows * np.minimum(1.0, bound / np.maximum(norms, 1e-300))[:, None]
    return clipped if mean is None else clipped - mean[None, :]


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("centred", [False, True])
def test_block_partial_matches_the_dense_reference(rng: np.random.Generator, sparse: bool, centred: bool) -> None:
    n, d, k = 400, 25, 3
    rows = sp.random(n, d, density=0.2, random_state=rng, format="csr").toarray() * 1.5
    mean = _centred_clipped(rows, None, 1.0).mean(axis=0) if centred else None
    x, _ = np.linalg.qr(rng.standard_normal((d, k)))
    norms = np.linalg.norm(rows, axis=1)
    parts = [(rows[i:i + 100], norms[i:i + 100]) for i in range(0, n, 100)]
    partials = [B.block_partial(sp.csr_array(r) if sparse else r, nm, x, partition=p, row_norm_bound=1.0,
                                grid=GRID, top_m=40, mean=mean) for p, (r, nm) in enumerate(parts)]
    total = B.merge_block_partials(*partials)
    ref = _centred_clipped(rows, mean, 1.0)
    proj = ref @ x
    scores = np.linalg.norm(ref, axis=1) * np.linalg.norm(proj, axis=1)
    assert np.all(np.linalg.norm(ref, axis=1) <= 1.0 + np.linalg.norm(mean if centred else 0.0) + 1e-12)
    np.testing.assert_allclose(total.full_sum, ref.T @ proj, atol=1e-10)
    np.testing.assert_array_equal(total.histogram, np.bincount(GRID.bins(scores), minlength=GRID.n_bins))
    assert total.square_sum == pytest.approx(float(np.sum(ref * ref)), rel=1e-12)
    bins = GRID.bins(scores)
    for index in (int(np.min(bins)), int(np.median(bins))):
        filtered, incomplete = B.select_block_filtered(total, index, mean)
        missing = sum(B.block_filtered_sum(sp.csr_array(parts[p][0]) if sparse else parts[p][0], parts[p][1], x,
                                           row_norm_bound=1.0, grid=GRID, index=index, above=cut, mean=mean)
                      for p, cut in incomplete.items())
        keep = bins <= index
        np.testing.assert_allclose(filtered + missing, ref[keep].T @ proj[keep], atol=1e-10)


def test_mean_variance_and_centred_gram_kernels(rng: np.random.Generator) -> None:
    n, d = 300, 12
    rows = rng.standard_normal((n, d)) * 0.6 + 0.5
    norms = np.linalg.norm(rows, axis=1)
    clipped = rows * np.minimum(1.0, 1.0 / norms)[:, None]
    halves = [B.mean_partial(sp.csr_array(rows[:150]), norms[:150], row_norm_bound=1.0),
              B.mean_partial(rows[150:], norms[150:], row_norm_bound=1.0)]
    total = B.merge_mean_partials(*halves)
    np.testing.assert_allclose(total.total, clipped.sum(axis=0), atol=1e-10)
    assert total.count == n
    mean = clipped.mean(axis=0)
    ref = _centred_clipped(rows, mean, 1.0)
    v, _ = np.linalg.qr(rng.standard_normal((d, 2)))
    var = B.merge_variance_partials(
        B.variance_partial(sp.csr_array(rows[:100]), norms[:100], v.T, row_norm_bound=1.0, mean=mean),
        B.variance_partial(rows[100:], norms[100:], v.T, row_norm_bound=1.0, mean=mean))
    np.testing.assert_allclose(var.projected, np.sum((ref @ v) ** 2, axis=0), rtol=1e-10)
    assert var.total == pytest.approx(float(np.sum(ref * ref)), rel=1e-12) and var.count == n
    gram = (B.centred_gram_matrix(sp.csr_array(rows[:100]), norms[:100], row_norm_bound=1.0, mean=mean)
            + B.centred_gram_matrix(rows[100:], norms[100:], row_norm_bound=1.0, mean=mean))
    np.testing.assert_allclose(gram, ref.T @ ref, atol=1e-10)
    np.testing.assert_allclose(B.centred_gram_matrix(rows, norms, row_norm_bound=1.0), clipped.T @ clipped, atol=1e-10)
    np.testing.assert_allclose(B.centred_norms(rows, norms, None, 1.0), np.minimum(norms, 1.0), rtol=1e-15)
    np.testing.assert_allclose(B.centred_norms(sp.csr_array(rows), norms, mean, 1.0),
                               np.linalg.norm(ref, axis=1), atol=1e-12)
