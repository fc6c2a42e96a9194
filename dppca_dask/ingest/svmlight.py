"""LIBSVM / svmlight text files: ``LABEL [qid:Q] INDEX:VALUE INDEX:VALUE ... [# comment]``, one row per line.

The file is streamed in chunks of complete lines and parsed with vectorised numpy code (no Python loop over lines),
so memory stays bounded by a chunk plus one partition whatever the file size. Indices are 1-based as in LIBSVM
unless ``zero_based=True``. Blank lines and comment-only lines are not rows. Labels are ignored unless
``store_labels=True``, which stores them as the auxiliary array ``labels`` (8 bytes per row, kept in memory until
the end). ``qid:`` tokens are accepted and ignored. Files ending in ``.gz``, ``.bz2`` or ``.xz`` are decompressed on
the fly.

The number of columns is ``n_features`` when given; otherwise it is the largest index plus one, and the file is read
twice (a first pass finds the largest index; the store writer needs the number of columns before the first row).

Two parsers read the same chunks of complete lines and give the same rows: scikit-learn's compiled
``load_svmlight_file`` (given each chunk as a file of its own, so memory stays bounded by a chunk) and the
vectorised numpy parser here. A chunk that scikit-learn refuses or reads differently from this module's rules
(unsorted or repeated indices, ``qid:`` tokens, an index 0 in a 1-based file, values that are not finite, underscores
in numbers, carriage returns, ...) is parsed again by the numpy parser, which accepts it or names the line that is
wrong. ``parser="auto"`` (the default) is :data:`DEFAULT_PARSER`, the faster of the two as measured side by side by
``benchmarks/bench_ingest.py --svmlight`` on a 70 MB file generated from w8a: the numpy parser (scikit-learn's took
1.3× as long end to end, 1.2× parsing alone; its compiled loop still calls Python's ``float`` per value).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.errors import InvalidInputError
from dppca_dask.ingest import _text
from dppca_dask.ingest._common import IngestOptions, check_positive, default_workers, require_file, spread_small
from dppca_dask.storage import MatrixStore
from dppca_dask.storage._format import TARGET_PARTITION_BYTES

__all__ = ["DEFAULT_PARSER", "PARSERS", "ingest_svmlight"]

#: The values of ``parser``.
PARSERS = ("auto", "sklearn", "numpy")
#: The parser ``parser="auto"`` uses: the faster one in ``benchmarks/bench_ingest.py --svmlight``.
DEFAULT_PARSER = "numpy"

log = logging.getLogger(__name__)

_QID = re.compile(rb"(?<![^\s])qid:\S*")
#: Text that scikit-learn's parser reads by other rules than the numpy parser (one scan of a chunk).
_SKLEARN_DIFFERS = re.compile(rb"[_\r]|0[xX]|qid")
_COLON = 58
_SPACE = 32


@dataclass(frozen=True, slots=True)
class _Rows:
    """The rows parsed from one chunk of lines."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    labels: np.ndarray | None

    @property
    def n_rows(self) -> int:
        return int(self.indptr.size - 1)

    def max_index(self) -> int:
        return int(self.indices.max()) if self.indices.size else -1


