"""Ingestion: turn matrices from files or memory into row-partitioned matrix stores, in bounded memory.

:func:`ingest` is the entry point (``dppca-dask ingest`` calls it). One module per source does the work:

- :mod:`~dppca_dask.ingest.svmlight`: LIBSVM/svmlight text, streamed and parsed with vectorised numpy code;
- :mod:`~dppca_dask.ingest.mtx`: Matrix Market, coordinate entries streamed in any order;
- :mod:`~dppca_dask.ingest.adata`: AnnData ``.zarr`` and ``.h5ad`` (the ``anndata`` extra);
- :mod:`~dppca_dask.ingest.parquet`: warehouse triplets ``(row_id, col_id, value)`` with sparse ids, out of core;
- :mod:`~dppca_dask.ingest.arrays`: scipy.sparse and numpy matrices, ``.npz`` and ``.npy`` files.

Every source validates as it goes (NaN and infinite values, indices, shapes, duplicates, the compressed structure of
sparse inputs before scipy trusts it, row norms that overflow float64) with errors that name the file, the line or
record, the partition and the row; a failed ingest leaves neither output nor temporary files. Declared sizes are
checked against the machine (or ``max_memory``/``max_disk``) before anything is written. SIGTERM and Ctrl-C stop
the writers and remove the temporaries; temporaries left by a killed process are removed by the next ingest to the
same output. Stores and temporaries are owner-only (0700/0600) unless ``DPPCA_DASK_FILE_MODE=umask``. ``overwrite``
replaces only a dppca_dask store or an empty directory. The store records whether its width was declared
(``n_features``, Parquet ``column_ids``) or inferred from the data (:attr:`~dppca_dask.storage.MatrixStore.schema`),
and how its chunks are compressed (``codec``: none by default, lz4 or zstd) and sized (``nnz_chunk``: larger by
default for a store written to object storage).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.errors import InvalidParameterError, StoreNotFoundError
from dppca_dask._urls import local_output
from dppca_dask.ingest._limits import SizeLimits, parse_size
from dppca_dask.ingest._common import IngestOptions, MissingExtraError, check_positive, require_file
from dppca_dask.storage import MatrixStore
from dppca_dask.storage._files import check_replaceable, make_directories, private_files
from dppca_dask.storage._format import CODECS, DEFAULT_CODEC, check_nnz_chunk
from dppca_dask.storage.validate import DuplicatePolicy

__all__ = ["FORMATS", "MissingExtraError", "detect_format", "ingest"]

#: Input formats of files, as ``--format`` names them.
FORMATS = ("svmlight", "mtx", "anndata", "parquet", "npz", "npy")

_EXTENSIONS = {
    ".svm": "svmlight",
    ".svmlight": "svmlight",
    ".libsvm": "svmlight",
    ".mtx": "mtx",
    ".h5ad": "anndata",
    ".zarr": "anndata",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".npz": "npz",
    ".npy": "npy",
}
_COMPRESSED = (".gz", ".bz2", ".xz")
_MAGIC = (
    (b"PAR1", "parquet"),
    (b"\x93NUMPY", "npy"),
    (b"PK\x03\x04", "npz"),
    (b"\x89HDF\r\n\x1a\n", "anndata"),
)


def detect_format(path: str | os.PathLike[str]) -> str:
    """Guess the input format of ``path`` from its extension, or else from its contents.

    Raises
    ------
    StoreNotFoundError
        ``path`` does not exist.
    InvalidParameterError
        The format cannot be told; pass it explicitly.
    """
    path = require_file(path)
    name = path.rstrip(os.sep).lower()
    stem = name
    for suffix in _COMPRESSED:
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
    extension = os.path.splitext(stem)[1]
    found = _EXTENSIONS.get(extension)
    if found is not None and (stem == name or found in ("svmlight", "mtx")):
        return found
    if stem == name:
        found = _sniff(path)
        if found is not None:
            return found
    raise InvalidParameterError(
        f"cannot tell the format of '{path}' from its name or contents; pass format= (--format) one of "
        f"{', '.join(FORMATS)}"
    )


def _sniff(path: str) -> str | None:
    if os.path.isdir(path):
        if os.path.exists(os.path.join(path, "zarr.json")) or os.path.exists(os.path.join(path, ".zgroup")):
            return "anndata"
        for _root, _dirs, files in os.walk(path):
            if any(f.endswith((".parquet", ".pq")) for f in files):
                return "parquet"
        return None
    with open(path, "rb") as handle:
        head = handle.read(4096)
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if head.lower().startswith(b"%%matrixmarket"):
        return "mtx"
    return "svmlight" if _looks_like_svmlight(head) else None


def _looks_like_svmlight(head: bytes) -> bool:
    """Whether the complete lines at the start of a file read as LIBSVM rows, at least one with a feature."""
    import re

    lines = head.splitlines()[:-1] if len(head) == 4096 else head.splitlines()
    rows = [line.split(b"#", 1)[0].strip() for line in lines]
    rows = [row for row in rows if row]
    pattern = re.compile(rb"[-+]?[\w.,]+(\s+qid:\S+)?(\s+\d+:\S+)*")
    return bool(rows) and all(pattern.fullmatch(row) for row in rows) and any(b":" in row for row in rows)


def ingest(
    src: Any,
    out: str | os.PathLike[str],
    *,
    format: str | None = None,
    rows_per_partition: int | None = None,
    dtype: Any = None,
    on_duplicate: DuplicatePolicy = "sum",
    overwrite: bool = False,
    progress: bool | None = None,
    zero_based: bool = False,
    n_features: int | None = None,
    store_labels: bool = False,
    row_column: str = "row_id",
    col_column: str = "col_id",
    value_column: str | None = "value",
    column_ids: Any = None,
    max_memory: int | str | None = None,
    max_disk: int | str | None = None,
    layer: str | None = None,
    timestamp: Any = None,
    codec: str = DEFAULT_CODEC,
    storage_options: Any = None,
    nnz_chunk: int | None = None,
) -> MatrixStore:
    """Ingest a matrix into a new store at ``out`` and open it.

    Parameters
    ----------
    src
        A file or directory (see ``format``), or an in-memory ``scipy.sparse`` matrix (CSR store) or 2-D numpy
        array (dense store).
    out
        Path of the new store (a zarr directory), or a URL in object storage (``s3://bucket/x.zarr``: built locally
        in a temporary directory, then uploaded with its root metadata last). It appears only when the ingest
        succeeds.
    format
        One of :data:`FORMATS`; by default guessed from the extension (``.svm``/``.svmlight``/``.libsvm``,
        ``.mtx``, optionally ``.gz``/``.bz2``/``.xz`` compressed; ``.zarr``/``.h5ad``; ``.parquet``; ``.npz``;
        ``.npy``) or else from the contents.
    rows_per_partition
        Rows per partition (one Dask task each); by default about 128 MB of stored data per partition.
    dtype
        ``float32`` or ``float64``; by default float32 sources stay float32 and everything else is float64.
    on_duplicate
        ``"sum"`` adds repeated (row, column) entries, ``"reject"`` refuses them. Summing changes a row's
        contribution, so it is a decision about the data: make it explicitly.
    overwrite
        Replace an existing store at ``out`` (the old one stays until the new one is complete).
    progress
        A progress bar on standard error: ``None`` (default) only when it is a terminal, or always / never.
    n_features
        The number of columns, declared as public input: the store's schema is then ``"declared"`` (see
        :attr:`~dppca_dask.storage.MatrixStore.schema`), otherwise ``"inferred"``. For svmlight it sets the width
        (default: the largest index, found by reading the file twice); for the other formats the input's width must
        equal it. For Parquet declare the column ids instead (``column_ids``).
    zero_based, store_labels
        svmlight only: indices start at 0 (default: 1, as LIBSVM); keep the labels as the array ``labels``.
    row_column, col_column, value_column
        parquet only: the columns holding the row id, the column id and the value; ``value_column=None`` gives
        every triplet the value 1.
    column_ids
        parquet only: the universe of column ids, declared as public input (a text file with one id per line, or a
        sequence): column ``j`` of the store is the ``j``-th smallest id, whether or not the table uses it, and a
        table id outside the universe is an error. The schema is then ``"declared"``.
    layer
        AnnData only: ingest ``layers/<layer>`` instead of ``X``.
    max_memory, max_disk
        Size sanity (bytes, or a size such as ``"64GiB"``): the declared shape is refused, before anything is
        written, when an analysis of it would need more working memory than ``max_memory`` (default: the machine's
        physical memory) or its store more disk than ``max_disk`` (default: the free space where it is written).
    timestamp
        Time of these rows (a date such as ``"2026-11-01"``, midnight UTC; an ISO time with a zone; an aware
        ``datetime``; POSIX seconds), written into every partition of the new store for time windows
        (:func:`dppca_dask.window`); later days are added with ``dppca-dask append``.
    codec
        How the store's chunks are compressed, recorded in the store (``dppca-dask info`` shows it; appends keep
        it): ``"none"`` (the default: the fastest to read, and every out-of-core step re-reads every partition),
        ``"lz4"`` (Blosc lz4: about 2.3x smaller on disk, a worker's read of a partition from the page cache about
        1.7x slower) or ``"zstd"`` (Blosc zstd: about 3.3x smaller, about 2.4x slower). A smaller store reads
        faster only from a disk slower than those reads (``dppca-dask ingest --help`` gives the measured rates).
        See :data:`dppca_dask.storage._format.CODECS`.
    nnz_chunk
        Stored entries per chunk of a sparse store's ``data`` and ``indices`` arrays (each chunk is one file, or one
        object in object storage), a whole number from 4096 (2**12) to 16777216 (2**24), recorded in the store
        (appends keep it). ``None`` (default): 262144 (2**18, 1 MiB of float32 values) on a file system, and
        2097152 (2**21, 8 MiB) for an output URL, where every chunk a read touches is one request and fewer,
        larger objects read faster (docs: *Running on several machines*).
    storage_options
        For an output URL: fsspec options of its file system (s3://: ``endpoint_url``, ``key``, ``secret``, ...);
        by default the environment and configuration files (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...).

    Returns
    -------
    MatrixStore
        The new store, opened.

    Raises
    ------
    StoreNotFoundError
        ``src`` does not exist.
    InvalidParameterError
        An invalid option, an option that does not apply to the format, an unknown format, ``out`` exists.
    InvalidInputError
        Invalid data; the message names the file, the line or record, the partition and the row.
    MissingExtraError
        The format needs an optional dependency that is not installed.

    Notes
    -----
    Memory stays bounded by about one partition plus one input batch for every source except ``.npz`` files, the
    Matrix Market ``array`` format and in-memory input, which are in memory anyway; see each source module.

    Examples
    --------
    An svmlight file of three rows; its width, 4 columns, is declared (public input):

    >>> import os, tempfile
    >>> import dppca_dask
    >>> tmp = tempfile.TemporaryDirectory()
    >>> src = os.path.join(tmp.name, "data.svm")
    >>> with open(src, "w") as f:
    ...     for row in ["1 1:0.5 3:0.25", "-1 2:1.0", "1 1:0.1 4:0.7"]:
    ...         print(row, file=f)
    >>> store = dppca_dask.ingest(src, os.path.join(tmp.name, "data.zarr"), n_features=4)
    >>> store.n_cols, store.schema
    (4, 'declared')
    >>> tmp.cleanup()
    """
    stamp = None
    if timestamp is not None:
        from dppca_dask.methods.window.selection import parse_timestamp

        stamp = parse_timestamp(timestamp)  # a bad time fails before anything is read
    from dppca_dask._urls import check_storage_options, is_url, local_path
    from dppca_dask.storage import _format

    options = check_storage_options(storage_options)
    if nnz_chunk is not None:
        nnz_chunk = _format.check_nnz_chunk(nnz_chunk)  # before anything is read or any request is made
    if is_url(local_path(out)):
        from dppca_dask.ingest._remote import ingest_to_url

        kwargs = dict(format=format, rows_per_partition=rows_per_partition, dtype=dtype, on_duplicate=on_duplicate,
                      progress=progress, zero_based=zero_based, n_features=n_features, store_labels=store_labels,
                      row_column=row_column, col_column=col_column, value_column=value_column,
                      column_ids=column_ids, max_memory=max_memory, max_disk=max_disk, layer=layer,
                      timestamp=timestamp, codec=codec,
                      nnz_chunk=_format.OBJECT_NNZ_CHUNK if nnz_chunk is None else nnz_chunk)
        return ingest_to_url(lambda local: ingest(src, local, **kwargs), os.fspath(out), options,  # type: ignore
                             overwrite=bool(overwrite))
    if options:
        raise InvalidParameterError(
            f"storage_options apply to an output URL (s3://, gs://, ...); '{os.fspath(out)}' is a local path: drop "
            "them")
    with terminate_cleanly():
        store = _ingest(src, out, format=format, rows_per_partition=rows_per_partition, dtype=dtype,
                       on_duplicate=on_duplicate, overwrite=overwrite, progress=progress, zero_based=zero_based,
                       n_features=n_features, store_labels=store_labels, row_column=row_column,
                       col_column=col_column, value_column=value_column, column_ids=column_ids,
                       max_memory=max_memory, max_disk=max_disk, layer=layer, codec=codec, nnz_chunk=nnz_chunk)
    if stamp is not None:
        from dppca_dask.storage.writer import stamp_partitions

        store = stamp_partitions(store.path, stamp)
    return store


@contextlib.contextmanager
def terminate_cleanly() -> Iterator[None]:
    """While ingesting in the main thread, turn SIGTERM into ``SystemExit(143)`` so that cleanup runs.

    By default SIGTERM kills the process at once, leaving temporary directories of raw data behind. Here it raises
    in the main thread instead: the writer stops, waits for zarr's pending writes and removes its temporaries, and
    the process exits with status 143 (128 + SIGTERM). Further SIGTERMs are ignored during that cleanup. A handler
    installed by the application (or an ignored SIGTERM) is left alone; SIGINT (Ctrl-C) already raises
    ``KeyboardInterrupt``. On the way out, however the ingest ends, SIGTERM is handled as it was before.
    """
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # let the cleanup finish
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _ingest(
    src: Any,
    out: str | os.PathLike[str],
    *,
    format: str | None,
    rows_per_partition: int | None,
    dtype: Any,
    on_duplicate: DuplicatePolicy,
    overwrite: bool,
    progress: bool | None,
    zero_based: bool,
    n_features: int | None,
    store_labels: bool,
    row_column: str,
    col_column: str,
    value_column: str | None,
    column_ids: Any,
    max_memory: int | str | None,
    max_disk: int | str | None,
    layer: str | None = None,
    codec: str = DEFAULT_CODEC,
    nnz_chunk: int | None = None,
) -> MatrixStore:
    from dppca_dask._urls import is_url, local_path

    src, out = local_path(src), local_path(out)  # file:// URLs are local paths
    if is_url(src):
        return _ingest_url(src, out, format=format, rows_per_partition=rows_per_partition, dtype=dtype,
                           on_duplicate=on_duplicate, overwrite=overwrite, progress=progress, zero_based=zero_based,
                           n_features=n_features, store_labels=store_labels, row_column=row_column,
                           col_column=col_column, value_column=value_column, column_ids=column_ids,
                           max_memory=max_memory, max_disk=max_disk, layer=layer, codec=codec,
                           nnz_chunk=nnz_chunk)
    in_memory = sp.issparse(src) or isinstance(src, np.ndarray)
    if format is not None and format not in FORMATS:
        raise InvalidParameterError(f"format must be one of {', '.join(FORMATS)}; got {format!r}")
    if in_memory and format is not None:
        raise InvalidParameterError(f"format applies to files; got format={format!r} with an in-memory matrix")
    check_positive("n_features", n_features)
    options = _options(out, rows_per_partition, dtype, on_duplicate, overwrite, progress, codec, nnz_chunk)
    if n_features is not None:
        options = dataclasses.replace(options, n_features=int(n_features))
    options = dataclasses.replace(options, limits=SizeLimits(
        max_memory=None if max_memory is None else parse_size(max_memory),
        max_disk=None if max_disk is None else parse_size(max_disk),
    ))
    if not in_memory:
        source = require_file(src)
        if os.path.abspath(source) == options.out:
            raise InvalidParameterError(f"the output '{options.out}' is the input; choose another output path")
        kind = format or detect_format(source)
    else:
        kind = "array"
    if os.path.lexists(options.out):
        check_replaceable(options.out)  # overwrite replaces only a dppca_dask store or an empty directory
    _check_format_options(
        kind,
        svmlight={"zero_based": zero_based is not False, "store_labels": store_labels is not False},
        parquet={"row_column": row_column != "row_id", "col_column": col_column != "col_id",
                 "value_column": value_column != "value", "column_ids": column_ids is not None},
        anndata={"layer": layer is not None},
    )
    if kind == "parquet" and n_features is not None and column_ids is None:
        raise InvalidParameterError(
            "n_features does not declare the columns of a Parquet table (its columns are the distinct column ids); "
            "declare the column ids instead: column_ids= (--column-ids FILE, one id per line)"
        )
    if kind == "array":
        from dppca_dask.ingest.arrays import ingest_array

        return ingest_array(src, options)
    if kind == "svmlight":
        from dppca_dask.ingest.svmlight import ingest_svmlight

        for name, flag in (("zero_based", zero_based), ("store_labels", store_labels)):
            if not isinstance(flag, bool):
                raise InvalidParameterError(f"{name} must be True or False; got {flag!r}")
        return ingest_svmlight(source, options, zero_based=zero_based, n_features=n_features,
                               store_labels=store_labels)
    if kind == "mtx":
        from dppca_dask.ingest.mtx import ingest_mtx

        return ingest_mtx(source, options)
    if kind == "anndata":
        from dppca_dask.ingest.adata import ingest_anndata

        return ingest_anndata(source, options, layer=layer)
    if kind == "parquet":
        try:
            from dppca_dask.ingest.parquet import ingest_parquet
        except ImportError as exc:
            if exc.name is None or exc.name.split(".", 1)[0] != "pyarrow":
                raise
            raise MissingExtraError(
                f"reading Parquet ('{source}') needs the optional dependency 'pyarrow', which is not installed; "
                "install it with `pip install 'dppca-dask[parquet]'`"
            ) from None

        return ingest_parquet(source, options, row_column=row_column, col_column=col_column,
                              value_column=value_column, column_ids=column_ids)
    from dppca_dask.ingest.arrays import ingest_npy, ingest_npz

    return ingest_npz(source, options) if kind == "npz" else ingest_npy(source, options)


def _ingest_url(src: str, out: str | os.PathLike[str], **kwargs: Any) -> MatrixStore:
    """Ingest an input given as a URL (``memory://``, ``s3://``, ...): it is copied, streaming, into a temporary
    directory beside the output (one more copy of the input on disk while ingest runs), ingested from there, and
    the copy removed. A scheme whose package is missing is named before anything is written."""
    import shutil
    import tempfile

    from dppca_dask._urls import filesystem

    fs, inner = filesystem(src)
    if not fs.exists(inner):
        raise StoreNotFoundError(f"input '{src}' does not exist; check the URL")
    _options(out, kwargs["rows_per_partition"], kwargs["dtype"], kwargs["on_duplicate"], kwargs["overwrite"],
             kwargs["progress"], kwargs["codec"],
             kwargs["nnz_chunk"])  # a bad output or option fails before anything is copied
    parent = os.path.dirname(os.path.abspath(os.fspath(out)))
    make_directories(parent)  # missing parents: owner-only unless configured otherwise
    spill = tempfile.mkdtemp(prefix=".dppca-input-", dir=parent)
    try:
        local = os.path.join(spill, os.path.basename(inner.rstrip("/")) or "input")
        fs.get(inner, local, recursive=fs.isdir(inner))
        return _ingest(local, out, **kwargs)
    finally:
        shutil.rmtree(spill, ignore_errors=True)


def _options(out: str | os.PathLike[str], rows_per_partition: int | None, dtype: Any, on_duplicate: str,
             overwrite: bool, progress: bool | None, codec: str = DEFAULT_CODEC,
             nnz_chunk: int | None = None) -> IngestOptions:
    """Validate the options every source shares, before anything is read."""
    check_positive("rows_per_partition", rows_per_partition)
    local_output(out)  # a URL other than file:// is refused
    if on_duplicate not in ("sum", "reject"):
        raise InvalidParameterError(f"on_duplicate must be 'sum' or 'reject'; got {on_duplicate!r}")
    stored = None
    if dtype is not None:
        try:
            stored = np.dtype(dtype)
        except TypeError:
            stored = None
        if stored is None or stored not in (np.dtype(np.float32), np.dtype(np.float64)):  # (None == float64)
            raise InvalidParameterError(f"dtype must be float32 or float64; got {dtype!r}")
    if progress not in (None, True, False):
        raise InvalidParameterError(f"progress must be None, True or False; got {progress!r}")
    if not isinstance(codec, str) or codec not in CODECS:
        raise InvalidParameterError(f"codec must be one of {', '.join(map(repr, CODECS))}; got {codec!r}")
    if nnz_chunk is not None:
        check_nnz_chunk(nnz_chunk)
    path = os.path.abspath(os.fspath(out))
    if os.path.lexists(path):
        if not overwrite:
            raise InvalidParameterError(
                f"'{path}' already exists; choose another output path or pass overwrite=True (--overwrite)"
            )
    private_files()  # a bad DPPCA_DASK_FILE_MODE fails here, before anything is read
    return IngestOptions(out=path, rows_per_partition=rows_per_partition, dtype=stored,
                         on_duplicate=on_duplicate,  # type: ignore[arg-type]
                         overwrite=bool(overwrite), progress=progress, codec=codec,
                         nnz_chunk=None if nnz_chunk is None else int(nnz_chunk))


def _check_format_options(kind: str, **used: dict[str, bool]) -> None:
    for owner, options in used.items():
        if owner == kind:
            continue
        for name, given in options.items():
            if given:
                raise InvalidParameterError(
                    f"{name} applies only to {owner} input; the input is {kind}: drop it, or pass format='{owner}' "
                    f"(--format {owner}) if the input is {owner}"
                )
