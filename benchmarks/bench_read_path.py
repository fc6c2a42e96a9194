"""What the checked read path costs per power step: read + checks + norms against read + stored norms + kernel.

Every partition a step reads is now checked (structure, finite values), canonicalised and its row norms computed
from the values (never read from the stored ``row_norms``). This measures, in one process over one store, for each
partition: the read as before (values and stored norms), the read as now, and the power-step kernel on the block,
and prints the ratio of the added cost to a whole out-of-core step (read + kernel).

    PYTHONPATH=. python benchmarks/bench_read_path.py [--rows 400000] [--cols 5000] [--nnz-per-row 25]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import _common  # noqa: F401  (one BLAS thread)
import numpy as np
import scipy.sparse as sp

from dppca_dask.coordinator.sources import load_store_partition
from dppca_dask.kernels import power as K
from dppca_dask.storage import open_matrix, write_matrix
from dppca_dask.storage.validate import check_csr_arrays, safe_row_norms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--cols", type=int, default=5_000)
    parser.add_argument("--nnz-per-row", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    nnz = args.rows * args.nnz_per_row
    matrix = sp.csr_array((rng.standard_normal(nnz) * 0.1,
                           (np.repeat(np.arange(args.rows), args.nnz_per_row), rng.integers(0, args.cols, nnz))),
                          shape=(args.rows, args.cols))
    with tempfile.TemporaryDirectory() as tmp:
        store = write_matrix(f"{tmp}/s.zarr", matrix, rows_per_partition=100_000)
        store = open_matrix(store.path)
        x = rng.standard_normal(args.cols)
        x /= np.linalg.norm(x)
        def read_before() -> None:
            for part in store.partitions:  # no checks, stored norms
                store._read_raw(part).astype(np.float64)
                store.read_row_norms(part.index)

        def read_now() -> None:
            for part in store.partitions:
                load_store_partition(store, part.index)

        blocks = [load_store_partition(store, p.index) for p in store.partitions]

        def kernels() -> None:
            for loaded in blocks:
                K.gram_times(loaded.block, loaded.norms, x, row_norm_bound=1.0)

        def checks_only() -> None:  # the added work, on blocks already in memory
            for part, loaded in zip(store.partitions, blocks):
                b = loaded.block
                check_csr_arrays(b.indptr, b.indices, b.data, n_rows=b.shape[0], n_cols=b.shape[1])
                store._check_finite(part, b)
                b.has_canonical_format = False  # force the O(nnz) canonical-format scan
                _ = b.has_canonical_format
                safe_row_norms(b)

        def stored_norms_only() -> None:  # the work no longer done
            for part in store.partitions:
                store.read_row_norms(part.index)

        read_before(), read_now()  # warm the page cache and zarr's array handles
        old, new, kernel, added, saved = [], [], [], [], []
        for _ in range(args.repeats):  # interleaved, so that load on the machine affects all alike
            for timings, run in ((old, read_before), (new, read_now), (kernel, kernels), (added, checks_only),
                                 (saved, stored_norms_only)):
                t0 = time.perf_counter()
                run()
                timings.append(time.perf_counter() - t0)
        o, n, k, a, v = (float(np.median(t)) for t in (old, new, kernel, added, saved))
        print(f"{args.rows} x {args.cols}, {nnz} entries, {store.n_partitions} partitions, medians of {args.repeats}")
        print(f"read with structure checks only, stored norms (close to before): {o:.3f} s")
        print(f"read as now (checked, canonical, norms from values): {n:.3f} s")
        print(f"kernel (A^T A x with clipping): {k:.3f} s")
        print(f"checks alone (structure, finite, canonical scan, norms from values): {a:.3f} s; reading the stored "
              f"norms, no longer done: {v:.3f} s")
        print(f"added per out-of-core step: {a - v:+.3f} s = {100 * (a - v) / (o + k):+.1f}% of read + kernel "
              f"(measured end to end: {n - o:+.3f} s)")
        print("persisted partitions: the checks run once, when the partitions are loaded; per step: 0")


if __name__ == "__main__":
    main()
