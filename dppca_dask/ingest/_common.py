"""What every ingestion source shares: the write options, partition sizing, progress, and the spill directory."""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from dppca_dask._progress import progress_bar
from dppca_dask.errors import InvalidInputError, InvalidParameterError, MissingExtraError, StoreNotFoundError
from dppca_dask.ingest._limits import SizeLimits
from dppca_dask.storage import StoreWriter
from dppca_dask.storage import _format
from dppca_dask.storage._files import (
    make_directories,
    mark_owner,
    private_files,
    remove_stale_temporaries,
    remove_tree,
)
from dppca_dask.storage.validate import DuplicatePolicy

__all__ = [
    "IngestOptions",
    "MissingExtraError",
    "check_positive",
    "partition_rows",
    "require_file",
    "spill_directory",
]

Layout = Literal["csr", "dense"]


@dataclass(frozen=True, slots=True)
class IngestOptions:
    """Options that every source passes to the store writer (validated once, by :func:`dppca_dask.ingest.ingest`)."""

    out: str
    """Absolute path of the store to create."""
    rows_per_partition: int | None = None
    """Rows per partition; ``None`` for partitions of about 128 MB."""
    dtype: np.dtype[Any] | None = None
    """Stored value type; ``None`` keeps float32 sources in float32 and stores everything else as float64."""
    on_duplicate: DuplicatePolicy = "sum"
    """What to do with repeated (row, column) entries: add them up, or reject the input."""
    overwrite: bool = False
    """Replace an existing store at ``out`` (only once the new one is complete)."""
    progress: bool | None = None
    """``None``: a progress bar when standard error is a terminal; ``True``/``False``: always / never."""
    n_features: int | None = None
    """The number of columns declared by the data owner (public input), or ``None`` to infer it from the data."""
    limits: SizeLimits = SizeLimits()
    """Largest working memory and disk footprint the declared shape may need (default: what the machine has)."""
    codec: str = _format.DEFAULT_CODEC
    """How the store's chunks are compressed (one of :data:`dppca_dask.storage._format.CODECS`), recorded in it."""
    nnz_chunk: int | None = None
    """Stored entries per chunk of ``data`` and ``indices``; ``None``: :data:`dppca_dask.storage._format.NNZ_CHUNK`."""

    def check_size(self, *, n_rows: int | None, n_cols: int, nnz: int | None = None, layout: Layout = "csr",
                   value_bytes: int = 8, source: object = "the input", so_far: bool = False) -> None:
        """Refuse a shape whose store or analysis would not fit (:class:`SizeLimits`), before anything is written
        (``so_far``: the part of a streamed input written so far)."""
        self.limits.check(out=self.out, n_rows=n_rows, n_cols=n_cols, nnz=nnz, layout=layout,
                          value_bytes=value_bytes, source=source, so_far=so_far)

    @property
    def schema(self) -> Literal["declared", "inferred"]:
        """``"declared"`` when the number of columns was given, else ``"inferred"`` (recorded in the store)."""
        return "declared" if self.n_features is not None else "inferred"

    def check_width(self, n_cols: int, *, source: object) -> None:
        """Refuse a matrix whose width differs from the declared ``n_features``, before anything is written."""
        if self.n_features is not None and int(n_cols) != self.n_features:
            raise InvalidInputError(
                f"'{source}' has {int(n_cols)} columns but n_features={self.n_features} (--n-features) was declared; "
                "declare the matrix's true number of columns, or fix the input",
                source=source,
            )

    def value_dtype(self, source_dtype: Any) -> np.dtype[Any]:
        """The stored dtype for values read as ``source_dtype``."""
        if self.dtype is not None:
            return self.dtype
        return np.dtype(np.float32) if np.dtype(source_dtype) == np.float32 else np.dtype(np.float64)

    def bar(self, *, total: int | None, desc: str, unit: str = "it", unit_scale: bool = False) -> Any:
        """A progress bar (a disabled one unless on a terminal or ``progress=True``)."""
        enabled = None if self.progress is None else bool(self.progress)
        return progress_bar(total=total, desc=desc, unit=unit, enabled=enabled, unit_scale=unit_scale)

    @contextlib.contextmanager
    def writer(
        self,
        *,
        n_cols: int,
        dtype: np.dtype[Any],
        source: Mapping[str, Any],
        n_rows: int | None = None,
        layout: Layout = "csr",
        rows_per_partition: int | None = None,
        nnz: int | None = None,
    ) -> Iterator[StoreWriter]:
        """A :class:`StoreWriter` for ``out`` with a progress bar counting written rows; aborted on any error.

        The declared width and size are checked first (:meth:`check_width`, :meth:`check_size`).
        """
        rpp = rows_per_partition if rows_per_partition is not None else self.rows_per_partition
        if n_rows is not None and rpp is not None:
            from dppca_dask.storage.writer import check_partition_count

            check_partition_count(-(-int(n_rows) // max(int(rpp), 1)), rows_per_partition=rpp,
                                  source=source.get("path", "the input"))
        self.check_width(n_cols, source=source.get("path", "the input"))
        self.check_size(n_rows=n_rows, n_cols=n_cols, nnz=nnz, layout=layout, value_bytes=np.dtype(dtype).itemsize,
                        source=source.get("path", "the input"))
        # A streamed input (svmlight with a declared width, Parquet) has no size before it is read: an explicit
        # max_disk is then checked as each partition is written (the store is removed when it is exceeded)
        streamed = self.limits.max_disk is not None and (n_rows is None or (layout == "csr" and nnz is None))
        with self.bar(total=n_rows, desc="write", unit="rows") as bar:
            written = [0]
            opened: list[StoreWriter] = []

            def advance(rows: int) -> None:
                bar.update(rows - written[0])
                written[0] = rows
                if streamed and opened:
                    self.check_size(n_rows=rows, n_cols=n_cols, nnz=opened[0].nnz_written, layout=layout,
                                    value_bytes=np.dtype(dtype).itemsize, source=source.get("path", "the input"),
                                    so_far=True)

            with StoreWriter(
                self.out,
                n_cols=n_cols,
                dtype=dtype,
                layout=layout,
                rows_per_partition=rpp,
                on_duplicate=self.on_duplicate,
                overwrite=self.overwrite,
                source=dict(source),
                progress=advance,
                schema=self.schema,
                codec=self.codec,
                nnz_chunk=self.nnz_chunk,
            ) as writer:
                opened.append(writer)
                yield writer


def require_file(path: str | os.PathLike[str]) -> str:
    """The absolute path of an existing input file or directory, or :class:`StoreNotFoundError`."""
    text = os.fspath(path)
    if not os.path.exists(text):
        raise StoreNotFoundError(f"input '{text}' does not exist; check the path")
    import stat

    mode = os.stat(text).st_mode
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):  # /dev/zero, /dev/urandom: endless, never a data file
        raise InvalidParameterError(
            f"input '{text}' is a device, not a file; ingest reads files and directories: give the data file"
        )
    return os.path.abspath(text)


