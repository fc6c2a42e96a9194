"""A window's state beside a store in object storage: the Gram cache, the spectral histogram and the tree keep
their objects in the store's bucket (``s3://bucket/.x.zarr.window-*``), read and written with the store's storage
options, against the local S3 server (tests/objstore/conftest.py). Every test passes storage options only (no AWS
variable is set): a state object reached any other way would fail."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.errors import InvalidParameterError
from dppca_dask.ingest import ingest
from dppca_dask.mechanisms.testing import AuditingNoiseSource, ZeroNoiseSource
from dppca_dask.storage import append_partition

DAY = 86400.0
START = 1.7879904e9  # 2026-11-01


@pytest.fixture
def days(s3, rng, monkeypatch):
    """``days(n)``: a store of ``n`` daily partitions at ``s3://bucket/w.zarr`` (reached with storage options
    only), and the rows of each day."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    options = s3.options()
    url = s3.url("w.zarr")
    blocks: list[np.ndarray] = []

    def make(n: int):
        for day in range(len(blocks), n):
            block = sp.csr_array(sp.random(30, 8, density=0.4, random_state=rng, format="csr"))
            blocks.append(block.toarray())
            if day == 0:
                ingest(block, url, n_features=8, timestamp=START, storage_options=options)
            else:
                append_partition(url, block, timestamp=START + day * DAY, storage_options=options)
        return url, options, blocks

    return make


def _clipped(rows: np.ndarray, bound: float = 1.0) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows * np.minimum(1.0, bound / np.maximum(norms, 1e-300))


def test_gram_cache_in_the_bucket_is_reused(s3, days):
    from dppca_dask.api import window

    url, options, blocks = days(2)
    args = {"last": "2D", "epsilon": 1.0, "delta": 1e-6, "storage_options": options, "client": "local"}
    first = window(url, cache=True, noise=ZeroNoiseSource(), **args)
    rows = _clipped(np.vstack(blocks))
    assert np.allclose(first.released, rows.T @ rows)
    fs = s3.filesystem()
    cached = sorted(fs.ls(s3.url(".w.zarr.window-grams")))
    assert len(cached) == 2 and all(key.endswith(".npy") for key in cached)
    url, options, blocks = days(3)
    second = window(url, cache=True, noise=ZeroNoiseSource(), **args)
    rows = _clipped(np.vstack(blocks[1:]))
    assert np.allclose(second.released, rows.T @ rows)
    assert len(fs.ls(s3.url(".w.zarr.window-grams"))) == 3  # the new day's Gram only was added
    # the cache is read, not recomputed: a cached Gram replaced by zeros shows in the next release
    day1 = [key for key in cached if "-p1-" in key][0]
    with fs.open(day1, "wb") as fh:
        np.save(fh, np.zeros((8, 8)))
    third = window(url, cache=True, noise=ZeroNoiseSource(), **args)
    rows = _clipped(blocks[2])
    assert np.allclose(third.released, rows.T @ rows)


def test_spectral_histogram_in_the_bucket_on_two_nights(s3, days):
    from dppca_dask.api import window

    url, options, blocks = days(2)
    args = {"last": "2D", "epsilon": 1.0, "delta": 1e-6, "storage_options": options, "client": "local",
            "structure": "spectral-histogram"}
    first = window(url, noise=ZeroNoiseSource(), **args)
    assert first.provenance["structure"] == "spectral-histogram"
    fs = s3.filesystem()
    prefix = s3.url(".w.zarr.window-172800s-features")
    state = json.loads(fs.cat_file(f"{prefix}/state.json"))
    assert state["arrays"].startswith("state-") and fs.exists(f"{prefix}/{state['arrays']}")
    url, options, blocks = days(3)
    noise = AuditingNoiseSource(1)
    second = window(url, noise=noise, **args)
    assert second.window.partitions == (1, 2)
    after = json.loads(fs.cat_file(f"{prefix}/state.json"))
    assert after["last"] == 2 and after["arrays"] != state["arrays"]
    # the new arrays were written before the state naming them; the old ones are gone
    assert sorted(k.rsplit("/", 1)[1] for k in fs.ls(prefix)) == sorted([after["arrays"], "state.json"])
    with pytest.raises(InvalidParameterError, match="built with eta"):
        window(url, eta=0.25, noise=ZeroNoiseSource(), **args)


def test_tree_state_in_the_bucket(s3, days):
    from dppca_dask.methods.window.tree import _lock, tree_window

    url, options, blocks = days(3)
    args = {"last": "2D", "epsilon": 1.0, "delta": 1e-6, "horizon": 4, "storage_options": options,
            "client": "local"}
    noise = AuditingNoiseSource(1)
    first = tree_window(url, noise=noise, **args)
    assert noise.records  # nodes drawn
    fs = s3.filesystem()
    prefix = s3.url(".w.zarr.window-tree-4-features")
    assert fs.exists(f"{prefix}/nodes.json") and not fs.exists(prefix + ".lock")
    again = AuditingNoiseSource(2)
    second = tree_window(url, noise=again, **args)
    assert again.records == [] and np.array_equal(first.released, second.released)  # kept, never redrawn
    held = _lock(prefix, options)
    try:
        with pytest.raises(InvalidParameterError, match="another release from the tree"):
            tree_window(url, noise=AuditingNoiseSource(3), **args)
    finally:
        held.release()
    assert not fs.exists(prefix + ".lock")
