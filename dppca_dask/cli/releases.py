"""``dppca-dask releases ROOT``: the table of releases of a scheduled job (a directory or a bucket), or its newest."""

from __future__ import annotations

import argparse
import json
from typing import Any

__all__ = ["register", "run"]

#: One line for ``dppca-dask --help`` (read without registering the command).
SUMMARY = "list the releases a job recorded (its table of releases), or the newest"

#: The columns of the text table, in order (every column of the table is in ``--json``).
_COLUMNS = ("date", "job_id", "status", "mechanism", "epsilon", "delta", "reliable", "output")


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "releases",
        help=SUMMARY,
        description="List the releases a job recorded in ROOT, the directory its table of releases is in: the "
        "part of the job's [output] path before {date} (a directory, or an s3:// URL). One line per release, "
        "oldest date first: its date, job id, status, mechanism, (epsilon, delta), whether its diagnostics call it "
        "reliable, and where its output is. Only released values are shown. Exit 2 when --latest finds no "
        "release, when a local ROOT is not a directory, or when its table is damaged.",
    )
    p.add_argument("root", help="the directory (or s3:// URL) holding the job's releases.parquet and latest")
    p.add_argument("--latest", action="store_true",
                   help="only the newest release (the one 'latest' points at: the newest date, so a backfilled day "
                        "does not move it back)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object: {\"releases\": [rows]} with every column of the table, or with --latest "
                        "the newest row")
    from dppca_dask.cli._paths import add_storage_option

    add_storage_option(p)
    p.set_defaults(handler=run)


def _reliable(row: dict[str, Any]) -> str:
    """``yes``/``no`` from the row's released diagnostics (``-`` when it has none)."""
    text = row.get("diagnostics")
    if not text:
        return "-"
    try:
        value = json.loads(text).get("reliable")
    except (ValueError, AttributeError):
        return "-"
    return "-" if value is None else ("yes" if value else "no")


def _cell(row: dict[str, Any], column: str) -> str:
    if column == "reliable":
        return _reliable(row)
    value = row.get(column)
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _table(rows: list[dict[str, Any]]) -> str:
    cells = [list(_COLUMNS)] + [[_cell(row, c) for c in _COLUMNS] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(_COLUMNS))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in cells)


def run(args: argparse.Namespace) -> int:
    import os

    from dppca_dask._urls import is_url
    from dppca_dask.cli._paths import storage_options
    from dppca_dask.errors import StoreNotFoundError
    from dppca_dask.jobs.outputs import newest, read_releases

    options = storage_options(args)
    root = args.root if is_url(args.root) else os.path.abspath(args.root)
    if not is_url(root) and not os.path.isdir(root):
        raise StoreNotFoundError(f"'{args.root}' is not a directory; give the directory a job's table of releases "
                                 "is in (the part of its [output] path before {date})")
    rows = read_releases(root, options)
    if args.latest:
        if not rows:
            raise StoreNotFoundError(f"no release is recorded in '{args.root}' (no releases.parquet there); run the "
                                     "job first, or give the part of its [output] path before {date}")
        row = newest(rows)
        if args.json:
            from dppca_dask.cli import _json

            _json.dump(row)
        else:
            print(_table([row]))
        return 0
    if args.json:
        from dppca_dask.cli import _json

        _json.dump({"releases": rows})
        return 0
    print(_table(rows) if rows else f"no release is recorded in '{args.root}'")
    return 0