#: A small store is split so that each worker of a default cluster gets a partition, but never into partitions of
#: fewer rows than this (tasks of a few rows cost more in scheduling than they save).
MIN_SPLIT_ROWS = 4096


def default_workers() -> int:
    """Workers of the default embedded cluster: Dask's ``dppca_dask.cluster.n-workers``, else
    ``dask.system.CPU_COUNT``."""
    import dask.config
    from dask.system import CPU_COUNT

    configured = dask.config.get("dppca_dask.cluster.n-workers", default=None)
    return max(int(configured or CPU_COUNT), 1)


def spread_small(n_rows: int | None, rows: int) -> int:
    """Rows per partition, at most ``rows``, so that ``n_rows`` rows make at least one partition per default worker
    when they can without partitions below :data:`MIN_SPLIT_ROWS` rows (a store that fits in one 128 MB partition
    would otherwise keep one worker busy and the others idle)."""
    if not n_rows or n_rows <= MIN_SPLIT_ROWS:
        return rows
    return min(rows, max(math.ceil(n_rows / default_workers()), MIN_SPLIT_ROWS))


def partition_rows(*, n_rows: int, row_bytes: float, rows_per_partition: int | None = None) -> int:
    """Rows per partition, for sources that must fix the partitioning before the first row is written.

    Sources that bucket entries by row partition use this; the others let the :class:`StoreWriter` choose from the
    first rows it sees. ``row_bytes`` is the average stored size of a row as the writer counts it (values and column
    indices; 16 bytes of row pointer and norm are added here). Partitions aim at 128 MB; large row counts are
    rounded up to a multiple of the row-chunk size as the writer would round them, so that each bucket becomes
    exactly one partition. A small matrix is split among the workers of a default cluster (:func:`spread_small`).
    """
    if rows_per_partition is not None:
        rows = int(rows_per_partition)
    else:
        rows = spread_small(n_rows, max(int(_format.TARGET_PARTITION_BYTES // (max(row_bytes, 0.0) + 16)), 1))
    if rows > _format.MAX_ROW_CHUNK:
        rows = math.ceil(rows / _format.LARGE_ROW_CHUNK) * _format.LARGE_ROW_CHUNK
    return rows


@contextlib.contextmanager
def spill_directory(out: str) -> Iterator[str]:
    """A hidden temporary directory beside ``out`` (same file system), removed on exit even after an error."""
    parent, name = os.path.split(os.path.abspath(out))
    make_directories(parent or ".")  # missing parents: owner-only unless configured otherwise
    remove_stale_temporaries(out)
    path = tempfile.mkdtemp(prefix=f".{name}.spill-", dir=parent or ".")  # 0700
    if not private_files():
        os.chmod(path, 0o777 & ~_umask())
    mark_owner(path)
    try:
        yield path
    finally:
        remove_tree(path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_positive(name: str, value: int | None) -> None:
    """Raise :class:`InvalidParameterError` unless ``value`` is ``None`` or an integer >= 1."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1):
        raise InvalidParameterError(f"{name} must be an integer >= 1; got {value!r}")
