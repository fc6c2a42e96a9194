"""Edge cases of the window family's boundaries: empty stores, bad labels, unstamped ingest, tree state damage."""

from __future__ import annotations

import datetime as _dt
import os

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask import window
from dppca_dask.errors import InvalidInputError, InvalidParameterError, StoreCorruptError
from dppca_dask.ingest import ingest
from dppca_dask.ingest.append import append_file
from dppca_dask.methods.window import select_window, tree_window
from dppca_dask.storage import write_matrix
from dppca_dask.storage.writer import stamp_partitions
from window_data import D, day_block

pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")


def test_store_without_rows_has_no_window(tmp_path):
    store = write_matrix(tmp_path / "empty", sp.csr_array((0, 3)))
    if store.n_partitions:
        pytest.skip("this storage version writes a partition for an empty matrix")
    with pytest.raises(InvalidParameterError, match="has no partitions"):
        select_window(store, last_rows=1)


def test_nan_label_fails_before_any_release(tmp_path):
    import zarr

    store = ingest(day_block(1), tmp_path / "s", n_features=D, timestamp="2026-11-01")
    labels = np.zeros(store.n_rows)
    labels[3] = np.nan
    zarr.open_group(store.path, mode="r+").create_array("labels", data=labels, chunks=(64,))
    zarr.consolidate_metadata(store.path)  # a node added with zarr: consolidated again
    with pytest.raises(InvalidInputError, match="label of row 3 .* NaN or infinite"):
        window(store, last="1D", epsilon=1, delta=1e-6, labels=True, client="local", seed=1)


def test_labels_that_are_not_numbers_fail_before_anything_is_read(tmp_path):
    import zarr

    store = ingest(day_block(1), tmp_path / "s", n_features=D, timestamp="2026-11-01")
    zarr.open_group(store.path, mode="r+").create_array("labels", data=np.array(["a"] * store.n_rows), chunks=(64,))
    zarr.consolidate_metadata(store.path)  # a node added with zarr: consolidated again
    with pytest.raises(InvalidInputError, match="values, not numbers"):
        window(store, last="1D", epsilon=1, delta=1e-6, labels=True, client="local", seed=1)


def test_stamping_and_append_refusals(tmp_path):
    store = ingest(day_block(1), tmp_path / "s", n_features=D)
    with pytest.raises(InvalidParameterError, match="timezone-aware"):
        stamp_partitions(store.path, _dt.datetime(2026, 11, 1))
    stamped = stamp_partitions(store.path, _dt.datetime(2026, 11, 1, tzinfo=_dt.timezone.utc))
    assert stamped.partitions[0].timestamp is not None
    with pytest.raises(InvalidParameterError, match="needs the time of the new rows"):
        append_file(store.path, day_block(2), timestamp=None)
    appended = append_file(store.path, day_block(2), timestamp="2026-11-02")  # in-memory rows too
    assert appended.n_partitions == 2 and appended.partitions[1].timestamp > appended.partitions[0].timestamp


def test_anndata_stores_cannot_be_stamped_or_appended(tmp_path):
    anndata = pytest.importorskip("anndata")
    path = tmp_path / "a.zarr"
    anndata.AnnData(X=sp.csr_matrix(np.eye(3))).write_zarr(path)
    with pytest.raises(InvalidParameterError, match="AnnData store"):
        stamp_partitions(path, 0.0)
    with pytest.raises(InvalidParameterError, match="AnnData store"):
        append_file(path, np.eye(3), timestamp="2026-11-01")


def test_damaged_tree_state_is_refused(daily_store):
    store = daily_store(2)
    tree_window(store, last="2D", epsilon=1, delta=1e-6, horizon=4, client="local", seed=1)
    parent, base = os.path.split(store.path)
    state = os.path.join(parent, f".{base}.window-tree-4-features", "nodes.json")
    with open(state, "w") as fh:
        fh.write("{not json")
    with pytest.raises(StoreCorruptError, match="cannot be read"):
        tree_window(store, last="2D", epsilon=1, delta=1e-6, horizon=4, client="local", seed=1)
