"""Windows over a store's partition table: by time (partition timestamps) or by rows (the last W rows).

Window bounds are public parameters. A time window selects whole partitions whose timestamps fall in
``(end − last, end]``; the number of rows it holds is private and never reported. A row window holds the last
``W`` rows of the store (ending with the last partition stamped at or before ``end`` when ``end`` is given), or
every row up to there when there are fewer. Which partitions hold those rows follows the partitions' row counts,
which are private, so a row window reads every partition up to its end, and only the rows inside the tasks follow
the counts (the partitions reported, the executor chosen from their number, the tasks and the ledger keys charged
are the same on neighbouring datasets). Time windows read only their own partitions: prefer them on long stores.
A row window with a horizon (``last_rows=W`` and ``last="7D"`` together) holds the last W rows of the partitions
stamped in the time window ``(end − last, end]`` (all of theirs when they hold fewer): it reads, reports and is
charged to those partitions only, chosen from timestamps as a time window's.
Partition timestamps, like the partition table itself, are public metadata set by the operator at ingest and
append time (``--timestamp``).
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from dataclasses import dataclass
from typing import Any, cast

from dppca_dask.errors import InvalidParameterError
from dppca_dask.storage import MatrixStore

__all__ = ["WindowSelection", "parse_duration", "parse_timestamp", "require_time_order", "select_window"]

_UNITS = {"D": 86400.0, "H": 3600.0, "W": 7 * 86400.0}
#: POSIX seconds of the first and last days a ``datetime`` holds (a window's bounds are printed as dates).
_FIRST = _dt.datetime(1, 1, 2, tzinfo=_dt.timezone.utc).timestamp()
_LAST = _dt.datetime(9999, 12, 30, tzinfo=_dt.timezone.utc).timestamp()


def parse_duration(value: Any) -> float:
    """``"30D"``, ``"12H"``, ``"2W"`` (or a ``timedelta``) as seconds > 0."""
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    else:
        match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([DHWdhw])\s*", str(value))
        if match is None:
            raise InvalidParameterError(
                f"last must be a duration such as '30D' (days), '12H' (hours) or '2W' (weeks); got {value!r}"
            )
        seconds = float(match.group(1)) * _UNITS[match.group(2).upper()]
    if not seconds > 0 or not math.isfinite(seconds):
        raise InvalidParameterError(f"last must be a positive duration; got {value!r}")
    return seconds


def parse_timestamp(value: Any, *, name: str = "timestamp") -> float:
    """A date (``2026-11-01``, midnight UTC), an ISO time with a zone, an aware ``datetime`` or POSIX seconds."""
    if isinstance(value, bool):
        raise InvalidParameterError(f"{name} must be a date such as 2026-11-01; got {value!r}")
    if isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise InvalidParameterError(f"{name} must be finite; got {value!r}")
        if not _FIRST <= value <= _LAST:  # outside the dates that can be printed
            raise InvalidParameterError(f"{name} must be POSIX seconds between the years 1 and 9999; got {value!r}")
        return float(value)
    if isinstance(value, _dt.datetime):
        moment = value
    elif isinstance(value, _dt.date):
        moment = _dt.datetime(value.year, value.month, value.day, tzinfo=_dt.timezone.utc)
    else:
        text = str(value).strip()
        try:
            if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
                day = _dt.date.fromisoformat(text)
                moment = _dt.datetime(day.year, day.month, day.day, tzinfo=_dt.timezone.utc)
            else:
                moment = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidParameterError(
                f"{name} must be a date such as 2026-11-01 or a time with a zone such as 2026-11-01T06:00+00:00; "
                f"got {value!r}"
            ) from None
    if moment.tzinfo is None:
        raise InvalidParameterError(
            f"{name} must name its time zone; got {moment.isoformat()}; add one, e.g. {moment.isoformat()}+00:00"
        )
    return moment.timestamp()


def _iso(seconds: float) -> str:
    if not _FIRST <= seconds <= _LAST:  # a long duration before an early end: no date to print
        return f"{seconds:.0f} POSIX seconds"
    return _dt.datetime.fromtimestamp(seconds, tz=_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True)
class WindowSelection:
    """The partitions (and row ranges) of one window. Every field is public but ``row_ranges`` of a row window,
    which follow the partitions' private row counts: they only cut rows inside the tasks, and the selection a
    release reports (:meth:`public`) has none."""

    kind: str
    """``"time"`` or ``"rows"``."""
    start: str
    """Start of the window: an ISO time (exclusive) for time windows, ``"last W rows"`` for row windows
    (``"last W rows after <ISO time>"`` with a horizon)."""
    end: str
    """End of the window: an ISO time (inclusive), or the store's end for a row window without ``end``."""
    partitions: tuple[int, ...]
    """Indices of the partitions the window reads (in order)."""
    row_ranges: tuple[tuple[int, int] | None, ...]
    """For each partition, the local row range inside the window (``None``: the whole partition, or not known to
    a reported selection)."""
    last_rows: int | None = None
    """W for a row window (public); ``None`` for a time window, whose row count is private."""
    requested_start: str | None = None
    """The start the window was asked for, when the release covers more (a spectral histogram's checkpoint starts
    before it): ``start`` and ``partitions`` then say what the release really covers."""

    def public(self) -> WindowSelection:
        """This selection without its row ranges (``None`` for each partition), as a release reports it and as a
        saved release is read back."""
        return WindowSelection(self.kind, self.start, self.end, self.partitions, (None,) * len(self.partitions),
                               self.last_rows, self.requested_start)

    @property
    def n_partitions(self) -> int:
        return len(self.partitions)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "start": self.start, "end": self.end,
                               "n_partitions": self.n_partitions, "partitions": list(self.partitions)}
        if self.last_rows is not None:
            out["last_rows"] = self.last_rows
        if self.requested_start is not None:
            out["requested_start"] = self.requested_start
        return out


