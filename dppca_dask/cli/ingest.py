"""``dppca-dask ingest SRC --out STORE``: convert a matrix file into a row-partitioned store."""

from __future__ import annotations

import argparse
import time
from typing import Any

__all__ = ["register", "run"]

#: One line for ``dppca-dask --help`` (read without registering the command).
SUMMARY = "convert a matrix file into a matrix store"


def register(subparsers: Any) -> None:
    from dppca_dask.ingest import FORMATS
    from dppca_dask.storage._format import CODECS, DEFAULT_CODEC

    p = subparsers.add_parser(
        "ingest",
        help=SUMMARY,
        description="Convert a matrix (LIBSVM, Matrix Market, AnnData, Parquet triplets, .npz, .npy) into a "
        "row-partitioned zarr store, validating every value. Prints a one-line summary.",
    )
    p.add_argument("src", help="input file or directory")
    p.add_argument("--out", required=True, help="path of the new store (a directory), or a URL in object storage "
                   "(s3://bucket/x.zarr: built locally, then uploaded with its metadata last)")
    p.add_argument("--format", choices=FORMATS, default=None, help="input format (default: from the name or contents)")
    p.add_argument("--rows-per-partition", type=int, default=None, metavar="N",
                   help="rows per partition (default: about 128 MB per partition)")
    p.add_argument("--dtype", choices=("float32", "float64"), default=None,
                   help="stored value type (default: float32 for float32 input, else float64)")
    p.add_argument("--codec", choices=CODECS, default=DEFAULT_CODEC,
                   help="how the store's chunks are compressed, recorded in the store (default: none). Every "
                   "out-of-core step re-reads every partition, so read speed usually matters more than disk. "
                   "Measured on one core (a partition of 1.25e7 float32 entries in the page cache, every check of "
                   "a worker's read; benchmarks/bench_read_path.py): none: 374 MB/s, the largest store; lz4: "
                   "218 MB/s, 2.3x smaller (Blosc); zstd: 153 MB/s, 3.3x smaller (Blosc). From a disk slower than "
                   "those rates, a smaller store reads faster")
    p.add_argument("--nnz-chunk", type=int, default=None, metavar="N",
                   help="stored entries per chunk of the sparse arrays (one file, or one object in object storage, "
                   "each), 4096 to 16777216, recorded in the store (appends keep it); default: 262144 on a file "
                   "system, 2097152 for an s3://... output (every chunk a read touches is one request there)")
    p.add_argument("--on-duplicate", choices=("sum", "reject"), default="sum",
                   help="add up repeated (row, column) entries, or refuse them (default: sum)")
    p.add_argument("--n-features", type=int, default=None, metavar="N",
                   help="the number of columns, declared as public input (the store's schema is then 'declared'); "
                   "svmlight: the width (default: the largest index, the file is then read twice); other formats: "
                   "must equal the input's width; Parquet: use --column-ids")
    p.add_argument("--max-memory", default=None, metavar="SIZE",
                   help="refuse a declared width whose analysis needs more working memory (e.g. 64GiB; default: "
                   "this machine's memory)")
    p.add_argument("--max-disk", default=None, metavar="SIZE",
                   help="refuse a declared shape whose store may take more disk (e.g. 500GB; default: the free "
                   "space where the store is written); an input whose size is known only as it is read (svmlight "
                   "with --n-features) is checked as it is written")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing store at --out (only a dppca_dask store or an empty directory)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show a progress bar (default: when standard error is a terminal)")
    p.add_argument("--timestamp", default=None, metavar="DATE",
                   help="time of the rows (2026-11-01 is midnight UTC), stamped on every partition for time windows")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the summary line")
    svm = p.add_argument_group("svmlight input")
    svm.add_argument("--zero-based", action="store_true", help="feature indices start at 0 (default: 1)")
    svm.add_argument("--store-labels", action="store_true", help="keep the labels as the array 'labels'")
    pq = p.add_argument_group("parquet input (triplets)")
    pq.add_argument("--row-column", default=None, metavar="C", help="row id column (default: row_id)")
    pq.add_argument("--col-column", default=None, metavar="C", help="column id column (default: col_id)")
    values = pq.add_mutually_exclusive_group()
    values.add_argument("--value-column", default=None, metavar="C", help="value column (default: value)")
    values.add_argument("--no-value-column", action="store_true", help="no value column: every triplet counts 1")
    pq.add_argument("--column-ids", default=None, metavar="FILE",
                    help="the universe of column ids, one per line, declared as public input (schema 'declared'); "
                    "default: the distinct ids of the table (schema 'inferred')")
    ad = p.add_argument_group("AnnData input (.h5ad, .zarr)")
    ad.add_argument("--layer", default=None, metavar="NAME", help="ingest layers/NAME instead of X")
    from dppca_dask.cli._paths import add_storage_option

    add_storage_option(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from dppca_dask.cli._paths import check_input, check_output, storage_options
    from dppca_dask.ingest import ingest

    options = storage_options(args)
    if args.nnz_chunk is not None:
        from dppca_dask.storage._format import check_nnz_chunk

        check_nnz_chunk(args.nnz_chunk)  # before the input or the output is looked at
    check_input(args.src)
    check_output(args.out, options)
    start = time.perf_counter()
    store = ingest(
        args.src,
        args.out,
        format=args.format,
        rows_per_partition=args.rows_per_partition,
        dtype=args.dtype,
        on_duplicate=args.on_duplicate,
        overwrite=args.overwrite,
        progress=args.progress,
        zero_based=args.zero_based,
        n_features=args.n_features,
        store_labels=args.store_labels,
        row_column=args.row_column or "row_id",
        col_column=args.col_column or "col_id",
        value_column=None if args.no_value_column else (args.value_column or "value"),
        column_ids=args.column_ids,
        max_memory=args.max_memory,
        max_disk=args.max_disk,
        layer=args.layer,
        timestamp=args.timestamp,
        codec=args.codec,
        storage_options=options,
        nnz_chunk=args.nnz_chunk,
    )
    seconds = time.perf_counter() - start
    info = store.info()
    kind = (info.get("source") or {}).get("kind", "unknown")
    if args.json:
        from dppca_dask.cli import _json

        _json.dump({**info, "format": kind, "seconds": round(seconds, 3)})
    else:
        print(
            f"ingested '{args.src}' ({kind}) -> '{store.path}': {info['n_rows']} x {info['n_cols']}, "
            f"{info['nnz']} stored entries, {info['n_partitions']} partitions, {info['dtype']}, "
            f"{_size(info['size_on_disk'])} in {seconds:.1f} s"
        )
    return 0


def _size(n: int) -> str:
    """Bytes in a readable unit (``2.3 MiB``)."""
    value = float(n)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"
