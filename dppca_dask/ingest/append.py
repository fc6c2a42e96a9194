"""Append a file (any format :func:`dppca_dask.ingest.ingest` reads) to an existing store as one stamped day.

The file is ingested first into a private temporary store beside the target (so every value is validated with
the same rules, and against the target's schema: its number of columns, and for Parquet its column-id universe),
then its rows are appended with :func:`~dppca_dask.storage.append_partition`, whose metadata write is the commit
point. Labels (a store ingested with ``store_labels=True``) and row ids (a Parquet store's ``obs_ids``) are written
with the rows, under the store's append lock and before that commit point, so a crash leaves at most labels or ids
beyond the committed rows, which the next append cuts back.
"""

from __future__ import annotations

import os
import shutil
from typing import Any, cast

import numpy as np
import zarr

from dppca_dask.errors import InvalidParameterError
from dppca_dask.storage import MatrixStore, append_partition, open_matrix
from dppca_dask.storage._remote import scratch_store_path

__all__ = ["append_file", "check_append"]


def append_file(
    store: str | os.PathLike[str] | MatrixStore,
    src: Any,
    *,
    timestamp: Any,
    format: str | None = None,
    zero_based: bool = False,
    row_column: str = "row_id",
    col_column: str = "col_id",
    value_column: str | None = "value",
) -> MatrixStore:
    """Append the rows of ``src`` to ``store`` as new partitions stamped ``timestamp``; returns the reopened store.

    Parameters
    ----------
    store
        A dppca_dask store.
    src
        A file in any format :func:`~dppca_dask.ingest.ingest` reads, or an in-memory matrix, with the store's
        columns (Parquet: column ids from the store's universe).
    timestamp
        Time of the new rows (``"2026-11-02"`` is midnight UTC); required, so that time windows see the day.
    format, zero_based, row_column, col_column, value_column
        As :func:`~dppca_dask.ingest.ingest`.

    Raises
    ------
    InvalidParameterError
        No timestamp, an AnnData store, a timestamp earlier than the newest partition's.
    InvalidInputError
        Invalid data, or a width or column id outside the store's schema.
    """
    from dppca_dask.ingest import ingest

    target = store if isinstance(store, MatrixStore) else open_matrix(store)
    stamp = check_append(target, timestamp)
    group = target.open_group()
    has_labels = "labels" in group
    from dppca_dask.storage import _format

    var_ids = _format.locate(group, _format.ID_MAPS["var_ids"])  # the column-id universe of a Parquet store
    is_parquet = var_ids is not None
    options: dict[str, Any] = {"format": format, "dtype": target.dtype}
    kind = format
    if kind is None and not hasattr(src, "shape"):
        from dppca_dask.ingest import detect_format
        from dppca_dask.ingest._common import require_file

        kind = detect_format(require_file(src))
    if kind == "parquet":
        if is_parquet:
            options["column_ids"] = list(np.asarray(cast(zarr.Array, group[cast(str, var_ids)])[:]).tolist())
        options.update(row_column=row_column, col_column=col_column, value_column=value_column)
    elif hasattr(src, "shape"):
        options["format"] = None
    else:
        options["n_features"] = target.n_cols
    if kind == "svmlight":
        options.update(zero_based=zero_based, store_labels=has_labels)
    tmp = scratch_store_path(target.path)
    try:
        day = ingest(src, tmp, **options)  # declared width (or the store's column ids): checked by ingest
        block = day.to_scipy() if target.layout == "csr" else day.to_scipy().toarray()
        labels = None
        if has_labels:
            day_group = zarr.open_group(day.path, mode="r")
            if "labels" not in day_group:
                raise InvalidParameterError(
                    f"'{target.path}' stores a label per row and the appended file has none; append a LIBSVM file "
                    "with labels"
                )
            labels = np.asarray(cast(zarr.Array, day_group["labels"])[:], dtype=np.float64)
        row_ids = None
        if _format.locate(group, _format.ID_MAPS["obs_ids"]) is not None:  # the day's ids follow the store's
            day_group = zarr.open_group(day.path, mode="r")
            day_ids = _format.locate(day_group, _format.ID_MAPS["obs_ids"])
            if day_ids is not None:
                row_ids = np.asarray(cast(zarr.Array, day_group[day_ids])[:])
        return append_partition(target.path, block, timestamp=stamp, row_ids=row_ids, labels=labels,
                                storage_options=target.storage_options)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def check_append(target: MatrixStore, timestamp: Any) -> float:
    """The checks of an append that read only the store's metadata and partition table (no file, no rows): a
    timestamp, a dppca_dask store, days in time order. Returns the timestamp in POSIX seconds."""
    from dppca_dask.methods.window.selection import parse_timestamp

    if timestamp is None:
        raise InvalidParameterError("append needs the time of the new rows: timestamp='2026-11-02' (--timestamp)")
    stamp = parse_timestamp(timestamp)
    if target.format_version is None:
        raise InvalidParameterError(
            f"'{target.path}' is an AnnData store; appending needs a dppca_dask store: "
            f"`dppca-dask ingest {target.path} --out STORE`"
        )
    stamped = [p.timestamp for p in target.partitions if p.timestamp is not None]
    if stamped and stamp < max(stamped):
        raise InvalidParameterError(
            f"timestamp {timestamp!r} is earlier than the store's newest partition; append days in time order"
        )
    return stamp
