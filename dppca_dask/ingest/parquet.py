"""Warehouse tables in long format, ``(row_id, col_id, value)`` triplets in Parquet, into a CSR store.

The input is one Parquet file or a directory of them (hive-partitioned directories such as ``block=3/`` are fine);
triplets may come in any order and the ids need not be dense: integers or strings. The store's row ``i`` is the
``i``-th smallest row id and its column ``j`` the ``j``-th smallest column id; the id maps are stored as the arrays
``obs_ids`` and ``var_ids`` (dense index -> original id) and described in the metadata entry ``id_maps``.

Memory stays bounded for tables larger than memory; the work is three streaming passes:

1. read the two id columns batch by batch and collect the sorted distinct ids (memory: the id maps, 8 bytes per
   integer id and 16 or more per string id, up to three times that while merging, plus one batch);
2. read the triplets batch by batch, map ids to dense indices (binary search in the sorted ids, or a hash lookup for
   small string id maps), check the values, and append each triplet to the spill file of its row partition, in a
   temporary directory beside the output; rows per partition are fixed before this pass from the triplet count
   (about 128 MB per partition);
3. build each partition's CSR from its spill file (duplicates added or rejected) and write it to the store.

Files are read one after the other, row group by row group and page by page, with no read-ahead (the pyarrow dataset
scanner buffers without bound when its consumer is slower than the disk). Peak memory is the id maps, one batch of
1 Mi triplets with its temporaries, a 64 MiB spill buffer, and one partition being built: its spilled triplets plus
its CSR, about 28 bytes per entry (2.3 times the partition's stored size). The spill directory takes 16 bytes per
triplet (float64 values) and is removed afterwards, also after an error.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.ingest._common import IngestOptions, partition_rows, require_file, spill_directory
from dppca_dask.ingest._spill import RowBuckets
from dppca_dask.storage import MatrixStore

__all__ = ["ingest_parquet"]

log = logging.getLogger(__name__)

#: Triplets per batch read from Parquet.
BATCH_ROWS = 2**20
#: String id maps up to this size are looked up with a hash table, larger ones by binary search.
HASH_LOOKUP_MAX = 2**18

_STRING = np.dtypes.StringDType() if hasattr(np, "dtypes") and hasattr(np.dtypes, "StringDType") else np.dtype(object)


def ingest_parquet(
    path: str | os.PathLike[str],
    options: IngestOptions,
    *,
    row_column: str = "row_id",
    col_column: str = "col_id",
    value_column: str | None = "value",
    column_ids: Any = None,
) -> MatrixStore:
    """Ingest Parquet triplets ``(row_column, col_column, value_column)`` into a new CSR store.

    Parameters
    ----------
    path
        A Parquet file or a directory of Parquet files (possibly hive-partitioned).
    options
        Output path and write options.
    row_column, col_column
        Columns holding the row and column ids (integers or strings).
    value_column
        Column holding the values (any numeric type); ``None``: every triplet has value 1.
    column_ids
        The declared universe of column ids (a text file with one id per line, or a sequence), or ``None`` to use
        the distinct ids of the table (an inferred schema).

    Raises
    ------
    InvalidInputError
        Missing columns, unsupported id types, null ids or values, NaN or infinite values (naming the file, the
        record and the ids), duplicates under ``on_duplicate="reject"``, an empty table, unreadable files.
    """
    path = require_file(path)
    start = time.perf_counter()
    dataset = _open(path)
    columns = [row_column, col_column] + ([value_column] if value_column is not None else [])
    if len(set(columns)) != len(columns):
        raise InvalidParameterError(
            f"row_column, col_column and value_column must be different columns; got {columns}"
        )
    _check_schema(dataset.schema, path, row_column, col_column, value_column)
    n_triplets = _guard(path, dataset.count_rows)
    if n_triplets == 0:
        raise InvalidInputError(f"'{path}' holds no triplets; nothing to ingest", source=path)

    universe = None
    if column_ids is not None:
        universe = _universe(column_ids, dataset.schema.field(col_column).type, path)
        if options.n_features is not None and options.n_features != universe.size:
            raise InvalidParameterError(
                f"n_features={options.n_features} disagrees with the {universe.size} declared column ids; give one "
                "of them, or make them agree"
            )
        options = dataclasses.replace(options, n_features=int(universe.size))
    row_ids, col_ids = _unique_ids(dataset, path, row_column, col_column, options, n_triplets)
    if universe is not None:
        outside = ~np.isin(col_ids, universe)
        if outside.any():
            raise InvalidInputError(
                f"column id {_show(col_ids[int(np.argmax(outside))])} of column {col_column!r} in '{path}' is not "
                "among the declared column ids; add it to the declared ids, or fix the table",
                source=path,
            )
        col_ids = universe
    n_rows, n_cols = int(row_ids.size), int(col_ids.size)
    log.info("%s: %d triplets, %d row ids, %d column ids (pass 1: %.1f s)", path, n_triplets, n_rows, n_cols,
             time.perf_counter() - start)

    value_type = dataset.schema.field(value_column).type if value_column is not None else pa.float64()
    spill_dtype = np.dtype(np.float32) if pa.types.is_float32(value_type) else np.dtype(np.float64)
    dtype = options.value_dtype(spill_dtype)
    rpp = partition_rows(n_rows=n_rows, row_bytes=n_triplets * (dtype.itemsize + 4) / n_rows,
                         rows_per_partition=options.rows_per_partition)
    source = {"kind": "parquet", "path": path, "row_column": row_column, "col_column": col_column,
              "value_column": value_column}
    with spill_directory(options.out) as spill, options.writer(
        n_cols=n_cols, dtype=dtype, source=source, n_rows=n_rows, rows_per_partition=rpp, nnz=n_triplets
    ) as writer:
        buckets = RowBuckets(spill, n_rows=n_rows, n_cols=n_cols, rows_per_partition=rpp, dtype=spill_dtype)
        row_table, col_table = _hash_table(row_ids), _hash_table(col_ids)
        mark = time.perf_counter()
        with options.bar(total=n_triplets, desc="spill", unit="triplets", unit_scale=True) as bar:
            for batch, file, offset in _batches(dataset, path, columns):
                rows = _dense_index(batch.column(0), row_ids, row_table, row_column, file, offset)
                cols = _dense_index(batch.column(1), col_ids, col_table, col_column, file, offset)
                if value_column is None:
                    values = np.ones(batch.num_rows, dtype=spill_dtype)
                else:
                    values = _values(batch.column(2), value_column, spill_dtype, file, offset)
                    _check_finite(values, rows, cols, row_ids, col_ids, rpp, file, offset)
                buckets.add(rows, cols, values)
                bar.update(batch.num_rows)
        log.info("%s: %d triplets spilled to %d partitions (pass 2: %.1f s)", path, buckets.n_triplets,
                 buckets.n_partitions, time.perf_counter() - mark)

        def describe(row: int, col: int) -> str:
            return f"row id {_show(row_ids[row])}, column id {_show(col_ids[col])}: row {row}, column {col}"

        for block in buckets.blocks(on_duplicate=options.on_duplicate, describe=describe, source=path):
            writer.append(block, source=path)
        writer.write_array("obs_ids", row_ids)
        writer.write_array("var_ids", col_ids)
        writer.set_attribute("id_maps", {
            "obs_ids": {"column": row_column, "type": _kind(row_ids)},
            "var_ids": {"column": col_column, "type": _kind(col_ids)},
        })
        store = writer.commit()
    log.info("ingested %s: %d x %d, %d entries, %d partitions in %.1f s", path, store.n_rows, store.n_cols,
             store.nnz, store.n_partitions, time.perf_counter() - start)
    return store


def _universe(column_ids: Any, id_type: pa.DataType, path: str) -> np.ndarray:
    """The declared column ids, sorted and distinct, typed like the table's column-id column."""
    if isinstance(column_ids, (str, os.PathLike)):
        name = os.fspath(column_ids)
        try:
            with open(name, encoding="utf-8") as handle:
                values: list[Any] = [line.strip() for line in handle if line.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidParameterError(
                f"cannot read the column ids '{name}' ({type(exc).__name__}: {exc}); give a UTF-8 text file with one "
                "id per line"
            ) from exc
    else:
        name = "column_ids"
        values = list(column_ids)
    if not values:
        raise InvalidParameterError(f"the declared column ids '{name}' are empty; list at least one id")
    if pa.types.is_integer(_plain_type(id_type)):
        try:
            ids = np.array([int(v) for v in values], dtype=np.int64)
        except (TypeError, ValueError) as exc:
            raise InvalidParameterError(
                f"the column ids of '{path}' are integers, but '{name}' holds a non-integer id ({exc}); list integer "
                "ids"
            ) from exc
    else:
        ids = np.array([str(v) for v in values], dtype=object).astype(_STRING)
    unique = _sorted_unique(ids)
    if unique.size != len(values):
        raise InvalidParameterError(f"the declared column ids '{name}' repeat an id; list each id once")
    return unique


def _plain_type(value_type: pa.DataType) -> pa.DataType:
    return value_type.value_type if pa.types.is_dictionary(value_type) else value_type


def _guard(path: str, func: Any, *args: Any) -> Any:
    """Call ``func``, turning Arrow and I/O errors into :class:`InvalidInputError` naming ``path``."""
    try:
        return func(*args)
    except (pa.ArrowException, OSError) as exc:
        raise InvalidInputError(f"cannot read Parquet data in '{path}': {exc}; check the files", source=path) from exc


def _open(path: str) -> ds.Dataset:
    return _guard(path, lambda: ds.dataset(path, format="parquet", partitioning="hive"))


def _check_schema(schema: pa.Schema, path: str, row_column: str, col_column: str, value_column: str | None) -> None:
    for role, name in (("row_column", row_column), ("col_column", col_column), ("value_column", value_column)):
        if name is None:
            continue
        if schema.get_field_index(name) < 0:
            raise InvalidParameterError(
                f"{role}={name!r} is not a column of '{path}'; its columns are {schema.names}: pass the right "
                f"column name (--{role.replace('_', '-')})"
            )
        kind = schema.field(name).type
        if pa.types.is_dictionary(kind):
            kind = kind.value_type
        if role == "value_column":
            ok = pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_decimal(kind) \
                or pa.types.is_boolean(kind)
            expected = "a numeric type"
        else:
            ok = pa.types.is_integer(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)
            expected = "integers or strings"
        if not ok:
            raise InvalidInputError(
                f"column {name!r} of '{path}' has type {kind}; {role} must hold {expected}: cast it in the "
                "warehouse export",
                source=path,
            )


def _batches(dataset: ds.Dataset, path: str, columns: list[str]) -> Iterator[tuple[pa.RecordBatch, str, int]]:
    """Batches of ``columns``, file by file, with the file and the offset of the batch's first record in it.

    Files are read synchronously, row group by row group and page by page (``pre_buffer=False``): the dataset
    scanner reads ahead without bound when the consumer is slower than the disk, which this one is. Hive partition
    keys are filled in as constant columns, and every column is cast to the dataset's type.
    """
    schema = dataset.schema
    for fragment in _guard(path, lambda: list(dataset.get_fragments())):
        file = fragment.path
        keys = ds.get_partition_keys(fragment.partition_expression)
        reader = _guard(file, lambda: pq.ParquetFile(dataset.filesystem.open_input_file(file), pre_buffer=False))
        physical = [name for name in columns if name in reader.schema_arrow.names]
        missing = [name for name in columns if name not in physical and name not in keys]
        if missing:
            raise InvalidInputError(f"file '{file}' has no column {missing[0]!r} (its columns are "
                                    f"{reader.schema_arrow.names}); give every file the same columns", source=file)
        offset = 0
        batches = _guard(file, reader.iter_batches, BATCH_ROWS, None, physical)
        while True:
            batch = _guard(file, next, batches, None)
            if batch is None:
                break
            n = batch.num_rows
            arrays = [batch.column(name) if name in physical else pa.repeat(keys[name], n) for name in columns]
            arrays = [_guard(file, _cast, array, schema.field(name).type) for array, name in zip(arrays, columns)]
            yield pa.RecordBatch.from_arrays(arrays, names=columns), file, offset
            offset += n


def _cast(array: pa.Array, target: pa.DataType) -> pa.Array:
    return array if array.type == target else pc.cast(array, target)


def _plain(column: pa.Array) -> pa.Array:
    return column.dictionary_decode() if pa.types.is_dictionary(column.type) else column


def _check_nulls(column: pa.Array, name: str, file: str, offset: int) -> None:
    if column.null_count:
        i = int(np.flatnonzero(pc.is_null(column).to_numpy(zero_copy_only=False))[0])
        raise InvalidInputError(
            f"null in column {name!r} at record {offset + i} of '{file}'; every triplet needs a row id, a column id "
            "and a value: drop or fill the nulls before ingesting",
            source=file,
        )


def _ids_of(column: pa.Array, name: str, file: str, offset: int) -> np.ndarray:
    """The distinct ids of one batch, sorted, as numpy (int64 / uint64 or strings)."""
    column = _plain(column)
    _check_nulls(column, name, file, offset)
    if pa.types.is_integer(column.type):
        return _sorted_unique(_int_ids(column))
    # Strings: Arrow's hash table first (few distinct values per batch), then numpy strings.
    return _sorted_unique(pc.unique(column).to_numpy(zero_copy_only=False).astype(_STRING))


def _int_ids(column: pa.Array) -> np.ndarray:
    values = column.to_numpy(zero_copy_only=False)
    return values if values.dtype == np.uint64 else values.astype(np.int64, copy=False)


def _sorted_unique(values: np.ndarray, *, runs: bool = False) -> np.ndarray:
    """Sorted distinct values. ``runs=True``: ``values`` is a concatenation of sorted runs (merged in linear time).

    (``numpy.unique`` is avoided: it hashes, which is many times slower on millions of distinct ids.)
    """
    ordered = np.sort(values, kind="stable" if runs else None)
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


class _Unique:
    """Sorted distinct values, merged from many batches with amortised linear cost and bounded extra memory."""

    def __init__(self) -> None:
        self.merged: np.ndarray | None = None
        self.pending: list[np.ndarray] = []
        self.pending_size = 0

    def add(self, values: np.ndarray) -> None:
        self.pending.append(values)
        self.pending_size += values.size
        if self.pending_size > max(0 if self.merged is None else self.merged.size, 2**22):
            self._merge()

    def result(self) -> np.ndarray:
        self._merge()
        assert self.merged is not None
        return self.merged

    def _merge(self) -> None:
        parts = ([] if self.merged is None else [self.merged]) + self.pending
        self.pending, self.pending_size = [], 0
        if not parts:
            self.merged = np.zeros(0, dtype=np.int64)
            return
        values = np.concatenate(parts)
        del parts
        self.merged = _sorted_unique(values, runs=True)


def _unique_ids(dataset: ds.Dataset, path: str, row_column: str, col_column: str, options: IngestOptions,
                n_triplets: int) -> tuple[np.ndarray, np.ndarray]:
    rows, cols = _Unique(), _Unique()
    with options.bar(total=n_triplets, desc="ids", unit="triplets", unit_scale=True) as bar:
        for batch, file, offset in _batches(dataset, path, [row_column, col_column]):
            rows.add(_ids_of(batch.column(0), row_column, file, offset))
            cols.add(_ids_of(batch.column(1), col_column, file, offset))
            bar.update(batch.num_rows)
    return rows.result(), cols.result()


def _hash_table(ids: np.ndarray) -> pa.Array | None:
    """The id map as an Arrow array for hash lookups, when the ids are strings and few enough."""
    if ids.dtype.kind not in "OUT" or ids.size > HASH_LOOKUP_MAX:
        return None
    # numpy's StringDType goes through Python strings: pyarrow reads it directly only from version 26.
    return pa.array(ids.astype(object) if ids.dtype.kind == "T" else ids)


def _dense_index(column: pa.Array, ids: np.ndarray, table: pa.Array | None, name: str, file: str,
                 offset: int) -> np.ndarray:
    """Positions of a batch's ids in the sorted ``ids`` (int64).

    Integer ids are found by binary search; string ids by hash lookup in ``table`` (Arrow rebuilds its hash table on
    every call, so only for small id maps), or else by binary search once per distinct value of the batch.
    """
    column = _plain(column)
    _check_nulls(column, name, file, offset)
    lookup = None
    if pa.types.is_integer(column.type):
        values = _int_ids(column)
    elif table is not None:
        found_at = pc.index_in(column, value_set=table)
        if found_at.null_count:
            values = column.to_numpy(zero_copy_only=False).astype(_STRING)
            _changed(values, ~pc.is_null(found_at).to_numpy(zero_copy_only=False), name, file)
        return found_at.to_numpy().astype(np.int64)
    else:
        encoded = pc.dictionary_encode(column)
        values = encoded.dictionary.to_numpy(zero_copy_only=False).astype(_STRING)
        lookup = encoded.indices.to_numpy(zero_copy_only=False)
    # Sorted needles make the binary searches walk the id map in order (several times faster than random order).
    order = np.argsort(values)
    needles = values[order]
    found_at = np.searchsorted(ids, needles)
    found = found_at < ids.size
    found[found] = ids[found_at[found]] == needles[found]
    if not found.all():
        _changed(needles, found, name, file)
    positions = np.empty(values.size, dtype=np.int64)
    positions[order] = found_at
    return positions if lookup is None else positions[lookup]


def _changed(values: np.ndarray, found: np.ndarray, name: str, file: str) -> None:
    missing = values[int(np.flatnonzero(~found)[0])]
    raise InvalidInputError(
        f"id {_show(missing)} of column {name!r} in '{file}' was not there when the ids were collected: the table "
        "changed during ingestion; ingest a snapshot that does not change",
        source=file,
    )


def _values(column: pa.Array, name: str, dtype: np.dtype[Any], file: str, offset: int) -> np.ndarray:
    column = _plain(column)
    _check_nulls(column, name, file, offset)
    target = pa.float32() if dtype == np.float32 else pa.float64()
    return pc.cast(column, target).to_numpy(zero_copy_only=False)


def _show(value: Any) -> str:
    """An id as the user wrote it (``17`` or ``'u17'``), for error messages."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def _check_finite(values: np.ndarray, rows: np.ndarray, cols: np.ndarray, row_ids: np.ndarray, col_ids: np.ndarray,
                  rows_per_partition: int, file: str, offset: int) -> None:
    """Raise :class:`InvalidInputError` naming the file, record, ids, row and partition of a NaN or infinite value."""
    bad = ~np.isfinite(values)
    if not bad.any():
        return
    i = int(np.flatnonzero(bad)[0])
    row, partition = int(rows[i]), int(rows[i]) // rows_per_partition
    raise InvalidInputError(
        f"{float(values[i])!r} value in record {offset + i} of '{file}' (row id {_show(row_ids[row])}: row {row}, "
        f"partition {partition}; column id {_show(col_ids[cols[i]])}); NaN and infinite values are not allowed: "
        "remove or impute them before ingesting",
        source=file,
        partition=partition,
        row=row,
    )


def _kind(ids: np.ndarray) -> str:
    return "string" if ids.dtype.kind in "OUT" else str(ids.dtype)
