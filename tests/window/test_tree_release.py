"""The experimental binary-tree continual release: dyadic covers, node counts, noise drawn once per node."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dppca_dask.accounting import calibrate_gaussian
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms.testing import AuditingNoiseSource, ZeroNoiseSource
from dppca_dask.methods.window.tree import TREE_CAVEAT, dyadic_cover, tree_window
from window_data import clipped, day_block

pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")


def test_dyadic_cover_is_exact_and_logarithmic():
    for start in range(0, 40):
        for stop in range(start, 70):
            cover = dyadic_cover(start, stop)
            covered = [p for lv, k in cover for p in range(k << lv, (k + 1) << lv)]
            assert covered == list(range(start, stop + 1))
            assert len(cover) <= 2 * math.ceil(math.log2(stop - start + 2))


def test_tree_window_draws_each_node_once(ten_days):
    noise = AuditingNoiseSource(1)
    first = tree_window(ten_days, last="5D", epsilon=1, delta=1e-6, horizon=16, client="local", noise=noise)
    # window = partitions 5..9: nodes (0,5), (1,3) = 6..7, (1,4) = 8..9
    assert first.calibration["nodes"] == 3 and first.calibration["levels"] == 5
    assert sorted(r.release for r in noise.records) == ["tree/0/5", "tree/1/3", "tree/1/4"]
    assert first.calibration["noise_multiplier"] == calibrate_gaussian(epsilon=1, delta=1e-6, count=5)
    assert TREE_CAVEAT in first.privacy.caveats and first.privacy.epsilon == pytest.approx(1.0, rel=1e-3)
    again = AuditingNoiseSource(2)
    second = tree_window(ten_days, last="5D", epsilon=1, delta=1e-6, horizon=16, client="local", noise=again)
    assert again.records == [] and np.array_equal(first.released, second.released)  # kept, never redrawn


def test_tree_noise_off_and_refusals(daily_store):
    store = daily_store(4)
    result = tree_window(store, last="3D", epsilon=1, delta=1e-6, horizon=4, client="local",
                         noise=ZeroNoiseSource())
    rows = clipped(np.vstack([day_block(n).toarray() for n in (2, 3, 4)]))
    assert np.allclose(result.released, rows.T @ rows)
    with pytest.raises(InvalidParameterError, match="horizon must be a positive integer"):
        tree_window(store, last="3D", epsilon=1, delta=1e-6, horizon=0, client="local")
    with pytest.raises(InvalidParameterError, match="more partitions than the tree's horizon"):
        tree_window(store, last="3D", epsilon=1, delta=1e-6, horizon=2, client="local")
    with pytest.raises(InvalidParameterError, match="another store or budget"):
        tree_window(store, last="3D", epsilon=2, delta=1e-6, horizon=4, client="local")
