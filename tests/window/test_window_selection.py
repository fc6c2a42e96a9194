"""Windows over the partition table: by time, by rows, and every bad window (no data is read)."""

from __future__ import annotations

import datetime as _dt

import numpy as np
import pytest

from dppca_dask.errors import InvalidParameterError
from dppca_dask.ingest import ingest
from dppca_dask.methods.window import parse_duration, parse_timestamp, select_window
from dppca_dask.storage import append_partition
from window_data import D, ROWS_PER_DAY, day, day_block


def test_time_window_selects_the_last_days(ten_days):
    store = ten_days
    sel = select_window(store, last="5D")
    assert sel.kind == "time" and sel.partitions == (5, 6, 7, 8, 9)
    assert sel.row_ranges == (None,) * 5 and sel.last_rows is None
    assert sel.start == "2026-11-05T00:00:00+00:00" and sel.end == "2026-11-10T00:00:00+00:00"
    assert select_window(store, last="3D", end="2026-11-04").partitions == (1, 2, 3)
    assert select_window(store, last="30D").partitions == tuple(range(10))  # the first month: what exists
    assert "n_rows" not in sel.to_dict()  # a time window's row count is private


def test_row_window_reads_every_partition_up_to_its_end_and_cuts_rows_inside(ten_days):
    """The partitions a row window reads follow the timestamps only (every partition up to its end); the row
    ranges, which follow the private row counts, keep the last W rows (empty ranges before them) and are never
    reported."""
    store = ten_days
    sel = select_window(store, last_rows=ROWS_PER_DAY + 15, end="2026-11-04")
    assert sel.partitions == (0, 1, 2, 3)
    empty = (ROWS_PER_DAY, ROWS_PER_DAY)
    assert sel.row_ranges == (empty, empty, (ROWS_PER_DAY - 15, ROWS_PER_DAY), None)
    assert sel.to_dict()["last_rows"] == ROWS_PER_DAY + 15 and "row_ranges" not in sel.to_dict()
    whole = select_window(store, last_rows=ROWS_PER_DAY + 15)
    assert whole.partitions == tuple(range(10)) and whole.row_ranges[-3:] == (empty, (ROWS_PER_DAY - 15, ROWS_PER_DAY),
                                                                             None)
    ended = select_window(store, last_rows=ROWS_PER_DAY, end="2026-11-02")
    assert ended.partitions == (0, 1) and ended.row_ranges == (empty, None)


def test_a_row_window_longer_than_the_store_holds_every_row(ten_days):
    """With fewer than W rows up to the end the window holds them all, on the same partitions: a refusal would tell
    a store of W rows from its neighbour with one row removed."""
    store = ten_days
    for end in (None, "2026-11-04"):
        short, long = (select_window(store, last_rows=w, end=end) for w in (4 * ROWS_PER_DAY, 10 * ROWS_PER_DAY + 1))
        assert long.row_ranges == (None,) * len(long.partitions)
        assert long.partitions == tuple(range(10 if end is None else 4))
        assert short.partitions == long.partitions


def test_a_row_window_with_a_horizon_reads_only_the_time_windows_partitions(ten_days):
    """``last_rows`` with ``last``: the partitions are the time window's (timestamps alone), the row ranges keep
    the last W rows among them, and with fewer rows there the window holds all of theirs and none before."""
    store = ten_days
    empty = (ROWS_PER_DAY, ROWS_PER_DAY)
    sel = select_window(store, last_rows=ROWS_PER_DAY + 15, last="3D", end="2026-11-06")
    time = select_window(store, last="3D", end="2026-11-06")
    assert sel.partitions == time.partitions == (3, 4, 5) and sel.kind == "rows"
    assert sel.row_ranges == (empty, (ROWS_PER_DAY - 15, ROWS_PER_DAY), None)
    assert sel.start == f"last {ROWS_PER_DAY + 15} rows after {time.start}" and sel.end == time.end
    assert sel.to_dict()["last_rows"] == ROWS_PER_DAY + 15 and "row_ranges" not in sel.to_dict()
    for w in (3 * ROWS_PER_DAY, 3 * ROWS_PER_DAY + 1, 10 * ROWS_PER_DAY):  # the horizon's rows, none before
        held = select_window(store, last_rows=w, last="3D", end="2026-11-06")
        assert held.partitions == (3, 4, 5) and held.row_ranges == (None, None, None)
    newest = select_window(store, last_rows=5, last="2D")
    assert newest.partitions == (8, 9) and newest.row_ranges == (empty, (ROWS_PER_DAY - 5, ROWS_PER_DAY))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give last .*, last_rows .*, or both"),
        ({"last": "5D", "last_rows": 0}, "positive integer"),
        ({"last": "12H", "last_rows": 3, "end": "2026-11-03T18:00:00+00:00"}, "holds no partition"),
        ({"last": "five days"}, "duration such as '30D'"),
        ({"last": "0D"}, "positive duration"),
        ({"last": "5D", "end": "2026-10-20"}, "before the first partition"),
        ({"last": "12H", "end": "2026-11-03T18:00:00+00:00"}, "holds no partition"),
        ({"last": "5D", "end": "yesterday"}, "must be a date"),
        ({"last": "5D", "end": "2026-11-03T18:00:00"}, "time zone"),
        ({"last_rows": 0}, "positive integer"),
        ({"last_rows": 2.5}, "positive integer"),
        ({"last_rows": 3, "end": "2026-10-20"}, "before the first partition"),
    ],
)
def test_bad_windows(ten_days, kwargs, message):
    store = ten_days
    with pytest.raises(InvalidParameterError, match=message) as info:
        select_window(store, **kwargs)
    assert str(ROWS_PER_DAY * 10) not in str(info.value) and str(ROWS_PER_DAY * 4) not in str(info.value)  # never the store's row count


