"""``window(..., structure="spectral-histogram")``: incremental, reads only new partitions, covers the window."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dppca_dask import window
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms.testing import ZeroNoiseSource
from dppca_dask.methods.window.release import HISTOGRAM_CAVEAT
from dppca_dask.storage import append_partition
from window_data import clipped, day, day_block

pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")


def _gram(parts) -> np.ndarray:
    rows = clipped(np.vstack([day_block(i + 1).toarray() for i in parts]))
    return rows.T @ rows


def test_nightly_histogram_reads_only_new_partitions(daily_store, monkeypatch):
    store = daily_store(6)
    from dppca_dask.coordinator import sources

    reads: list[int] = []
    original = sources.load_store_partition

    def counting(s, index):
        reads.append(index)
        return original(s, index)

    monkeypatch.setattr(sources, "load_store_partition", counting)
    from dppca_dask.methods.window import gram as gram_module

    monkeypatch.setattr(gram_module, "load_store_partition", counting)
    args = {"last": "3D", "epsilon": 1, "delta": 1e-6, "structure": "spectral-histogram", "client": "local"}
    first = window(store, noise=ZeroNoiseSource(), **args)
    assert first.window.partitions[0] <= 3 and first.window.partitions[-1] == 5
    assert np.allclose(first.released, _gram(first.window.partitions))
    assert HISTOGRAM_CAVEAT in first.privacy.caveats and first.provenance["structure"] == "spectral-histogram"
    directory = os.path.join(os.path.dirname(store.path), ".store.window-259200s-features")
    assert oct(os.stat(directory).st_mode & 0o777) == "0o700"
    reads.clear()
    store = append_partition(store.path, day_block(7), timestamp=day(7))
    second = window(store, noise=ZeroNoiseSource(), **args)
    assert set(reads) == {6}  # the nightly release read only the new day
    covered = second.window.partitions
    assert covered[0] <= 4 and covered[-1] == 6  # t₁ ≤ the window's first partition
    assert np.allclose(second.released, _gram(covered))


def test_histogram_refusals(ten_days):
    args = {"epsilon": 1, "delta": 1e-6, "structure": "spectral-histogram", "client": "local"}
    with pytest.raises(InvalidParameterError, match="serves time windows"):
        window(ten_days, last_rows=10, **args)
    with pytest.raises(InvalidParameterError, match="current window only"):
        window(ten_days, last="2D", end="2026-11-05", **args)
    with pytest.raises(InvalidParameterError, match="eta must be in"):
        window(ten_days, last="2D", eta=1.5, **args)
    with pytest.raises(InvalidParameterError, match="structure must be one of"):
        window(ten_days, last="2D", epsilon=1, delta=1e-6, structure="tree", client="local")
