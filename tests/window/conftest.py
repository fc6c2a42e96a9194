"""Stores with timestamped partitions for the sliding-window tests."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from dppca_dask.ingest import ingest
from dppca_dask.storage import MatrixStore, append_partition
from window_data import D, ROWS_PER_DAY, _labels, day, day_block, day_labels


@pytest.fixture(scope="session")
def ten_days(tmp_path_factory) -> MatrixStore:
    """Ten daily partitions with labels, built once per session: tests only read it."""
    return _build(tmp_path_factory.mktemp("ten-days") / "store", 10, labels=True)


@pytest.fixture
def daily_store(tmp_path) -> Callable[..., MatrixStore]:
    """``make(days=10)``: a store of ``days`` daily partitions stamped 2026-11-01.. (declared width)."""

    def make(days: int = 10, *, labels: bool = False) -> MatrixStore:
        return _build(tmp_path / "store", days, labels=labels)

    return make


def _build(path, days: int, *, labels: bool) -> MatrixStore:
    store = ingest(day_block(1), path, n_features=D, timestamp="2026-11-01")
    if labels:
        import zarr

        zarr.open_group(store.path, mode="r+").create_array("labels", shape=(0,), dtype=np.float64, chunks=(1024,))
        zarr.consolidate_metadata(store.path)  # a node added with zarr: consolidated again
        _labels(store, 1)
    for n in range(2, days + 1):
        store = append_partition(store.path, day_block(n), timestamp=day(n),
                                 labels=day_labels(n) if labels else None)
    return store
