"""Size sanity: refuse a declared matrix that the machine cannot hold or analyse, before anything is written.

A three-line Matrix Market file may declare 10¹¹ rows, an svmlight index 2·10⁹ columns: the writer would fill the
disk with row pointers, and every analysis needs a few dense vectors of the matrix's width. Ingest estimates, from
the declared (or first-pass) shape and entry count, the store's size on disk (uncompressed: row pointers and norms,
values and indices) and the working memory of an analysis (dense float64 vectors of the width), and refuses either
when it exceeds the limit: ``max_disk`` (default: the free space where the store is written) and ``max_memory``
(default: the machine's physical memory). The error gives the figure and the option to raise.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass

from dppca_dask.errors import InvalidInputError, InvalidParameterError

__all__ = ["SizeLimits", "parse_size", "physical_memory"]

#: Dense float64 vectors of the matrix's width that an analysis holds at once (iterate, partial sums, noise,
#: products on the workers and at the coordinator).
VECTORS_PER_ANALYSIS = 8

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12,
          "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str | int) -> int:
    """Bytes from ``123``, ``64GiB``, ``1.5 TB`` (decimal and binary units)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
        unit = match.group(2).lower() if match else ""
        if match is None or unit not in _UNITS:
            raise InvalidParameterError(f"cannot read the size {text!r}; give bytes, or a number with a unit such as "
                                        "64GiB or 500GB")
        value = int(float(match.group(1)) * _UNITS[unit])
    if value < 1:
        raise InvalidParameterError(f"a size limit must be >= 1 byte; got {text!r}")
    return value


def physical_memory() -> int:
    """Bytes of physical memory of this machine (0 when unknown)."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - a platform without sysconf
        return 0


def _gib(n: float) -> str:
    """A size in the largest binary unit it reaches (down to bytes: a 1 KiB limit is not "0.0 GiB")."""
    for unit, scale in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} bytes"


@dataclass(frozen=True, slots=True)
class SizeLimits:
    """Largest working memory and disk footprint an ingest may declare (``None``: what the machine has)."""

    max_memory: int | None = None
    max_disk: int | None = None

    def check_memory(self, nbytes: int, *, source: object, what: str) -> None:
        """Refuse ``what`` when it needs more than ``max_memory`` (default: the machine's physical memory)."""
        limit = self.max_memory if self.max_memory is not None else physical_memory()
        if limit and nbytes > limit:
            raise InvalidInputError(
                f"'{source}': {what} needs about {_gib(nbytes)} of memory, more than the {_gib(limit)} allowed "
                f"({'max_memory, --max-memory' if self.max_memory is not None else 'this machine has'}); check the "
                "declared shape, or raise max_memory (--max-memory)",
                source=source,
            )

    def check(self, *, out: str, n_rows: int | None, n_cols: int, nnz: int | None, layout: str, value_bytes: int,
              source: object, so_far: bool = False) -> None:
        """Raise :class:`InvalidInputError` with the figures when the declared size exceeds a limit (``so_far``: the
        rows written so far of a streamed input, whose size was not known before it was read)."""
        memory = VECTORS_PER_ANALYSIS * 8 * int(n_cols)
        limit = self.max_memory if self.max_memory is not None else physical_memory()
        if limit and memory > limit:
            raise InvalidInputError(
                f"'{source}' declares {n_cols} columns: an analysis needs about {_gib(memory)} of working memory "
                f"({VECTORS_PER_ANALYSIS} float64 vectors of that width), more than the {_gib(limit)} allowed "
                f"({'max_memory, --max-memory' if self.max_memory is not None else 'this machine has'}); check the "
                "column indices and the declared width, or raise max_memory (--max-memory)",
                source=source,
            )
        if layout == "dense":
            disk = int(n_rows or 0) * (int(n_cols) * value_bytes + 8)
        else:
            index_bytes = 4 if n_cols < 2**31 else 8
            disk = int(n_rows or 0) * 16 + int(nnz or 0) * (value_bytes + index_bytes)
        if self.max_disk is not None:
            space, what = self.max_disk, "max_disk, --max-disk"
        else:
            parent = _existing_ancestor(os.path.dirname(os.path.abspath(out)) or ".")  # (missing parents: made later)
            space, what = shutil.disk_usage(parent).free, f"free on the file system of '{parent}'"
        if disk > space and so_far:
            raise InvalidInputError(
                f"'{source}': its first {n_rows} rows ({nnz} entries) already take up to {_gib(disk)} on disk, more "
                f"than the {_gib(space)} allowed ({what}); the store was not written. Raise max_disk (--max-disk) "
                "if the store will compress well",
                source=source,
            )
        if disk > space:
            raise InvalidInputError(
                f"'{source}' declares {n_rows if n_rows is not None else 'its'} rows"
                + (f" and {nnz} entries" if nnz is not None else "")
                + f": the store would take up to {_gib(disk)} on disk, more than the {_gib(space)} allowed ({what}); "
                "check the size line or shape of the input, or raise max_disk (--max-disk) if the store will "
                "compress well",
                source=source,
            )


def _existing_ancestor(path: str) -> str:
    """``path`` or its nearest ancestor that exists: the file system a store written under ``path`` will be on."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path
