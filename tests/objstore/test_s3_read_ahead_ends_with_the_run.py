"""Partitions fetched ahead from object storage do not outlive the run: when the run ends, every process that read
(this one, the workers of a cluster) drops them. Before, up to two partitions per store and worker stayed in memory
until the worker exited."""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from dppca_dask.api import pca
from dppca_dask.ingest import ingest
from dppca_dask.storage import open_matrix


def _held_here() -> int:
    from dppca_dask.storage.store import READ_AHEAD

    return sum(len(READ_AHEAD.held(key)) for key in list(READ_AHEAD._plans))


def _store(s3, rng: np.random.Generator) -> str:
    matrix = sp.csr_array(sp.random(400, 12, density=0.3, random_state=rng, format="csr"))
    url = s3.url("ahead.zarr")
    ingest(matrix, url, rows_per_partition=50, n_features=12)  # 8 partitions
    return url


def _run(url: str, **kwargs) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # seeded noise: a test of what stays in memory, not a private release
        pca(url, epsilon=1.0, delta=1e-6, mechanism="analyze-gauss", seed=3, **kwargs)


def test_this_process_drops_what_it_fetched_ahead(s3, rng):
    url = _store(s3, rng)
    from dppca_dask.storage.store import READ_AHEAD

    READ_AHEAD.clear()
    store = open_matrix(url)
    store.read_partition_with_norms(0)
    store.read_partition_with_norms(1)
    assert _held_here() > 0  # (the read-ahead works: what the run must drop exists)
    READ_AHEAD.clear()
    _run(url, executor="local")  # the in-process executor (also what "auto" picks here without an active client)
    assert _held_here() == 0


def test_the_workers_drop_what_they_fetched_ahead(s3, rng, local_client):
    url = _store(s3, rng)
    # The session's LocalCluster was started before the bucket: its workers reach it through the storage options.
    _run(url, client=local_client, executor="cluster", storage_options=s3.options())
    held = local_client.run(_held_here)
    assert len(held) >= 2 and set(held.values()) == {0}