def select_window(
    store: MatrixStore, *, last: Any = None, last_rows: Any = None, end: Any = None
) -> WindowSelection:
    """Choose the partitions of a window from the public partition table (no data is read).

    ``last`` alone: a time window; ``last_rows`` alone: the last W rows up to ``end``; both: the last W rows of the
    time window's partitions (a row window with a horizon).

    Raises
    ------
    InvalidParameterError
        Neither of ``last`` and ``last_rows``; a malformed duration or date; a time window (or ``end``) on
        a store with partitions that have no timestamp; a window that ends before the
        first partition; an empty time window.
    """
    if last is None and last_rows is None:
        raise InvalidParameterError(
            "give last (a duration such as '30D'), last_rows (a row count W), or both (the last W rows within the "
            "time window)"
        )
    parts = store.partitions
    end_s = None if end is None else parse_timestamp(end, name="end")
    if last is not None or end_s is not None:
        missing = [p.index for p in parts if p.timestamp is None]
        if missing:
            raise InvalidParameterError(
                f"partition {missing[0]} of '{store.path}' has no timestamp ({len(missing)} of {len(parts)} "
                "partitions have none); a time window needs every partition stamped: ingest with --timestamp DATE "
                "and add days with `dppca-dask append STORE SRC --timestamp DATE`, or use last_rows (--last-rows W)"
            )
    if not parts:
        raise InvalidParameterError(f"'{store.path}' has no partitions; nothing to release")
    stamps = [cast(float, p.timestamp) for p in parts]  # every partition is stamped when a time window is asked
    if end_s is not None:
        first = min(stamps)
        if end_s < first:
            raise InvalidParameterError(
                f"the window ends at {_iso(end_s)}, before the first partition ({_iso(first)}); choose end on or "
                "after it"
            )
    horizon: tuple[int, ...] | None = None  # the partitions a row window may hold rows of (None: all up to end)
    if last is not None:
        seconds = parse_duration(last)
        if end_s is None:
            end_s = max(stamps)
        start_s = end_s - seconds
        chosen = tuple(p.index for p, stamp in zip(parts, stamps) if start_s < stamp <= end_s)
        if not chosen:
            raise InvalidParameterError(
                f"the window ({_iso(start_s)}, {_iso(end_s)}] holds no partition; widen last={last!r} or move end"
            )
        if last_rows is None:
            return WindowSelection("time", _iso(start_s), _iso(end_s), chosen, (None,) * len(chosen))
        horizon = chosen
    if isinstance(last_rows, bool) or not isinstance(last_rows, (int,)) and not (
            hasattr(last_rows, "__index__") and not isinstance(last_rows, float)):
        raise InvalidParameterError(f"last_rows must be a positive integer; got {last_rows!r}")
    w = int(last_rows)
    if w < 1:
        raise InvalidParameterError(f"last_rows must be a positive integer; got {last_rows!r}")
    # Which partitions hold the last W rows follows their row counts, which are private (add/remove one row): the
    # window reads every partition up to its end (a set chosen from timestamps alone), and the row ranges, which
    # do follow the counts, only cut rows inside the tasks; they are never reported. With fewer than W rows up to
    # the end the window holds them all: a refusal would tell neighbours apart.
    # With a horizon, the partitions are the time window's (timestamps alone) and the rows before its first
    # partition are outside it.
    if horizon is None:
        upto = [p for p, stamp in zip(parts, stamps) if end_s is None or stamp <= end_s]  # not empty: see above
        start_text = f"last {w} rows"
    else:
        upto = [parts[i] for i in horizon]
        start_text = f"last {w} rows after {_iso(cast(float, end_s) - parse_duration(last))}"
    ranges = dict(_last_rows(upto, w, stamped=all(p.timestamp is not None for p in upto)))
    end_text = _iso(end_s) if end_s is not None else "end of store"
    return WindowSelection("rows", start_text, end_text, tuple(p.index for p in upto),
                           tuple(ranges[p.index] for p in upto), last_rows=w)


