"""Write daily Parquet extracts for the sliding-window example: one file of triplets per day.

    python jobs/sample_days.py OUT_DIR [--source ../shared/data/w8a.svm] [--days 10] [--rows-per-day 2000]

Day ``n`` (from 2026-11-01) holds the next ``--rows-per-day`` rows of the source as (``user_id``, ``feature_id``,
``value``) triplets in ``OUT_DIR/2026-11-DD.parquet``; ``OUT_DIR/columns.txt`` lists the feature ids (the
declared schema). See ``jobs/window-nightly.toml``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def write_days(out: str, matrix, *, days: int, rows_per_day: int, start: str = "2026-11-01") -> list[str]:
    """Write the files; returns the day strings."""
    os.makedirs(out, exist_ok=True)
    first = _dt.date.fromisoformat(start)
    names = []
    coo = matrix.tocsr()
    for n in range(days):
        block = coo[n * rows_per_day : (n + 1) * rows_per_day].tocoo()
        day = (first + _dt.timedelta(days=n)).isoformat()
        table = pa.table({"user_id": (block.row + 1_000_000 * (n + 1)).astype(np.int64),
                          "feature_id": block.col.astype(np.int64), "value": block.data.astype(np.float64)})
        pq.write_table(table, os.path.join(out, f"{day}.parquet"))
        names.append(day)
    with open(os.path.join(out, "columns.txt"), "w") as fh:
        fh.write("\n".join(str(i) for i in range(matrix.shape[1])) + "\n")
    return names


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="directory for the daily Parquet files")
    parser.add_argument("--source", default=os.path.join(here, "..", "..", "shared", "data", "w8a.svm"))
    parser.add_argument("--days", type=int, default=10)
    parser.add_argument("--rows-per-day", type=int, default=2000)
    args = parser.parse_args()
    from _svmlight import read_svmlight

    matrix = read_svmlight(args.source, 300)
    for day in write_days(args.out, matrix, days=args.days, rows_per_day=args.rows_per_day):
        print(os.path.join(args.out, f"{day}.parquet"))


if __name__ == "__main__":
    main()
