"""Vectorised parsing of whitespace-separated numeric text (LIBSVM and Matrix Market), chunk by chunk.

A file is read in chunks of complete lines (a few MiB each, so memory stays bounded whatever the file size).
Each chunk is tokenised with numpy byte masks and its numbers are parsed in one C call, with no Python loop over
lines; only when a chunk is malformed is it scanned line by line, to name the offending line in the error.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, cast

import numpy as np

from dppca_dask.errors import InvalidInputError

__all__ = [
    "TextChunk",
    "Tokens",
    "is_number",
    "parse_rows",
    "open_binary",
    "parse_numbers",
    "read_chunks",
    "strip_comments",
    "text_size",
    "tokenize",
]

#: Bytes of text read at a time. Parsing holds about 20 bytes of temporary arrays per byte of text.
CHUNK_BYTES = 4 * 2**20

_WHITESPACE = np.zeros(256, dtype=bool)
_WHITESPACE[list(b" \t\r\n\v\f")] = True


def open_binary(path: str) -> IO[bytes]:
    """Open a file for binary reading, decompressing ``.gz``, ``.bz2`` and ``.xz`` files on the fly."""
    lower = path.lower()
    if lower.endswith(".gz"):
        return cast(IO[bytes], gzip.open(path, "rb"))
    if lower.endswith(".bz2"):
        return bz2.open(path, "rb")
    if lower.endswith(".xz"):
        return lzma.open(path, "rb")
    return open(path, "rb")


def text_size(path: str) -> int | None:
    """Bytes of text in the file (for a progress total), or ``None`` for compressed files."""
    return None if path.lower().endswith((".gz", ".bz2", ".xz")) else os.path.getsize(path)


@dataclass(frozen=True, slots=True)
class TextChunk:
    """Complete lines of a text file."""

    data: bytes
    """The lines, each ending with a newline."""
    first_line: int
    """1-based line number of the first line in the file."""
    n_lines: int
    """Number of lines in ``data``."""


def read_chunks(handle: IO[bytes], *, first_line: int = 1, chunk_bytes: int | None = None,
                path: str = "the input") -> Iterator[TextChunk]:
    """Yield the rest of ``handle`` in chunks of complete lines (a missing final newline is added).

    A NUL byte is refused where it is read (:class:`~dppca_dask.errors.InvalidInputError` naming ``path`` and the
    line): no text format holds one, and a file of NUL bytes (a pre-allocated or zeroed file, ``/dev/zero``) would
    otherwise read as empty lines, or as one endless line."""
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    carry = b""
    line = first_line
    while True:
        block = handle.read(chunk_bytes)
        if not block:
            break
        nul = block.find(b"\0")
        if nul >= 0:
            at = line + carry.count(b"\n") + block.count(b"\n", 0, nul)
            raise InvalidInputError(
                f"'{path}' holds a NUL byte at line {at}: it is not a text file (LIBSVM and Matrix Market files are "
                "text); check that it is the file meant, not a zeroed, truncated or binary one",
                source=path,
            )
        if carry:
            block = carry + block
        cut = block.rfind(b"\n")
        if cut < 0:
            carry = block
            continue
        data, carry = block[: cut + 1], block[cut + 1 :]
        n = data.count(b"\n")
        yield TextChunk(data, line, n)
        line += n
    if carry.strip():
        yield TextChunk(carry + b"\n", line, 1)


def strip_comments(data: bytes, marker: bytes) -> bytes:
    """Remove everything from ``marker`` to the end of its line (newlines stay, so line numbers do not move)."""
    if marker not in data:
        return data
    return re.sub(re.escape(marker) + rb"[^\n]*", b"", data)


@dataclass(frozen=True, slots=True)
class Tokens:
    """The whitespace-separated tokens of a chunk of lines."""

    buf: np.ndarray
    """The chunk as a writable ``uint8`` array."""
    starts: np.ndarray
    """Offset of each token's first byte."""
    stops: np.ndarray
    """Offset one past each token's last byte."""
    line: np.ndarray
    """0-based line (within the chunk) of each token."""
    n_lines: int

    @property
    def per_line(self) -> np.ndarray:
        """Number of tokens on each line."""
        return np.bincount(self.line, minlength=self.n_lines)

    def text(self, token: int) -> str:
        """The text of one token (for error messages)."""
        raw = self.buf[self.starts[token] : self.stops[token]].tobytes()
        return raw.decode("utf-8", errors="replace")

    def mask(self, selected: np.ndarray) -> np.ndarray:
        """Boolean mask over ``buf`` of the bytes of the selected tokens (tokens never overlap)."""
        delta = np.zeros(self.buf.size + 1, dtype=np.int8)
        delta[self.starts[selected]] = 1
        delta[self.stops[selected]] -= 1
        return np.cumsum(delta[:-1], dtype=np.int8).astype(bool)


def tokenize(data: bytes, n_lines: int) -> Tokens:
    """Split a chunk of complete lines into tokens."""
    buf = np.frombuffer(data, dtype=np.uint8).copy()
    ws = _WHITESPACE[buf]
    word = ~ws
    starts = np.flatnonzero(word & np.concatenate(([True], ws[:-1])))
    stops = np.flatnonzero(word & np.concatenate((ws[1:], [True]))) + 1
    newlines = np.flatnonzero(buf == 10)
    line = np.searchsorted(newlines, starts)
    return Tokens(buf, starts, stops, line, n_lines)


def parse_numbers(buf: np.ndarray, expected: int) -> np.ndarray | None:
    """Parse the whitespace-separated numbers in ``buf``; ``None`` if any token is not a number or the count differs."""
    if expected == 0:  # numpy parses a buffer of only whitespace as [-1.0]
        return np.zeros(0)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            values = np.fromstring(buf.tobytes(), dtype=np.float64, sep=" ")  # noqa: NPY201 (text mode is supported)
    except (ValueError, DeprecationWarning):
        return None
    return values if values.size == expected else None


def is_number(text: str) -> bool:
    """Whether ``text`` is one number for :func:`parse_numbers` (used on the error path, to find the bad token)."""
    raw = np.frombuffer(text.encode(), dtype=np.uint8)
    return raw.size > 0 and parse_numbers(raw, 1) is not None


def parse_rows(chunk: TextChunk, *, fields: int, path: str, comment: bytes, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Parse lines of exactly ``fields`` numbers each (blank and comment lines are skipped).

    Returns the numbers, shape ``(n, fields)``, and the 1-based file line number of each row. Raises
    :class:`~dppca_dask.errors.InvalidInputError` naming the first line with another number of fields or a token
    that is not a number; ``what`` describes the expected fields (``"ROW COLUMN VALUE"``).
    """
    tok = tokenize(strip_comments(chunk.data, comment), chunk.n_lines)
    per_line = tok.per_line
    wrong = (per_line != 0) & (per_line != fields)
    if wrong.any():
        line = int(np.flatnonzero(wrong)[0])
        raise InvalidInputError(
            f"line {chunk.first_line + line} of '{path}' has {int(per_line[line])} fields; expected {fields} "
            f"({what}): fix the line",
            source=path,
        )
    lines = np.flatnonzero(per_line) + chunk.first_line
    values = parse_numbers(tok.buf, fields * lines.size)
    if values is None:
        token = next(t for t in range(tok.starts.size) if not is_number(tok.text(t)))
        raise InvalidInputError(
            f"{tok.text(token)!r} at line {chunk.first_line + int(tok.line[token])} of '{path}' is not a number "
            f"({what} expected): fix the line",
            source=path,
        )
    return values.reshape(-1, fields), lines
