"""Stores in object storage, against the local S3 server (tests/objstore/conftest.py), configured only by the
standard AWS variables unless a test says otherwise."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.errors import InvalidParameterError, StoreNotFoundError
from dppca_dask.ingest import ingest
from dppca_dask.storage import append_partition, open_matrix


def _matrix(rng: np.random.Generator, n_rows: int = 300, n_cols: int = 12) -> sp.csr_array:
    return sp.csr_array(sp.random(n_rows, n_cols, density=0.3, random_state=rng, format="csr"))


def test_ingest_open_read_append_on_s3(s3, rng):
    matrix = _matrix(rng)
    url = s3.url("x.zarr")
    store = ingest(matrix, url, rows_per_partition=100, n_features=12)
    assert store.path == url and store.n_partitions == 3
    again = open_matrix(url)
    assert (again.to_scipy() != matrix).nnz == 0
    more = _matrix(rng, 50)
    appended = append_partition(url, more, timestamp=1.0e9)
    assert appended.n_rows == 350 and appended.generation == 1
    assert (open_matrix(url).to_scipy() != sp.vstack([matrix, more], format="csr")).nnz == 0
    assert not s3.filesystem().exists(s3.url(".x.zarr.append.lock"))  # the lock object is gone


def test_storage_options_instead_of_the_environment(s3, rng, monkeypatch):
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    options = s3.options()
    secret = options["secret"]
    url = s3.url("opts.zarr")
    ingest(_matrix(rng), url, rows_per_partition=100, storage_options=options)
    store = open_matrix(url, storage_options=options)
    assert store.n_rows == 300
    assert secret not in repr(store) and secret not in str(store.info())
    store.read_partition(1)


def test_fsspec_store_object(s3, rng):
    from zarr.storage import FsspecStore

    url = s3.url("fs.zarr")
    ingest(_matrix(rng), url, rows_per_partition=100)
    store = open_matrix(FsspecStore.from_url(url, read_only=True))
    assert store.path == url and store.n_rows == 300


def test_existing_store_is_not_replaced_without_overwrite(s3, rng):
    url = s3.url("x.zarr")
    ingest(_matrix(rng), url)
    with pytest.raises(InvalidParameterError, match="already exists"):
        ingest(_matrix(rng), url)
    replaced = ingest(_matrix(rng, 40), url, overwrite=True)
    assert open_matrix(url).n_rows == 40 and replaced.n_rows == 40


def test_missing_bucket_and_store_are_named(s3, rng):
    with pytest.raises(StoreNotFoundError, match="bucket 'no-such-bucket'.*does not exist"):
        ingest(_matrix(rng), "s3://no-such-bucket/x.zarr")
    with pytest.raises(StoreNotFoundError, match=r"dppca-dask ingest SRC --out s3://"):
        open_matrix(s3.url("missing.zarr"))


def _counts(rng: np.random.Generator, n_rows: int, n_cols: int = 12) -> sp.csr_array:
    """Small word-count rows (topics reads counts; pca and window read any rows)."""
    return sp.csr_array(sp.random(n_rows, n_cols, density=0.4, random_state=rng, format="csr",
                                  data_rvs=lambda n: rng.integers(1, 4, size=n).astype(float)))


def _flow(url: str, rng: np.random.Generator, *, client, storage_options=None) -> None:
    """ingest -> info -> pca, window, topics -> append -> pca on the store at ``url``."""
    import dppca_dask
    from dppca_dask.api import topics
    from dppca_dask.api import window

    executor = "local" if client is None else "cluster"
    ingest(_counts(rng, 200), url, rows_per_partition=100, n_features=12, timestamp="2026-11-01",
           storage_options=storage_options)
    info = open_matrix(url, storage_options=storage_options).info()
    assert info["n_partitions"] == 2 and info["size_on_disk"] > 0
    run = {"client": client, "executor": executor, "storage_options": storage_options}
    result = dppca_dask.pca(url, epsilon=1.0, delta=1e-6, seed=1, **run)
    assert result.components.shape == (1, 12) and result.provenance["executor"] == ("in-process" if client is None
                                                                                     else "cluster")
    released = window(url, last="2D", epsilon=1.0, delta=1e-6, seed=1, **run)
    assert released.released.shape == (12, 12)
    found = topics(url, n_topics=2, epsilon=None, delta=None, private=False, seed=1, n_restarts=2, n_iter=5, **run)
    assert np.asarray(found.topics).shape == (2, 12)
    append_partition(url, _counts(rng, 60), timestamp=1.7880768e9, storage_options=storage_options)
    assert open_matrix(url, storage_options=storage_options).n_rows == 260
    after = dppca_dask.pca(url, epsilon=1.0, delta=1e-6, seed=1, **run)
    assert after.provenance["input"]["fingerprint"].endswith(":1")  # the appended generation was read
    if storage_options:
        secret = storage_options["secret"]
        assert secret not in repr(result) and secret not in repr(after.provenance) and secret not in repr(released)


def test_flow_in_process(s3, rng):
    _flow(s3.url("flow.zarr"), rng, client=None)


def test_flow_on_a_local_cluster_with_storage_options(s3, rng, local_client, monkeypatch):
    """The session's LocalCluster was started before this test set the AWS variables: its workers reach the bucket
    only through the storage options that travel with the store in each task's arguments."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)
    workers = local_client.run(lambda: __import__("os").environ.get("AWS_ENDPOINT_URL"))
    assert set(workers.values()) == {None}
    _flow(s3.url("flow.zarr"), rng, client=local_client, storage_options=s3.options())


