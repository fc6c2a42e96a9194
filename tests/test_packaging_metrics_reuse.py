"""``subspace_sin2`` is scipy's ``subspace_angles``: the same as the SVD of the bases' cross-product where that is
accurate, and accurate where it is not (tiny angles)."""

from __future__ import annotations

import numpy as np
import pytest

from dppca_dask.metrics import subspace_sin2


def _svd_sin2(u: np.ndarray, v: np.ndarray) -> float:
    qu, _ = np.linalg.qr(u)
    qv, _ = np.linalg.qr(v)
    smallest = float(np.min(np.linalg.svd(qu.T @ qv, compute_uv=False)))
    return 1.0 - smallest * smallest


@pytest.mark.parametrize(("d", "k1", "k2"), [(20, 1, 1), (20, 3, 3), (50, 2, 5), (8, 4, 4)])
def test_matches_the_svd_of_orthonormal_bases(d: int, k1: int, k2: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    u, v = rng.standard_normal((d, k1)), rng.standard_normal((d, k2))
    assert subspace_sin2(u, v) == pytest.approx(_svd_sin2(u, v), abs=1e-12)
    assert subspace_sin2(u, u @ rng.standard_normal((k1, k1))) == pytest.approx(0.0, abs=1e-20)  # same span


def test_tiny_angles_are_resolved(seed: int) -> None:
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(30)
    u /= np.linalg.norm(u)
    w = rng.standard_normal(30)
    w -= (w @ u) * u
    w /= np.linalg.norm(w)
    angle = 1e-10
    v = np.cos(angle) * u + np.sin(angle) * w
    assert subspace_sin2(u, v) == pytest.approx(angle**2, rel=1e-4)  # 1 - cos^2 rounds this to 0
    assert subspace_sin2(u, w) == pytest.approx(1.0)
