"""``dppca-dask info STORE``: shape, stored entries, partitions, dtype, format version and size of a store."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dppca_dask.cli.ingest import _size

__all__ = ["register", "run"]

#: One line for ``dppca-dask --help`` (read without registering the command).
SUMMARY = "describe a matrix store"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "info",
        help=SUMMARY,
        description="Print the shape, stored entries, partitions, dtype, format version and size on disk of a "
        "matrix store (a dppca_dask store or an AnnData zarr store). This describes the data for its owner; it is "
        "not a differentially private release.",
    )
    p.add_argument("store", help="a dppca_dask store or an AnnData zarr store")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--check", action="store_true",
                   help="read and verify every chunk (structure, values, stored row norms); exit 2 naming the first "
                   "damaged partition")
    from dppca_dask.cli._paths import add_storage_option

    add_storage_option(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from dppca_dask.storage import open_matrix

    from dppca_dask.cli._paths import check_store, storage_options

    options = storage_options(args)
    check_store(args.store, options=options)
    store = open_matrix(args.store, storage_options=options)
    if args.check:
        for part in store.partitions:  # one partition in memory at a time; raises on the first damage
            store.verify_partition(part.index)
    info = store.info()
    if args.check:
        info["check"] = f"ok: {store.n_partitions} partitions verified"
    info["id_maps"] = sorted(store.metadata.get("id_maps") or {})
    if args.json:
        from dppca_dask.cli import _json

        _json.dump(info)
        return 0
    version = info["format_version"] if info["format_version"] is not None else "none (AnnData store)"
    lines = [
        f"store:          {info['path']}",
        f"shape:          {info['n_rows']} x {info['n_cols']} ({info['layout']})",
        f"stored entries: {info['nnz']}",
        f"partitions:     {info['n_partitions']} (at most {info['rows_per_partition_max']} rows and "
        f"{info['nnz_per_partition_max']} entries each)",
        f"dtype:          {info['dtype']}",
        f"format version: {version}",
        f"size on disk:   {_size(info['size_on_disk'])}" + (f" (codec: {info['codec']})" if info.get("codec") else ""),
    ]
    if info.get("created"):
        lines.append(f"created:        {info['created']} (generation {info['generation']})")
    if info.get("source"):
        lines.append(f"source:         {json.dumps(info['source'], default=str)}")
    if info["id_maps"]:
        lines.append(f"id maps:        {', '.join(info['id_maps'])}")
    lines.append(f"schema:         {info['schema']} (the width was "
                 f"{'declared at ingest' if info['schema'] == 'declared' else 'inferred from the data'})")
    if info.get("check"):
        lines.append(f"check:          {info['check']}")
    if info.get("timestamps"):
        lines.append("timestamps:     yes (appended partitions carry times)")
    print("\n".join(lines))
    return 0