def test_missing_timestamps_refuse_a_time_window(tmp_path):
    store = ingest(day_block(1), tmp_path / "s", n_features=6)  # no timestamp
    store = append_partition(store.path, day_block(2), timestamp=day(2))
    with pytest.raises(InvalidParameterError, match="partition 0 .* has no timestamp"):
        select_window(store, last="5D")
    assert select_window(store, last_rows=10).partitions == (0, 1)  # a row window needs none


def test_parsers():
    assert parse_duration("2W") == 14 * 86400 and parse_duration("12h") == 43200
    assert parse_duration(_dt.timedelta(days=1)) == 86400
    assert parse_timestamp("2026-11-01") == day(1)
    assert parse_timestamp(_dt.date(2026, 11, 2)) == day(2)
    assert parse_timestamp("2026-11-01T00:00:00Z") == day(1)
    assert parse_timestamp(day(3)) == day(3)
    for bad in (True, float("nan")):
        with pytest.raises(InvalidParameterError):
            parse_timestamp(bad)
    with pytest.raises(InvalidParameterError, match="time zone"):
        parse_timestamp(_dt.datetime(2026, 11, 1))
    assert np.isfinite(parse_timestamp("2026-11-01T06:00+02:00"))


def test_ingest_timestamp_stamps_every_partition(tmp_path):
    store = ingest(day_block(1, 30), tmp_path / "s", n_features=6, rows_per_partition=10, timestamp="2026-11-01")
    assert [p.timestamp for p in store.partitions] == [day(1)] * 3
    with pytest.raises(InvalidParameterError, match="must be a date"):
        ingest(day_block(1), tmp_path / "t", n_features=6, timestamp="not a date")
    assert not (tmp_path / "t").exists()  # refused before anything was written


def test_days_appended_out_of_order_are_windowed_by_their_timestamps(tmp_path):
    """A day appended late (a backfill): a time window holds the partitions its times fall in, wherever they are in
    the table, and a row window counts its last rows in time order (it used to skip the later-stamped partition in
    the middle: "the last 2 rows" held one row; then such stores were refused)."""
    store = ingest(np.eye(3)[:1], tmp_path / "s", n_features=3, timestamp="2026-11-01")
    store = append_partition(store.path, np.eye(3)[1:2], timestamp=day(5))
    store = append_partition(store.path, np.eye(3)[2:3], timestamp=day(3))
    rows = select_window(store, last_rows=2, end="2026-11-04")
    assert (rows.partitions, rows.row_ranges) == ((0, 2), (None, None))
    assert select_window(store, last="2D").partitions == (1,)
    assert select_window(store, last="3D").partitions == (1, 2)
    assert select_window(store, last_rows=2).row_ranges == ((1, 1), None, None)  # 11-03 and 11-05: partitions 2, 1


def test_times_beyond_the_calendar_are_refused_or_printed(tmp_path):
    """``end=1e20`` failed with an OverflowError from the date printer; a duration reaching before year 1 too."""
    store = ingest(day_block(1), tmp_path / "s", n_features=D, timestamp="2026-11-01")
    for end in (1e20, -1e20):
        with pytest.raises(InvalidParameterError, match="between the years 1 and 9999"):
            select_window(store, last="1D", end=end)
    assert select_window(store, last="99999999W").partitions == (0,)
