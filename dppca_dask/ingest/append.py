"""Append a file (any format :func:`dppca_dask.ingest.ingest` reads) to an existing store as one stamped day.

The file is ingested first into a private temporary store beside the target (so every value is validated with
the same rules, and against the target's schema: its number of columns, and for Parquet its column-id universe),
then its rows are appended with :func:`~dppca_dask.storage.append_partition`, whose metadata write is the commit
point. Labels (a store ingested with ``store_labels=True``) and row ids (a Parquet store's ``obs_ids``) are written
with the rows, under the store's append lock and before that commit point, so a crash leaves at most labels or ids
beyond the committed rows, which the next append cuts back.

Days may arrive in any order (backfill, late data): a window selects partitions by their timestamps, not by their
position. A day that is already in the store (a partition stamped with the same time) is compared with the file:
the same rows make the append a no-op that says so (a retried task, two appends of one day); other rows are refused
unless ``replace=True``, which replaces the day when it is the newest-arrived one and was never released under a
ledger it is given (:func:`append_day`).
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import zarr

from dppca_dask.errors import DppcaError, InvalidParameterError, StoreCorruptError
from dppca_dask.storage import MatrixStore, append_partition, open_matrix
from dppca_dask._urls import is_url
from dppca_dask.storage._remote import scratch_store_path

__all__ = ["AppendOutcome", "append_day", "append_file", "check_append", "check_store_before_append"]


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
    return append_day(store, src, timestamp=timestamp, format=format, zero_based=zero_based, row_column=row_column,
                      col_column=col_column, value_column=value_column).store


@dataclass(frozen=True, slots=True)
class AppendOutcome:
    """What :func:`append_day` did: ``status`` is ``"appended"``, ``"already-present"`` (the same rows were there
    already: nothing written) or ``"replaced"``."""

    store: MatrixStore
    status: str


def append_day(
    store: str | os.PathLike[str] | MatrixStore,
    src: Any,
    *,
    timestamp: Any,
    replace: bool = False,
    ledger: Any = None,
    dataset: str | None = None,
    format: str | None = None,
    zero_based: bool = False,
    row_column: str = "row_id",
    col_column: str = "col_id",
    value_column: str | None = "value",
    storage_options: Any = None,
) -> AppendOutcome:
    """Append a day as :func:`append_file` does, in any order of days, idempotently.

    A day stamped ``timestamp`` that is already in the store is compared, row for row (values, labels, row ids),
    with the file: the same rows leave the store as it is (``status="already-present"``); other rows are refused
    unless ``replace``. A replacement removes the day's partitions (one commit) and appends the file's rows (a
    second commit): a crash in between leaves the store without the day, never with part of it. Only the
    newest-arrived day can be replaced (the partition table is contiguous), and, given the ``ledger`` and
    ``dataset`` the store is released under, only when no release was charged to it yet.

    Raises
    ------
    InvalidParameterError
        As :func:`append_file`; the store itself given as the file; a day already there with other rows and no
        ``replace``; a replacement of a day that is not the newest-arrived, or that was released.

    ``storage_options`` are the file system's options of a store given by its URL (``s3://bucket/x.zarr``).
    """
    from dppca_dask.ingest import terminate_cleanly

    with terminate_cleanly():  # SIGTERM in the write phase too: the rows cut back, the day's temporary removed
        return _append_day(store, src, timestamp=timestamp, replace=replace, ledger=ledger, dataset=dataset,
                           format=format, zero_based=zero_based, row_column=row_column, col_column=col_column,
                           value_column=value_column, storage_options=storage_options)


def _append_day(store: Any, src: Any, *, timestamp: Any, replace: bool, ledger: Any, dataset: str | None,
                format: str | None, zero_based: bool, row_column: str, col_column: str,
                value_column: str | None, storage_options: Any = None) -> AppendOutcome:
    target = store if isinstance(store, MatrixStore) else open_matrix(store, storage_options=storage_options)
    check_source(target, src)
    stamp = check_append(target, timestamp)
    check_store_before_append(target)
    day_parts = [p for p in target.partitions if p.timestamp == stamp]
    if replace and not day_parts:
        raise InvalidParameterError(
            f"--replace: '{target.path}' has no partition stamped {timestamp!r}; append the day without --replace"
        )
    if replace:
        check_replaceable_day(target, day_parts, timestamp, ledger=ledger, dataset=dataset)
    options, tmp = _day_options(target, src, format, zero_based, row_column, col_column, value_column)
    try:
        from dppca_dask.ingest import ingest

        day = ingest(src, tmp, **options)  # declared width (or the store's column ids): checked by ingest
        block, labels, row_ids = _day_rows(target, day)
        if day_parts and _same_rows(target, day_parts, block, labels, row_ids):
            return AppendOutcome(target, "already-present")
        if day_parts and not replace:
            raise InvalidParameterError(
                f"'{target.path}' already has the day {timestamp!r} with other rows than '{src}'; to replace it "
                "append with --replace (replace=True), or give the file's own date"
            )
        if day_parts:
            from dppca_dask.storage import drop_tail_partitions

            drop_tail_partitions(target.path, [p.index for p in day_parts])
        appended = append_partition(target.path, block, timestamp=stamp, row_ids=row_ids, labels=labels,
                                    storage_options=target.storage_options)
        return AppendOutcome(appended, "replaced" if day_parts else "appended")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _day_options(target: MatrixStore, src: Any, format: str | None, zero_based: bool, row_column: str,
                 col_column: str, value_column: str | None) -> tuple[dict[str, Any], str]:
    """The ingest options that read ``src`` against ``target``'s schema, and the temporary store's path."""
    from dppca_dask.storage import _format

    group = target.open_group()
    has_labels = "labels" in group

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
    if is_url(target.path):  # a store in object storage: its day is read into a private local temporary
        return options, scratch_store_path(target.path)
    parent, name = os.path.split(target.path)
    remove_stale_appends(target.path)
    return options, os.path.join(parent, f".{name}.append-{uuid.uuid4().hex[:12]}-{os.getpid()}")


def _day_rows(target: MatrixStore, day: MatrixStore) -> tuple[Any, np.ndarray | None, np.ndarray | None]:
    """The day's rows (in the target's layout), labels and row ids, as they would be appended."""
    from dppca_dask.storage import _format

    group = target.open_group()
    block = day.to_scipy() if target.layout == "csr" else day.to_scipy().toarray()
    day_group = zarr.open_group(day.path, mode="r")
    labels = None
    if "labels" in group:
        if "labels" not in day_group:
            raise InvalidParameterError(
                f"'{target.path}' stores a label per row and the appended file has none; append a LIBSVM file "
                "with labels"
            )
        labels = np.asarray(cast(zarr.Array, day_group["labels"])[:], dtype=np.float64)
    row_ids = None
    if _format.locate(group, _format.ID_MAPS["obs_ids"]) is not None:  # the day's ids follow the store's
        day_ids = _format.locate(day_group, _format.ID_MAPS["obs_ids"])
        if day_ids is not None:
            row_ids = np.asarray(cast(zarr.Array, day_group[day_ids])[:])
    return block, labels, row_ids


def _same_rows(target: MatrixStore, parts: list[Any], block: Any, labels: np.ndarray | None,
               row_ids: np.ndarray | None) -> bool:
    """Whether the partitions ``parts`` of ``target`` hold exactly ``block`` (and its labels and row ids)."""
    import scipy.sparse as sp

    from dppca_dask.storage import _format

    stored = [target.read_partition(p.index) for p in parts]
    if target.layout == "csr":
        held = sp.csr_array(sp.vstack(stored, format="csr")) if stored else None
        new = sp.csr_array(block)
        if held is None or held.shape != new.shape or (held != new).nnz:
            return False
    else:
        held_dense = np.vstack(stored)
        if held_dense.shape != np.shape(block) or not np.array_equal(held_dense, block):
            return False
    rows = slice(parts[0].row_start, parts[-1].row_stop)
    group = target.open_group()
    if labels is not None and not np.array_equal(np.asarray(cast(zarr.Array, group["labels"])[rows]), labels):
        return False
    ids = _format.locate(group, _format.ID_MAPS["obs_ids"])
    if row_ids is not None and ids is not None:
        return bool(np.array_equal(np.asarray(cast(zarr.Array, group[ids])[rows]), row_ids))
    return True


def check_source(target: MatrixStore, src: Any) -> None:
    """Refuse a file that is the store itself, lies inside it or holds it: its rows would be appended to
    themselves (``append STORE STORE``)."""
    if hasattr(src, "shape"):
        return
    text = os.fspath(src) if isinstance(src, (str, os.PathLike)) else str(src)
    if "://" in text and not text.startswith("file://"):
        return
    here = os.path.realpath(text[len("file://"):] if text.startswith("file://") else text)
    store = os.path.realpath(target.path)
    if here == store or here.startswith(store + os.sep) or store.startswith(here.rstrip(os.sep) + os.sep):
        raise InvalidParameterError(
            f"'{text}' is the store '{target.path}' itself (or inside it, or holding it); append a file of new "
            "rows, not the store"
        )


def check_replaceable_day(target: MatrixStore, parts: list[Any], timestamp: Any, *, ledger: Any,
                          dataset: str | None) -> None:
    """A day can be replaced only when it is the newest-arrived (its partitions end the partition table) and,
    when a ledger is given, when nothing was charged to the dataset or to the day's partitions (once released, the
    day's rows are part of a published answer: changing them would make the ledger's account wrong)."""
    if parts[-1].index != target.n_partitions - 1 or [p.index for p in parts] != list(
            range(parts[0].index, target.n_partitions)):
        raise InvalidParameterError(
            f"--replace: the day {timestamp!r} of '{target.path}' is not the newest-arrived one (days were appended "
            "after it); only the last appended day can be replaced: re-ingest the store from its days"
        )
    if ledger is None:
        return
    if dataset is None:
        raise InvalidParameterError("--replace with a ledger needs its dataset key (--dataset NAME)")
    from dppca_dask.ledger import Ledger, describe_partition, partition_identities

    book = ledger if not isinstance(ledger, (str, os.PathLike)) else Ledger(os.fspath(ledger))
    if dataset not in set(book.datasets()):
        return  # nothing was ever reserved under this key
    for identity in partition_identities(target, [p.index for p in parts]):
        if book.counted_on(dataset, identity):  # charged or reserved on the day (or on every partition)
            raise InvalidParameterError(
                f"--replace: the day {timestamp!r} of '{target.path}' has been released (dataset '{dataset}' has "
                f"releases counted on {describe_partition(identity)}); a released day cannot be replaced: append "
                "corrections as a new day"
            )


def remove_stale_appends(path: str) -> list[str]:
    """Remove the temporary day stores (``.NAME.append-*``) that appends killed before their cleanup left beside
    the store ``path``; those of a running process (its pid in the name, still alive) are kept."""
    parent, name = os.path.split(os.path.realpath(path))
    removed: list[str] = []
    try:
        entries = os.listdir(parent)
    except OSError:
        return removed
    for entry in entries:
        if not entry.startswith(f".{name}.append-") or entry.endswith(".lock"):
            continue
        pid = entry.rsplit("-", 1)[-1]
        if pid.isdigit() and _alive(int(pid)):
            continue
        if not pid.isdigit() and time.time() - os.lstat(os.path.join(parent, entry)).st_mtime < 3600:
            continue  # an older release's name, without a pid: only when an hour old
        shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)
        removed.append(entry)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


#: How far after the present a day may be stamped (time zones ahead of UTC, clocks a little off).
FUTURE_SECONDS = 2 * 86400.0


def check_append(target: MatrixStore, timestamp: Any, *, now: float | None = None) -> float:
    """The checks of an append that read only the store's metadata and partition table (no file, no rows): a
    timestamp that is a real day (not NaN, not before 1970, not more than two days after ``now``), a dppca_dask
    store. Days may come in any order. Returns the timestamp in POSIX seconds."""
    import datetime as _dt

    from dppca_dask.methods.window.selection import parse_timestamp

    if timestamp is None:
        raise InvalidParameterError("append needs the time of the new rows: timestamp='2026-11-02' (--timestamp)")
    stamp = parse_timestamp(timestamp)
    moment = time.time() if now is None else now
    if stamp > moment + FUTURE_SECONDS:
        today = _dt.datetime.fromtimestamp(moment, tz=_dt.timezone.utc).date().isoformat()
        raise InvalidParameterError(
            f"timestamp {timestamp!r} is in the future (today is {today}, UTC); stamp the rows with the day they "
            "are from"
        )
    if stamp < 0:
        raise InvalidParameterError(f"timestamp {timestamp!r} is before 1970; stamp the rows with the day they are from")
    if target.format_version is None:
        raise InvalidParameterError(
            f"'{target.path}' is an AnnData store; appending needs a dppca_dask store: "
            f"`dppca-dask ingest {target.path} --out STORE`"
        )
    return stamp


def check_store_before_append(store: MatrixStore) -> None:
    """Refuse (:class:`~dppca_dask.errors.StoreCorruptError`, exit 2) to append to a damaged store, before anything
    is written: every file of the store a regular file (no symbolic link, no device: a chunk linked to
    ``/dev/zero`` would be read without end), its arrays of the stored types and long enough for the rows and
    entries the partition table claims (a table edited to 10⁹ rows), and every partition as ``info --check``
    verifies it (missing, truncated, NaN or out-of-range chunks). An append adds to a store that must be sound:
    rows appended to a damaged store are lost with it. The check reads the store once."""
    if not is_url(store.path):  # the files of a local store (object stores have no links or devices)
        _check_files(store.path)
    try:
        _check_arrays(store)
    except DppcaError:
        raise
    except Exception as exc:  # zarr refuses edited array metadata in its own words
        raise StoreCorruptError(
            f"the arrays of store '{store.path}' cannot be opened ({type(exc).__name__}); their metadata was edited "
            "or damaged: re-ingest the store from its source",
            source=store.path,
        ) from exc
    for part in store.partitions:
        try:
            store.verify_partition(part.index)
        except DppcaError:
            raise
        except Exception as exc:  # a chunk zarr cannot decode (truncated, garbage)
            raise StoreCorruptError(
                f"partition {part.index} of store '{store.path}' is damaged: a chunk cannot be decoded "
                f"({type(exc).__name__}); re-ingest the store from its source",
                source=store.path,
                partition=part.index,
            ) from exc


def _check_files(path: str) -> None:
    import stat

    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(root, name)
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                what = "a symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                raise StoreCorruptError(
                    f"'{os.path.relpath(full, path)}' in store '{path}' is {what}; a store holds only the files "
                    "ingest wrote: re-ingest the store from its source",
                    source=path,
                )


def _check_arrays(store: MatrixStore) -> None:
    """The arrays' types and lengths against the store's metadata (metadata only, no chunk read)."""
    from dppca_dask.storage import _format

    group = store.open_group()
    if store.layout == "csr":
        wanted = {"X/data": (store.nnz, np.dtype(store.dtype).kind), "X/indices": (store.nnz, "i"),
                  "X/indptr": (store.n_rows + 1, "i")}
    else:
        wanted = {"X": (store.n_rows, np.dtype(store.dtype).kind)}
    norms = _format.locate(group, _format.ROW_NORMS)
    if norms is not None:
        wanted[norms] = (store.n_rows, "f")
    for name, (length, kind) in wanted.items():
        array = group.get(name)
        if not isinstance(array, zarr.Array):
            raise StoreCorruptError(f"store '{store.path}' has no array '{name}'; re-ingest the store from its source",
                                    source=store.path)
        dtype = np.dtype(array.dtype)
        if dtype.kind != kind or (name in ("X/data", "X") and dtype != np.dtype(store.dtype)):
            raise StoreCorruptError(
                f"array '{name}' of store '{store.path}' holds {dtype} values, not the store's "
                f"{store.dtype if name in ('X/data', 'X') else 'kind ' + kind}; its metadata was edited: re-ingest "
                "the store from its source",
                source=store.path,
            )
        if int(array.shape[0]) < length:
            raise StoreCorruptError(
                f"array '{name}' of store '{store.path}' has {int(array.shape[0])} entries but the partition table "
                f"needs {length}; the table or the array was edited: re-ingest the store from its source",
                source=store.path,
            )
