"""Short reprs for result objects: the type, the mechanism, the shape, the privacy summary and the diagnostics, in a
few lines (the arrays themselves are attributes; printing a result never prints them), and the same facts as a small
HTML table for notebooks (``_repr_html_``)."""

from __future__ import annotations

import html
from typing import Any

__all__ = ["repr_rows", "short_repr", "short_repr_html"]

#: Longest line of a repr (longer caveats and summaries are cut with an ellipsis).
MAX_LINE = 160


def _cut(text: str) -> str:
    return text if len(text) <= MAX_LINE else text[: MAX_LINE - 3] + "..."


def privacy_line(privacy: Any) -> str:
    """One line of a privacy report (its ``summary()`` when it has one, else its (ε, δ) and relation)."""
    if privacy is None:
        return "not differentially private"
    summary = getattr(privacy, "summary", None)
    if callable(summary):
        try:
            return str(summary())
        except Exception:  # noqa: BLE001 - a report read back from disk may lack fields; fall back below
            pass
    get = privacy.get if isinstance(privacy, dict) else (lambda name, default=None: getattr(privacy, name, default))
    if not get("private", False):
        return "not differentially private"
    return f"({get('epsilon')}, {get('delta')})-DP for {get('neighbouring')}"


def repr_rows(obj: Any, *, shape: str, extra: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """The facts of a short repr as (label, value) rows: type, mechanism, shape, privacy, diagnostics, then each
    ``extra`` line (``"label: value"``, or a value without a label)."""
    rows = [("type", type(obj).__name__)]
    mechanism = getattr(obj, "mechanism", None)
    if mechanism is not None:
        rows.append(("mechanism", str(mechanism)))
    rows.append(("shape", shape))
    if hasattr(obj, "privacy"):
        rows.append(("privacy", privacy_line(obj.privacy)))
    diagnostics = getattr(obj, "diagnostics", None)
    if diagnostics is not None and hasattr(diagnostics, "summary"):
        rows.append(("diagnostics", diagnostics.summary()))
    for line in extra:
        label, sep, value = line.partition(": ")
        rows.append((label, value) if sep else ("", line))
    return rows


def short_repr_html(obj: Any, *, shape: str, extra: tuple[str, ...] = ()) -> str:
    """The facts of :func:`short_repr` as a small HTML table (every value escaped; long values cut as in the
    text)."""
    cells = "".join(
        f'<tr><th style="text-align:left">{html.escape(label)}</th>'
        f'<td style="text-align:left">{html.escape(_cut(value))}</td></tr>'
        for label, value in repr_rows(obj, shape=shape, extra=extra)
    )
    return f'<table class="dppca-dask-result">{cells}</table>'


def short_repr(obj: Any, *, shape: str, extra: tuple[str, ...] = ()) -> str:
    """``TypeName(mechanism=..., shape=...)`` and indented lines: privacy, diagnostics, ``extra``."""
    mechanism = getattr(obj, "mechanism", None)
    head = f"{type(obj).__name__}(" + ", ".join(
        part for part in ((f"mechanism={mechanism!r}" if mechanism is not None else ""), f"shape={shape}") if part
    ) + ")"
    lines = [head]
    if hasattr(obj, "privacy"):
        lines.append("  privacy: " + privacy_line(obj.privacy))
    diagnostics = getattr(obj, "diagnostics", None)
    if diagnostics is not None and hasattr(diagnostics, "summary"):
        lines.append("  diagnostics: " + diagnostics.summary())
    lines.extend("  " + line for line in extra)
    return "\n".join(_cut(line) for line in lines)
