"""The window Gram matrix on Dask: one exact kernel per partition of the window, tree-reduced at the coordinator.

The request :class:`WindowGram` is registered with the coordinator (and so with the in-process executor); the
partition source of a window holds only the window's partitions, so a nightly release reads (and preflights) only
the rows it releases.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from dppca_dask.coordinator.driver import StepPlan, register_request
from dppca_dask.coordinator.sources import PartitionData, PartitionSource, load_store_partition
from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.kernels.gram import window_gram
from dppca_dask.methods.window.selection import WindowSelection
from dppca_dask.storage import MatrixStore

__all__ = ["LABELS_ARRAY", "WindowGram", "beside_store", "check_labels", "check_private_directory",
           "dense_dim_error", "load_cached_gram", "read_state", "state_exists", "window_source",
           "write_private_file"]

#: Name of the auxiliary per-row array holding regression labels (``ingest(..., store_labels=True)``).
LABELS_ARRAY = "labels"


@dataclass(frozen=True)
class WindowGram:
    """Dense ``Σ a'ᵀa'`` over the window's rows, clipped to ``row_norm_bound`` (with the label column appended)."""

    row_norm_bound: float
    row_ranges: Mapping[int, tuple[int, int] | None]
    """Store partition index → local row range inside the window (``None``: the whole partition)."""
    labels: tuple[Any, Mapping[int, int]] | None = None
    """``(store, {partition index: first row})`` when the label column is appended, else ``None``."""
    dim: int = field(default=0)
    """Side of the aggregate (d, or d + 1 with labels)."""


def _read_labels(where: Any, start: int, stop: int) -> np.ndarray:
    """Labels of rows ``[start, stop)`` of ``where``: a store (local or at a URL, with its storage options) or a
    store's path."""
    import zarr

    group = where.open_group() if isinstance(where, MatrixStore) else zarr.open_group(where, mode="r")
    path = where.path if isinstance(where, MatrixStore) else where
    labels = cast(zarr.Array, group[LABELS_ARRAY])
    values = np.asarray(labels[start:stop], dtype=np.float64)
    if values.shape != (stop - start,):
        raise InvalidInputError(
            f"the labels array of '{path}' has no values for rows {start}..{stop - 1}; store labels for every row "
            "(ingest --store-labels, and append files with labels)"
        )
    if not np.isfinite(values).all():
        bad = start + int(np.argmax(~np.isfinite(values)))
        raise InvalidInputError(f"the label of row {bad} in '{path}' is NaN or infinite; fix it and re-ingest",
                                row=bad)
    return values


def _window_gram_task(
    item: Any,
    *,
    row_norm_bound: float,
    row_ranges: Mapping[int, tuple[int, int] | None],
    labels: tuple[Any, Mapping[int, int]] | None,
) -> np.ndarray:
    if isinstance(item, PartitionData):
        part = item
    else:
        loader, args = item
        part = loader(*args)
    rows = row_ranges[part.index]
    y = None
    if labels is not None:
        path, starts = labels
        lo, hi = rows if rows is not None else (0, int(part.block.shape[0]))
        y = _read_labels(path, starts[part.index] + lo, starts[part.index] + hi)
    return window_gram(part.block, part.norms, rows=rows, row_norm_bound=row_norm_bound, labels=y)


def _sum(*parts: np.ndarray) -> np.ndarray:
    out = np.array(parts[0], dtype=np.float64, copy=True)
    for p in parts[1:]:
        out += p
    return out


register_request(
    WindowGram,
    lambda r: StepPlan(
        _window_gram_task,
        {"row_norm_bound": r.row_norm_bound, "row_ranges": dict(r.row_ranges), "labels": r.labels},
        None,
        _sum,
        empty=lambda d: np.zeros((r.dim, r.dim)),
    ),
)


def window_source(store: MatrixStore, selection: WindowSelection) -> PartitionSource:
    """A partition source holding only the window's partitions (their loaders read them from the store)."""
    parts = [store.partitions[i] for i in selection.partitions]
    if store.layout == "csr":
        nbytes = sum(p.nnz * 12 + p.n_rows * 16 for p in parts)
    else:
        nbytes = sum(p.n_rows * store.n_cols * 8 for p in parts)
    return PartitionSource(
        n_rows=sum(p.n_rows for p in parts),
        n_cols=store.n_cols,
        n_partitions=len(parts),
        nbytes=int(nbytes),
        loaders=tuple((load_store_partition, (store, p.index)) for p in parts),
        description={"kind": "store", "fingerprint": store.fingerprint, "format_version": store.format_version,
                     "schema": store.schema, "window": selection.to_dict()},
        store=store,
    )


