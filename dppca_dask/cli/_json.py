"""``--json`` output: strict JSON (RFC 8259), one object per line.

JSON has no infinity or NaN. A non-finite number (the infinite ε of a non-private baseline, an unbounded
``row_norm_bound``) is written as ``null``; so is the string ``"inf"``, ``"-inf"`` or ``"nan"`` by which the
library's own dictionaries (and ``result.json`` files) spell such a number, except under keys that hold text
(``*id``, ``*ids``, ``*labels``, ``*names``, ``*path``, ``output``, ``store``, ``ledger``).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from typing import IO, Any

__all__ = ["dump", "strict"]

_NON_FINITE_TEXT = frozenset({"inf", "-inf", "nan", "Infinity", "-Infinity", "NaN"})
_TEXT_KEYS = ("id", "ids", "labels", "names", "path", "output", "store", "ledger", "src")


def _is_text_key(key: str) -> bool:
    return any(key == suffix or key.endswith("_" + suffix) for suffix in _TEXT_KEYS)


def strict(value: Any, *, text: bool = False) -> Any:
    """``value`` with every non-finite number (and its spelling as a string, outside text fields) as ``None``;
    numpy scalars and arrays become Python numbers and lists."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return None if not text and value in _NON_FINITE_TEXT else value
    if isinstance(value, Mapping):
        return {str(k): strict(v, text=_is_text_key(str(k))) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v, text=text) for v in value]
    if hasattr(value, "tolist"):  # numpy scalars and arrays
        return strict(value.tolist(), text=text)
    if isinstance(value, int):
        return value
    return str(value)


def dump(value: Any, stream: IO[str] | None = None) -> None:
    """Write ``value`` as one line of strict JSON (``allow_nan=False``) to ``stream`` (standard output)."""
    out = sys.stdout if stream is None else stream
    out.write(json.dumps(strict(value), allow_nan=False))
    out.write("\n")
