"""Write a sample warehouse extract: a matrix as Parquet triplets, as a warehouse table would export it.

    python jobs/sample_warehouse.py OUT_DIR [--source ../shared/data/w8a.svm] [--files 4]

Rows become sparse user ids (not 0..n-1), triplets are shuffled and split over several files, and the columns are
named ``user_id``, ``feature_id``, ``value`` (the names ``jobs/warehouse-nightly.toml`` gives to the ingest).
Like any triplet table, it has no trace of all-zero rows: w8a's 49,749 rows become the 45,546 that have a feature.
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
    args = parser.parse_args()
    from sklearn.datasets import load_svmlight_file

    matrix = load_svmlight_file(args.source)[0].tocoo()
    rng = np.random.default_rng(args.seed)
    user_ids = np.sort(rng.choice(10 * matrix.shape[0], size=matrix.shape[0], replace=False)) + 1_000_000
    order = rng.permutation(matrix.nnz)
    rows, cols, vals = user_ids[matrix.row[order]], matrix.col[order].astype(np.int64), matrix.data[order]
    os.makedirs(args.out, exist_ok=True)
    for i, part in enumerate(np.array_split(np.arange(matrix.nnz), args.files)):
        table = pa.table({"user_id": rows[part], "feature_id": cols[part], "value": vals[part]})
        pq.write_table(table, os.path.join(args.out, f"part-{i:03d}.parquet"))
    print(f"wrote {matrix.nnz} triplets of a {matrix.shape[0]} x {matrix.shape[1]} matrix to {args.out} "
          f"({args.files} files)")


if __name__ == "__main__":
    main()