def check_labels(store: MatrixStore, selection: WindowSelection) -> tuple[MatrixStore, dict[int, int]]:
    """The labels argument of :class:`WindowGram`, after checking that the store has labels (no values read)."""
    import zarr

    group = store.open_group()
    if LABELS_ARRAY not in group:
        raise InvalidParameterError(
            f"regression needs a label per row, and '{store.path}' has no '{LABELS_ARRAY}' array; ingest with "
            "store_labels=True (--store-labels, LIBSVM input), or use task='covariance' or 'pca'"
        )
    labels = cast(zarr.Array, group[LABELS_ARRAY])
    if np.dtype(labels.dtype).kind not in "biuf":
        raise InvalidInputError(
            f"the '{LABELS_ARRAY}' array of '{store.path}' holds {np.dtype(labels.dtype)} values, not numbers; store "
            "numeric labels (ingest --store-labels from LIBSVM input)", source=store.path)
    length = int(labels.shape[0])
    last = max(store.partitions[i].row_stop for i in selection.partitions)
    if length < last:
        raise InvalidParameterError(
            f"the '{LABELS_ARRAY}' array of '{store.path}' does not cover every row of the window (appended rows "
            "without labels); append files with labels, or use task='covariance' or 'pca'"
        )
    return store, {i: store.partitions[i].row_start for i in selection.partitions}


def dense_dim_error(dim: int, max_dense_dim: int) -> InvalidParameterError | None:
    """The refusal of a window whose dense ``dim×dim`` Gram exceeds ``max_dense_dim`` (with the memory it needs)."""
    if dim <= max_dense_dim:
        return None
    need = 4 * dim * dim * 8
    return InvalidParameterError(
        f"a window release forms a dense {dim}x{dim} matrix (about {need / 2**30:.1f} GiB with its workspace); "
        f"d={dim} exceeds max_dense_dim={max_dense_dim}; raise max_dense_dim if the coordinator has the memory, "
        "or use a low-rank mechanism (dppca_dask.pca)"
    )


@dataclass(frozen=True)
class PartitionGrams:
    """Each listed partition's own Gram (not summed): ``{partition index: d'×d' Gram}``, for the histogram."""

    row_norm_bound: float
    partitions: tuple[int, ...]
    labels: tuple[Any, Mapping[int, int]] | None = None
    row_ranges: Mapping[int, tuple[int, int] | None] | None = None
    """Local row ranges (a row window's cut partition); ``None``: whole partitions."""


def _partition_gram_task(
    item: Any,
    *,
    row_norm_bound: float,
    labels: tuple[Any, Mapping[int, int]] | None,
    row_ranges: Mapping[int, tuple[int, int] | None] | None = None,
) -> dict[int, np.ndarray]:
    part = item if isinstance(item, PartitionData) else item[0](*item[1])
    rows = None if row_ranges is None else row_ranges.get(part.index)
    gram = _window_gram_task(part, row_norm_bound=row_norm_bound, row_ranges={part.index: rows}, labels=labels)
    return {part.index: gram}