def test_estimator_and_scanpy_style_pca_on_a_bucket_store(s3, rng, monkeypatch):
    pytest.importorskip("sklearn")
    anndata = pytest.importorskip("anndata")
    from zarr.storage import FsspecStore

    from dppca_dask import pp
    from dppca_dask.estimator import DPPCA

    url = s3.url("est.zarr")
    ingest(_counts(rng, 120), url, rows_per_partition=60, n_features=12)
    model = DPPCA(1, seed=1).fit(FsspecStore.from_url(url, read_only=True), client="local")
    assert model.components_.shape == (1, 12)
    options = s3.options()
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name)  # from here on, only the storage options reach the bucket
    model = DPPCA(1, seed=1).fit(url, storage_options=options, client="local")
    assert model.components_.shape == (1, 12) and "storage_options" not in model.get_params()
    adata = pp.pca(url, 1, epsilon=1.0, delta=1e-6, seed=1, storage_options=options, client="local")
    assert isinstance(adata, anndata.AnnData) and adata.varm["PCs"].shape == (12, 1)


def test_read_ahead_fetches_the_next_partitions_of_this_process(s3, rng):
    """A process reading every second partition (partition i on worker i mod 2) has the next one of its own fetched
    while it works on the current one: in the first step guessed from the stride of its reads, then, once it knows
    its own partitions, the ones it has not read yet in this step (at most DEPTH, in index order after the current
    one, whatever order the steps take them in) and after the last the next step's first; what it reads is what is
    stored."""
    from dppca_dask.storage._read_ahead import DEPTH
    from dppca_dask.storage.store import READ_AHEAD

    matrix = _matrix(rng, 800)
    url = s3.url("ahead.zarr")
    store = ingest(matrix, url, rows_per_partition=100, n_features=12)
    key = (store.path, store.fingerprint, store._options)
    assert DEPTH == 2
    steps = ((1, []), (3, [5]), (5, [7]), (7, [1, 3]),  # first step: the stride; then the next step's first
             (1, [3, 5]), (5, [7, 3]), (3, [7]), (7, [1, 3]))  # a step taken out of order
    for index, ahead in steps:
        block, _ = store.read_partition_with_norms(index)
        assert (block != matrix[100 * index: 100 * (index + 1)]).nnz == 0
        assert READ_AHEAD.held(key) == sorted(ahead)


def test_a_read_during_a_replacement_is_refused_not_mixed(s3, rng):
    """A reader that opened the old store and reads a partition after ``ingest --overwrite`` began (here: after it
    ended, the replacement's chunks at the old keys, laid out alike) gets an error, never the other store's rows
    under the old partition table (a partition fetched ahead and checked before the replacement began is the old
    store's); an append meanwhile (same store, new generation) does not stop it."""
    from dppca_dask.errors import StoreCorruptError

    url = s3.url("x.zarr")
    old = _matrix(rng)
    opened = ingest(old, url, rows_per_partition=100)
    assert (opened.read_partition(0) != old[:100]).nnz == 0
    append_partition(url, _matrix(rng, 50), timestamp=1.0e9)
    assert (opened.read_partition(1) != old[100:200]).nnz == 0  # appended to: still the store that was opened
    # partition 2 was fetched ahead (reads 0, 1: stride 1) and checked before the replacement: the old store's
    new = _matrix(rng)
    ingest(new, url, rows_per_partition=100, overwrite=True)
    assert (opened.read_partition(2) != old[200:]).nnz == 0
    with pytest.raises(StoreCorruptError, match="was replaced .* while partition 0 was read"):
        opened.read_partition(0)
    s3.filesystem().rm_file(s3.url("x.zarr/zarr.json"))  # what a reader sees in the middle of a replacement
    with pytest.raises(StoreCorruptError, match="was replaced .* while partition 1 was read"):
        opened.read_partition(1)