def ingest_svmlight(
    path: str,
    options: IngestOptions,
    *,
    zero_based: bool = False,
    n_features: int | None = None,
    store_labels: bool = False,
    parser: str = "auto",
) -> MatrixStore:
    """Ingest a LIBSVM/svmlight file into a new CSR store (see the module docstring for the format).

    Parameters
    ----------
    path
        The text file (optionally ``.gz``/``.bz2``/``.xz`` compressed).
    options
        Output path and write options.
    zero_based
        Feature indices start at 0 (by default they start at 1, as in LIBSVM).
    n_features
        Number of columns; indices must be below it. Without it the file is read twice.
    store_labels
        Store the labels (first token of each line) as the array ``labels``.
    parser
        ``"auto"`` (:data:`DEFAULT_PARSER`), ``"sklearn"`` (scikit-learn's compiled parser, chunk by chunk) or
        ``"numpy"``: the same rows either way (see the module docstring).

    Raises
    ------
    InvalidInputError
        A malformed line, a non-numeric, NaN or infinite value, an index out of range, or a duplicate index under
        ``on_duplicate="reject"``; the message names the file, the line and the row.
    """
    path = require_file(path)
    check_positive("n_features", n_features)
    _check_partition_bound(path, options.rows_per_partition)
    parse = _chunk_parser(path, parser)
    start = time.perf_counter()
    n_rows: int | None = None
    if n_features is None:
        n_rows, max_index = 0, -1
        for rows in _parse_file(path, options, zero_based=zero_based, n_features=None, labels=False, desc="scan",
                                parse=parse):
            n_rows += rows.n_rows
            max_index = max(max_index, rows.max_index())
        if max_index < 0:
            raise InvalidInputError(
                f"no features in '{path}' ({n_rows} rows, no INDEX:VALUE pairs); pass n_features (--n-features) "
                "to store an all-zero matrix, or check the file",
                source=path,
            )
        n_features = max_index + 1
        log.info("%s: %d rows, %d features (first pass %.1f s)", path, n_rows, n_features,
                 time.perf_counter() - start)
    source = {"kind": "svmlight", "path": path, "zero_based": zero_based, "n_features": n_features}
    with options.writer(n_cols=n_features, dtype=options.value_dtype(np.float64), source=source,
                        n_rows=n_rows, rows_per_partition=_small_file_partition_rows(path, options, n_rows)) as writer:
        labels: list[np.ndarray] = []
        for rows in _parse_file(path, options, zero_based=zero_based, n_features=n_features,
                                labels=store_labels, desc="parse", parse=parse):
            block = sp.csr_array((rows.values, rows.indices, rows.indptr), shape=(rows.n_rows, n_features))
            writer.append(block, source=path)
            if rows.labels is not None:
                labels.append(rows.labels)
        if store_labels:
            writer.write_array("labels", np.concatenate(labels) if labels else np.zeros(0))
        store = writer.commit()
    log.info("ingested %s: %d x %d, %d entries, %d partitions in %.1f s", path, store.n_rows, store.n_cols,
             store.nnz, store.n_partitions, time.perf_counter() - start)
    return store


def _check_partition_bound(path: str, rows_per_partition: int | None) -> None:
    """With an explicit ``rows_per_partition``, refuse before writing a file whose lines would make more partitions
    than a store may have. Lines are counted only when the file's size allows that many (a row takes at least two
    bytes): one fast read, never for an ordinary ingest."""
    from dppca_dask.storage.writer import MAX_PARTITIONS, check_partition_count

    size = _text.text_size(path)
    if rows_per_partition is None or size is None or size // 2 <= MAX_PARTITIONS * rows_per_partition:
        return
    lines = 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(16 * 2**20), b""):
            lines += block.count(b"\n")
    check_partition_count(-(-lines // rows_per_partition), rows_per_partition=rows_per_partition, source=path)


def _small_file_partition_rows(path: str, options: IngestOptions, n_rows: int | None) -> int | None:
    """Rows per partition that spread a small file over the workers of a default cluster (``None``: let the writer
    choose, for files larger than a partition per worker, compressed files, or an explicit choice). The rows are
    counted by their lines (blank and comment lines count too: the partitions can only be fewer)."""
    if options.rows_per_partition is not None:
        return None
    size = _text.text_size(path)
    if n_rows is None:
        if size is None or size > TARGET_PARTITION_BYTES * default_workers():
            return None
        with open(path, "rb") as handle:
            n_rows = sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 24), b""))
    rows = spread_small(n_rows, n_rows or 1)
    return rows if rows < (n_rows or 0) else None


def _chunk_parser(path: str, parser: str) -> Any:
    """The chunk parser ``parser`` names (``"auto"``: :data:`DEFAULT_PARSER`)."""
    from dppca_dask.errors import InvalidParameterError

    if parser not in PARSERS:
        raise InvalidParameterError(f"parser must be one of {', '.join(PARSERS)}; got {parser!r}")
    if parser == "auto":
        parser = DEFAULT_PARSER
    if parser == "numpy":
        return _parse_chunk
    try:
        from sklearn.datasets import load_svmlight_file
    except ImportError:
        if parser == "sklearn":
            raise InvalidParameterError("parser='sklearn' needs scikit-learn; install it (pip install "
                                        "'dppca_dask[sklearn]') or use parser='numpy'") from None
        return _parse_chunk

    def parse(chunk: _text.TextChunk, **kwargs: Any) -> _Rows:
        rows = _parse_chunk_sklearn(chunk, load_svmlight_file, **kwargs)
        return rows if rows is not None else _parse_chunk(chunk, **kwargs)

    return parse