def _union(*parts: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    out: dict[int, np.ndarray] = {}
    for p in parts:
        out.update(p)
    return out


register_request(
    PartitionGrams,
    lambda r: StepPlan(
        _partition_gram_task,
        {"row_norm_bound": r.row_norm_bound, "labels": r.labels,
         "row_ranges": None if r.row_ranges is None else dict(r.row_ranges)},
        None,
        _union,
        empty=lambda d: {},
    ),
)


def beside_store(store_path: str, suffix: str) -> str:
    """Where a store's window state ``suffix`` is kept, beside the store: ``.NAME.<suffix>`` in its directory,
    named from its real path (links resolved, so that every path to one store finds one state); for a store in
    object storage, the same name beside it in its bucket (``s3://bucket/.x.zarr.<suffix>``)."""
    from dppca_dask._urls import is_url

    if is_url(store_path):
        parent, _, base = store_path.rstrip("/").rpartition("/")
        return f"{parent}/.{base}.{suffix}"
    parent, base = os.path.split(os.path.realpath(store_path))
    return os.path.join(parent, f".{base}.{suffix}")


def join_state(directory: str, name: str) -> str:
    """``name`` inside the state ``directory`` (a local directory, or a prefix in object storage)."""
    from dppca_dask._urls import is_url

    return f"{directory.rstrip('/')}/{name}" if is_url(directory) else os.path.join(directory, name)


def cache_directory(store: MatrixStore) -> str:
    """Directory of the per-partition Gram cache beside the store (owner-only: the Grams are as sensitive as the
    rows; in object storage: objects beside the store in its bucket, the store's access); named from the store's
    real path (links resolved), so that every path to one store finds one cache."""
    return beside_store(store.path, "window-grams")


def state_exists(path: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether the state file (or object, read with the store's storage ``options``) ``path`` exists."""
    from dppca_dask._urls import is_url

    if is_url(path):
        from dppca_dask.storage._remote import object_exists

        return object_exists(path, options)
    return os.path.exists(path)


def read_state(path: str, options: Mapping[str, Any] | None = None) -> bytes:
    """The bytes of the state file (or object) ``path`` (``OSError`` when it cannot be read)."""
    from dppca_dask._urls import is_url

    if is_url(path):
        from dppca_dask.storage._remote import read_object

        return read_object(path, options)
    with open(path, "rb") as fh:
        return fh.read()


def check_private_directory(path: str, *, create: bool = False) -> None:
    """Refuse a directory for exact Grams that another user could write into or read (created owner-only when
    ``create`` and missing).

    The Gram cache and the spectral histogram are written beside the store, where a directory of that name may
    already exist: one that is a symbolic link, belongs to another user, or (owner-only files, the default) is
    writable or readable by others would let them read the exact Grams or swap the files written into it.
    """
    import stat

    from dppca_dask._urls import is_url
    from dppca_dask.storage._files import make_private_directory, private_files

    if is_url(path):  # objects beside a store in its bucket: who reads the store reads them (the same access)
        return

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        if create:
            make_private_directory(path)
        return
    problem = None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        problem = "is not a directory (or is a symbolic link)"
    elif hasattr(os, "getuid") and info.st_uid != os.getuid():
        problem = "belongs to another user"
    elif private_files() and info.st_mode & 0o077:
        problem = f"is not owner-only (mode {stat.S_IMODE(info.st_mode):o})"
    if problem is not None:
        raise InvalidParameterError(
            f"'{path}' holds exact Gram matrices, as sensitive as the rows, and {problem}; remove it (it is "
            "re-created owner-only) or make it owner-only (chmod 700)"
        )


def write_private_file(path: str, write: Any, options: Mapping[str, Any] | None = None) -> None:
    """Write ``path`` through ``write(fh)`` into a fresh owner-only temporary beside it (never through a link,
    never into an existing file), then move it into place; an object in object storage (written with the store's
    storage ``options``) is written whole by one PUT."""
    from dppca_dask._urls import is_url

    if is_url(path):
        import io

        from dppca_dask.storage._remote import write_object

        buffer = io.BytesIO()
        write(buffer)
        write_object(path, buffer.getvalue(), options)
        return
    tmp = path + ".partial"
    try:
        os.unlink(tmp)  # a temporary left by a killed run
    except FileNotFoundError:
        pass
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    with open(os.open(tmp, flags, 0o600), "wb") as fh:
        write(fh)
    os.replace(tmp, path)


def load_cached_gram(path: str, dim: int, options: Mapping[str, Any] | None = None) -> np.ndarray:
    """A cached Gram, checked: a ``dim×dim`` finite float array (anything else is a damaged cache)."""
    import io

    from dppca_dask.errors import StoreCorruptError

    try:
        gram = np.load(io.BytesIO(read_state(path, options)), allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise StoreCorruptError(f"the cached Gram '{path}' cannot be read ({type(exc).__name__}); delete it to "
                                "read the partition again", source=path) from None
    if gram.shape != (dim, dim) or gram.dtype.kind != "f" or not np.isfinite(gram).all():
        raise StoreCorruptError(f"the cached Gram '{path}' is not a finite {dim}x{dim} matrix; delete it to read "
                                "the partition again", source=path)
    return np.asarray(gram, dtype=np.float64)


def cache_file(store: MatrixStore, index: int, row_norm_bound: float, labels: bool) -> str:
    """The cached Gram of one whole partition, keyed by the store's random id, the bound and the label column."""
    tag = f"{store.store_id}-p{int(index)}-c{float(row_norm_bound)!r}-{'y' if labels else 'x'}.npy"
    return join_state(cache_directory(store), tag)


def partitions_source(store: MatrixStore, partitions: tuple[int, ...], description: Mapping[str, Any]
                      ) -> PartitionSource:
    """A source of the listed partitions only."""
    sel = WindowSelection("time", "", "", partitions, (None,) * len(partitions))
    source = window_source(store, sel)
    return PartitionSource(source.n_rows, source.n_cols, source.n_partitions, source.nbytes, source.loaders,
                           dict(description), store)
