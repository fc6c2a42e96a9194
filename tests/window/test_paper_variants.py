"""The paper-literal structures (variant="paper"): errata E1, E5 and E8 shown on small streams (seeded)."""

from __future__ import annotations

import numpy as np
import pytest

from dppca_dask.errors import InvalidParameterError, ReleaseError
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.paper_window import PaperJLHistogram, PaperWishartHistogram

pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")


def _rank_one(n: int, d: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    return np.outer(rng.choice([-1.0, 1.0], n), u)


def test_order_fix_breaks_window_coverage_e5(seed):
    # rank-deficient data, noise-dominated (d = 4, W = 30, τ = ⌊4 + 14·ln(1e5)⌋ = 165): with ORDER-FIX the first
    # checkpoint starts after the window in most steps; without it, never (§6.2 of the spec: 201/201 vs 0)
    d, w, n = 4, 30, 60
    rows = _rank_one(n, d, seed)
    violations = {}
    for order_fix in (True, False):
        h = PaperWishartHistogram(d, window=w, eta=0.5, epsilon=1.0, delta=1e-5,
                                  noise=NoiseSource.from_seed(seed), order_fix=order_fix)
        count = 0
        for t in range(1, n + 1):
            h.add(rows[t - 1])
            if t >= w and h.starts[0] > t - w + 1:
                count += 1
        violations[order_fix] = count
    assert violations[False] == 0
    assert violations[True] >= (n - w + 1) // 2


def test_literal_f1_with_m_below_d_never_prunes_e1(seed):
    # m = ⌈4r/η⌉ = 8 < d = 12: the checkpoints' Grams have rank ≤ 8 with different row spaces, so no
    # (1−η/2)-closeness is ever found and only expiry removes checkpoints: ℓ = min(t, W) + 1 at most (Θ(W))
    d, w, n = 12, 15, 25
    rows = _rank_one(n, d, seed)
    h = PaperJLHistogram(d, window=w, eta=0.5, rank_bound=1, epsilon=1.0, delta=1e-5,
                         noise=NoiseSource.from_seed(seed))
    assert h.m == 8 < d
    sizes = []
    for t in range(1, n + 1):
        h.add(rows[t - 1])
        sizes.append(len(h.starts))
    assert sizes[w - 1] == w and max(sizes) >= w  # every row kept its checkpoint through the first window


def test_second_release_from_the_literal_structure_is_refused_e8(seed):
    d = 3
    h = PaperWishartHistogram(d, window=10, eta=0.5, epsilon=1.0, delta=1e-5, noise=NoiseSource.from_seed(seed))
    rows = _rank_one(6, d, seed)
    for r in rows[:5]:
        h.add(r)
    t1, first = h.release()
    # what a second release would show: the same noise plus exactly the new row (the E8 leak)
    h.add(rows[5])
    assert h.starts[0] == t1 and np.allclose(h.mats[0] - first, np.outer(rows[5], rows[5]))
    with pytest.raises(ReleaseError, match="releases once"):
        h.release()


def test_paper_variant_parameters():
    noise = NoiseSource.from_seed(0)
    with pytest.raises(InvalidParameterError, match="eta must be in"):
        PaperWishartHistogram(3, window=5, eta=0.0, epsilon=1, delta=1e-5, noise=noise)
    with pytest.raises(InvalidParameterError, match="window must be"):
        PaperWishartHistogram(3, window=0, eta=0.5, epsilon=1, delta=1e-5, noise=noise)
    with pytest.raises(InvalidParameterError, match="eta must be in"):
        PaperJLHistogram(3, window=5, eta=1.0, rank_bound=1, epsilon=1, delta=1e-5, noise=noise)