def _parse_chunk_sklearn(
    chunk: _text.TextChunk,
    load: Any,
    *,
    path: str,
    first_row: int,
    zero_based: bool,
    n_features: int | None,
    labels: bool,
) -> _Rows | None:
    """Parse a chunk with scikit-learn's ``load_svmlight_file``; ``None`` when the chunk must go to the numpy parser
    (scikit-learn refused it, or its rows would break a rule of this module: the numpy parser names the line)."""
    import io

    del path, first_row
    if _SKLEARN_DIFFERS.search(chunk.data) is not None:
        # Python's int() and float() read 1_0; scikit-learn drops any first feature starting with 'qid'; the
        # numpy parser has its own rules for these (and for carriage returns): it decides
        return None
    try:
        matrix, label_values = load(io.BytesIO(chunk.data), zero_based=True, dtype=np.float64)
    except (ValueError, OverflowError, TypeError):
        return None
    indptr = np.asarray(matrix.indptr, dtype=np.int64)
    index = np.asarray(matrix.indices, dtype=np.int64)
    values = np.asarray(matrix.data, dtype=np.float64)
    if not zero_based:
        index = index - 1
    if (index.size and (int(index.min()) < 0 or (n_features is not None and int(index.max()) >= n_features)
                        or int(index.max()) >= 2**53)) or not np.isfinite(values).all():
        return None
    if labels and not np.isfinite(label_values).all():
        return None
    if n_features is not None and n_features < 2**31:
        index = index.astype(np.int32)
    return _Rows(indptr, index, values, np.asarray(label_values, dtype=np.float64) if labels else None)


def _parse_file(
    path: str, options: IngestOptions, *, zero_based: bool, n_features: int | None, labels: bool, desc: str,
    parse: Any = None,
) -> Iterator[_Rows]:
    parse = parse or _parse_chunk
    first_row = 0
    with _text.open_binary(path) as handle, options.bar(total=_text.text_size(path), desc=desc, unit="B",
                                                        unit_scale=True) as bar:
        for chunk in _text.read_chunks(handle, path=path):
            rows = parse(chunk, path=path, first_row=first_row, zero_based=zero_based,
                         n_features=n_features, labels=labels)
            first_row += rows.n_rows
            bar.update(len(chunk.data))
            yield rows


