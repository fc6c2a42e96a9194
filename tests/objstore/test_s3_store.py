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