def _last_rows(upto: list[Any], w: int, *, stamped: bool) -> list[tuple[int, tuple[int, int] | None]]:
    """For each partition of ``upto``, the local row range of the last ``w`` rows in time order (the partitions
    sorted by timestamp, then by position: a day appended late counts where its time puts it), ``None`` for the
    whole partition. Without timestamps the order is the partitions' own."""
    order = sorted(upto, key=lambda p: (p.timestamp, p.index)) if stamped else list(upto)
    total = sum(p.n_rows for p in order)
    start, seen, out = max(total - w, 0), 0, []
    for p in order:
        lo = min(max(start - seen, 0), p.n_rows)
        out.append((p.index, None if lo == 0 else (lo, p.n_rows)))
        seen += p.n_rows
    return out


def require_time_order(store: MatrixStore, what: str) -> None:
    """Refuse a store whose partitions are not stamped in the order they arrived (a day appended late, a backfill)
    for ``what``, a structure that is built incrementally as partitions arrive (the spectral histogram, the binary
    tree): it would fold the late day in as the newest. Windows recomputed from their partitions
    (``structure="exact"``) take days in any order."""
    parts = store.partitions
    stamps = [p.timestamp for p in parts]
    late = next((i for i in range(1, len(parts)) if stamps[i] is not None and stamps[i - 1] is not None
                 and cast(float, stamps[i]) < cast(float, stamps[i - 1])), None)
    if late is not None:
        raise InvalidParameterError(
            f"partition {late} of '{store.path}' is stamped {_iso(cast(float, stamps[late]))}, before partition "
            f"{late - 1} ({_iso(cast(float, stamps[late - 1]))}): a day was appended late, and {what} is built in "
            "the order partitions arrive; use structure='exact' (--structure exact), which takes days in any order, "
            "or re-ingest the days in time order"
        )
