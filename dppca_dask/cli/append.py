"""``dppca-dask append STORE SRC --timestamp DATE``: add a day of rows to a store as new stamped partitions."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["register", "run"]

SUMMARY = "append a file's rows to a store as new partitions with a timestamp"


def register(subparsers: Any) -> None:
    from dppca_dask.ingest import FORMATS

    p = subparsers.add_parser(
        "append",
        help=SUMMARY,
        description="Validate a file (same formats as ingest) against a store's schema and append its rows as new "
        "partitions stamped with --timestamp, for sliding-window releases (dppca-dask window).",
    )
    p.add_argument("store", help="a dppca_dask store")
    p.add_argument("src", help="input file or directory")
    p.add_argument("--timestamp", required=True,
                   help="time of the rows: a date (2026-11-02, midnight UTC) or an ISO time with a zone")
    p.add_argument("--format", choices=FORMATS, default=None, help="input format (default: from the name or contents)")
    p.add_argument("--zero-based", action="store_true", help="svmlight: feature indices start at 0 (default: 1)")
    p.add_argument("--row-column", default="row_id", metavar="C", help="parquet: row id column (default: row_id)")
    p.add_argument("--col-column", default="col_id", metavar="C", help="parquet: column id column (default: col_id)")
    values = p.add_mutually_exclusive_group()
    values.add_argument("--value-column", default="value", metavar="C", help="parquet: value column (default: value)")
    values.add_argument("--no-value-column", action="store_true", help="parquet: every triplet counts 1")
    p.add_argument("--replace", action="store_true",
                   help="the day is already in the store with other rows: replace them (only the newest-arrived "
                        "day, and, with --ledger, only a day never released)")
    p.add_argument("--ledger", default=None, help="with --replace: the ledger the store is released under")
    p.add_argument("--dataset", default=None, help="with --replace and --ledger: the store's dataset key")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the summary line")
    from dppca_dask.cli._paths import add_storage_option

    add_storage_option(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from dppca_dask.cli._paths import check_store, storage_options
    from dppca_dask.errors import InvalidParameterError
    from dppca_dask.ingest.append import append_day

    if (args.ledger or args.dataset) and not args.replace:
        raise InvalidParameterError("--ledger and --dataset apply to --replace only; drop them")
    if args.ledger and not args.dataset:
        raise InvalidParameterError("--replace --ledger needs the store's dataset key: --dataset NAME")
    options = storage_options(args)
    check_store(args.store, options=options)
    outcome = append_day(
        args.store, args.src, timestamp=args.timestamp, replace=args.replace, ledger=args.ledger,
        dataset=args.dataset, format=args.format, zero_based=args.zero_based, storage_options=options,
        row_column=args.row_column, col_column=args.col_column,
        value_column=None if args.no_value_column else args.value_column,
    )
    store = outcome.store
    if args.json:
        from dppca_dask.cli import _json

        _json.dump({"store": store.path, "timestamp": args.timestamp, "status": outcome.status,
                    "n_partitions": store.n_partitions, "generation": store.generation})
    elif outcome.status == "already-present":
        print(f"'{store.path}' already has the day {args.timestamp} with the rows of '{args.src}': nothing appended "
              f"({store.n_partitions} partitions, generation {store.generation})")
    else:
        print(f"{outcome.status} '{args.src}' to '{store.path}' at {args.timestamp}: {store.n_partitions} partitions "
              f"(generation {store.generation})")
    return 0
