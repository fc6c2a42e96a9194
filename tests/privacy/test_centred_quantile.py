"""Neighbouring datasets for the private row-norm quantile (``row_norm_bound="auto"``): each utility moves by at
most Δ = max(a, 100 − a) when one row is added, whatever its norm (below every candidate, between two, above
all, zero); a row of huge norm attains Δ. Deterministic (the utilities are exact integers)."""

from __future__ import annotations

import numpy as np
import pytest

from dppca_dask.kernels.block import norm_counts
from dppca_dask.mechanisms.quantile import NormGrid, private_quantile
from dppca_dask.mechanisms.testing import AuditingNoiseSource
from privacy_harness import assert_within_sensitivity


@pytest.mark.parametrize("quantile", [0.9, 0.3])
@pytest.mark.parametrize("extra", [0.0, 1e-6, 1.7, 3.0, 1e9])
def test_utilities_move_within_the_sensitivity(seed: int, quantile: float, extra: float) -> None:
    rng = np.random.default_rng(seed)
    norms = np.exp(rng.normal(0.0, 1.0, 2_000))
    grid = NormGrid()
    a, b = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    for source, values in ((a, norms), (b, np.append(norms, extra))):
        partial = norm_counts(values, grid.values)
        private_quantile(partial.counts, partial.count, grid=grid, quantile=quantile, epsilon=0.1, noise=source)
    (moved,) = assert_within_sensitivity(a.records, b.records)
    percent = round(quantile * 100)
    assert a.records[0].sensitivity == max(percent, 100 - percent)
    assert a.records[0].scale == (2 * max(percent, 100 - percent) / 0.1,) * 2
    if extra == 1e9:  # above every candidate: only a·n moves, by a; below all: 100 − a
        assert moved == pytest.approx(percent / max(percent, 100 - percent), rel=1e-12)
    if extra == 0.0:
        assert moved == pytest.approx((100 - percent) / max(percent, 100 - percent), rel=1e-12)
