"""Ingesting into object storage (``--out s3://bucket/x.zarr``): the store is built as a local store first, in a
private temporary directory (``TMPDIR``; every check, limit and cleanup of a local ingest applies), then uploaded
with its root metadata last (:func:`dppca_dask.storage._remote.upload_store`): a reader finds no store, or the whole
new one. The local copy is removed whatever happens.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from typing import Any

from dppca_dask._urls import filesystem, storage_error
from dppca_dask.errors import InvalidParameterError
from dppca_dask.storage import MatrixStore, open_matrix
from dppca_dask.storage._remote import check_bucket, upload_store

__all__ = ["check_remote_output", "ingest_to_url"]


def check_remote_output(out: str, storage_options: Mapping[str, Any] | None, *, overwrite: bool) -> None:
    """Refuse, before anything is read, an output URL whose package, endpoint, credentials or bucket is missing, or
    where a store exists without ``overwrite``."""
    fs, inner = filesystem(out, storage_options)
    check_bucket(out, storage_options)
    try:
        fs.invalidate_cache(inner)
        exists = fs.exists(f"{inner.rstrip('/')}/zarr.json")
    except Exception as exc:
        raise storage_error(exc, out) from None
    if exists and not overwrite:
        raise InvalidParameterError(
            f"'{out}' already exists; choose another output URL or pass overwrite=True (--overwrite)")


def ingest_to_url(write: Callable[[str], MatrixStore], out: str, storage_options: Mapping[str, Any] | None, *,
                  overwrite: bool) -> MatrixStore:
    """Run ``write(local_path)`` (an ingest into a new local store), then upload that store to ``out``."""
    check_remote_output(out, storage_options, overwrite=overwrite)
    scratch = tempfile.mkdtemp(prefix="dppca-ingest-")  # 0700
    try:
        local = os.path.join(scratch, os.path.basename(out.rstrip("/")) or "store.zarr")
        write(local)
        upload_store(local, out, storage_options, overwrite=overwrite)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return open_matrix(out, storage_options=storage_options)
