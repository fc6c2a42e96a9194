"""Write a sample warehouse extract: a matrix as Parquet triplets, as a warehouse table would export it.

    python jobs/sample_warehouse.py OUT_DIR [--source ../shared/data/w8a.svm] [--files 4] [--n-features 300]

Rows become sparse user ids (not 0..n-1), triplets are shuffled and split over several files, and the columns are
named ``user_id``, ``feature_id``, ``value`` (the names ``jobs/warehouse-nightly.toml`` gives to the ingest).
Like any triplet table, it has no trace of all-zero rows: w8a's 49,749 rows become the 45,546 that have a feature.
The public feature ids (``0 .. n_features - 1``, w8a's 300 keyword features), which a warehouse keeps in its feature
table, are written one per line to ``OUT_DIR-columns.txt`` (the job's ``[data.ingest] column_ids``).
"""

from __future__ import annotations

import argparse
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", help="directory for the Parquet files")
    parser.add_argument("--source", default=os.path.join(here, "..", "..", "shared", "data", "w8a.svm"))
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0, help="seed of the shuffle and of the ids (not privacy)")
    parser.add_argument("--n-features", type=int, default=300,
                        help="the public number of features of the source (w8a: 300)")
    args = parser.parse_args()
    from _svmlight import read_svmlight

    matrix = read_svmlight(args.source, args.n_features).tocoo()
    rng = np.random.default_rng(args.seed)
    user_ids = np.sort(rng.choice(10 * matrix.shape[0], size=matrix.shape[0], replace=False)) + 1_000_000
    order = rng.permutation(matrix.nnz)
    rows, cols, vals = user_ids[matrix.row[order]], matrix.col[order].astype(np.int64), matrix.data[order]
    os.makedirs(args.out, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(matrix.nnz), args.files)):
        table = pa.table({"user_id": rows[part], "feature_id": cols[part], "value": vals[part]})
        pq.write_table(table, os.path.join(args.out, f"part-{i:03d}.parquet"))
    columns = f"{os.path.normpath(args.out)}-columns.txt"
    with open(columns, "w", encoding="utf-8") as handle:
        handle.writelines(f"{j}\n" for j in range(args.n_features))
    print(f"wrote {matrix.nnz} triplets of the {np.unique(matrix.row).size} rows with a feature (of "
          f"{matrix.shape[0]}) to {args.out} ({args.files} files) and its {args.n_features} feature ids to {columns}")


if __name__ == "__main__":
    main()