def _parse_chunk(
    chunk: _text.TextChunk,
    *,
    path: str,
    first_row: int,
    zero_based: bool,
    n_features: int | None,
    labels: bool,
) -> _Rows:
    """Parse complete lines into CSR pieces; every check is vectorised and names the first bad line."""
    data = _text.strip_comments(chunk.data, b"#")
    if b"qid:" in data:
        data = _QID.sub(b"", data)
    tok = _text.tokenize(data, chunk.n_lines)
    n_tokens = int(tok.starts.size)
    if n_tokens == 0:
        return _Rows(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0) if labels else None)
    is_label = np.empty(n_tokens, dtype=bool)
    is_label[0] = True
    np.not_equal(tok.line[1:], tok.line[:-1], out=is_label[1:])
    row_of_token = np.cumsum(is_label) - 1
    n_rows = int(row_of_token[-1]) + 1

    def where(token: int) -> str:
        line, row = chunk.first_line + int(tok.line[token]), first_row + int(row_of_token[token])
        return f"line {line} (row {row}) of '{path}'"

    def fail(token: int, message: str) -> InvalidInputError:
        return InvalidInputError(message, source=path, row=first_row + int(row_of_token[token]))

    colons = np.bincount(np.searchsorted(tok.starts, np.flatnonzero(tok.buf == _COLON), side="right") - 1,
                         minlength=n_tokens)
    malformed = np.where(is_label, colons != 0, colons != 1)
    if malformed.any():
        t = int(np.flatnonzero(malformed)[0])
        if is_label[t]:
            raise fail(t, f"missing label at {where(t)}: the line starts with {tok.text(t)!r}; every row is "
                          "'LABEL INDEX:VALUE ...': add a label (any number) at the start of the line")
        raise fail(t, f"malformed feature {tok.text(t)!r} at {where(t)}; expected INDEX:VALUE: fix the line")
    is_pair = ~is_label
    label_bytes = tok.mask(is_label)

    label_values: np.ndarray | None = None
    if labels:
        label_values = _text.parse_numbers(np.where(label_bytes, tok.buf, _SPACE).astype(np.uint8), n_rows)
        if label_values is None:
            t = next(int(t) for t in np.flatnonzero(is_label) if not _text.is_number(tok.text(int(t))))
            raise fail(t, f"label {tok.text(t)!r} at {where(t)} is not a number; multi-label files cannot store "
                          "their labels: ingest without store_labels (--store-labels)")
        bad_labels = ~np.isfinite(label_values)
        if bad_labels.any():
            t = int(np.flatnonzero(is_label)[int(np.flatnonzero(bad_labels)[0])])
            raise fail(t, f"label {tok.text(t)!r} at {where(t)} is not finite; a stored label (a regression "
                          "target) must be a number: fix the label, or ingest without --store-labels")

    pairs = tok.buf.copy()
    pairs[label_bytes] = _SPACE
    pairs[pairs == _COLON] = _SPACE
    n_pairs = int(is_pair.sum())
    numbers = _text.parse_numbers(pairs, 2 * n_pairs)
    if numbers is None:
        t = next(int(t) for t in np.flatnonzero(is_pair)
                 if not all(_text.is_number(part) for part in tok.text(int(t)).split(":")))
        raise fail(t, f"malformed feature {tok.text(t)!r} at {where(t)}; expected INDEX:VALUE with an integer "
                      "index and a numeric value: fix the line")
    raw_index, values = numbers[0::2], numbers[1::2]
    pair_tokens = np.flatnonzero(is_pair)

    def first(bad: np.ndarray) -> int:
        return int(pair_tokens[int(np.flatnonzero(bad)[0])])

    bad = raw_index != np.floor(raw_index)
    if bad.any():
        t = first(bad)
        raise fail(t, f"feature index in {tok.text(t)!r} at {where(t)} is not an integer; fix the line")
    bad = raw_index >= 2.0**53  # beyond exact integers in float64 (and far beyond any width that fits in memory)
    if bad.any():
        t = first(bad)
        raise fail(t, f"feature index in {tok.text(t)!r} at {where(t)} is too large (indices must be below 2^53); "
                      "fix the line")
    index = raw_index.astype(np.int64) - (0 if zero_based else 1)
    bad = index < 0
    if bad.any():
        t = first(bad)
        if zero_based or raw_index[int(np.flatnonzero(bad)[0])] < 0:
            raise fail(t, f"negative feature index in {tok.text(t)!r} at {where(t)}; indices must be >= 0")
        raise fail(t, f"feature index 0 in {tok.text(t)!r} at {where(t)}; LIBSVM indices start at 1: pass "
                      "zero_based=True (--zero-based) for a file with 0-based indices")
    if n_features is not None:
        bad = index >= n_features
        if bad.any():
            t = first(bad)
            raise fail(t, f"feature index in {tok.text(t)!r} at {where(t)} is beyond n_features={n_features} "
                          f"(the {'largest index' if zero_based else 'largest 1-based index'} allowed is "
                          f"{n_features - (1 if zero_based else 0)}); pass a larger n_features or leave it unset")
    bad = ~np.isfinite(values)
    if bad.any():
        t = first(bad)
        raise fail(t, f"{tok.text(t)!r} at {where(t)}: NaN and infinite values are not allowed; remove or impute "
                      "them before ingesting")
    counts = np.bincount(row_of_token[is_pair], minlength=n_rows)
    indptr = np.zeros(n_rows + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    if n_features is not None and n_features < 2**31:
        index = index.astype(np.int32)
    return _Rows(indptr, index, values, label_values)
