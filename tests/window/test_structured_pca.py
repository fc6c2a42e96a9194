"""Non-negative PCA recovers planted non-negative components with disjoint supports (issue 33, item 5)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods.window.tasks import nonnegative_pca, sparse_pca


def _planted(seed: int = 0, d: int = 100, sizes: tuple[int, ...] = (10, 15, 20),
             variances: tuple[float, ...] = (3.0, 2.0, 1.0), n: int = 5000) -> tuple[np.ndarray, np.ndarray]:
    """The Gram of n rows ``z·U + 0.05·noise``: three non-negative unit components of disjoint supports, and small
    isotropic noise that leaves tiny positive entries off every support (the case that used to lose components)."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(d)
    u = np.zeros((len(sizes), d))
    start = 0
    for k, size in enumerate(sizes):
        u[k, perm[start:start + size]] = rng.uniform(0.5, 1.5, size)
        u[k] /= np.linalg.norm(u[k])
        start += size
    x = rng.standard_normal((n, len(sizes))) * np.sqrt(variances) @ u + 0.05 * rng.standard_normal((n, d))
    return x.T @ x, u


def _overlaps(found: np.ndarray, truth: np.ndarray) -> np.ndarray:
    """|⟨c, u⟩| of each planted component with its match among the found ones (one to one)."""
    m = np.abs(found @ truth.T)
    rows, cols = linear_sum_assignment(-m)
    return m[rows, cols]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nonnegative_pca_recovers_planted_components_without_noise(seed):
    gram, truth = _planted(seed)
    found = nonnegative_pca(gram, 3)
    assert (found >= 0).all() and np.allclose(found @ found.T, np.eye(3), atol=1e-12)
    assert (_overlaps(found, truth) > 0.999).all()
    for row in found:  # each support is one planted support exactly
        assert any(np.array_equal(row > 0, t > 0) for t in truth)


def test_nonnegative_pca_degrades_gracefully_with_noise():
    """Symmetric Gaussian noise on the Gram (as a Gaussian window release adds): the components stay found while
    the noise's spectral scale is well below the smallest planted eigenvalue (about 5,000), and the output stays
    valid (non-negative, orthonormal) when the noise swamps them."""
    gram, truth = _planted(0)
    rng = np.random.default_rng(7)
    medians = []
    for std in (10.0, 30.0, 100.0, 1000.0):
        found_overlaps = []
        for _ in range(3):
            noise = rng.standard_normal(gram.shape) * std
            found = nonnegative_pca(gram + (noise + noise.T) / np.sqrt(2), 3)
            assert (found >= 0).all() and np.allclose(found @ found.T, np.eye(3), atol=1e-12)
            found_overlaps.append(_overlaps(found, truth).min())
        medians.append(float(np.median(found_overlaps)))
    assert medians[0] > 0.99 and medians[1] > 0.99 and medians[2] > 0.95
    assert medians[3] < medians[0]


def test_nonnegative_pca_fills_what_it_can_and_refuses_bad_arguments():
    found = nonnegative_pca(np.ones((3, 3)), 3)  # one component takes every coordinate
    assert np.allclose(found[0], 1 / np.sqrt(3)) and not found[1:].any()
    with pytest.raises(InvalidParameterError, match="support_tol must be in"):
        nonnegative_pca(np.eye(3), 1, support_tol=1.0)
    sparse = sparse_pca(_planted(0)[0], 2, nonzeros=20)
    assert (np.count_nonzero(sparse, axis=1) <= 20).all()
