"""What reading a partition costs against the private power-step kernel on it, for each codec.

One generated low-coherence partition (float32 values, int32 indices) is written once per codec. In one process,
interleaved repeats measure: the values and indices read through zarr (a slice of each array), the same read
straight into the partition's arrays (what the store does for its own layouts), the whole checked read a worker does
every out-of-core step (``read_partition_with_norms``: structure, finite values, canonical form, float64 values, row
norms from the values, into arrays reused from the previous read), and the power-step kernel on the block. The last line is
``ratio <checked read with the default codec / kernel>``.

    PYTHONPATH=. python benchmarks/bench_read_path.py [--nnz 1.6e7] [--cols 20000] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import _common  # noqa: F401  (one BLAS thread)
import numpy as np
import zarr

from dppca_dask.algorithms.adaptive_power import default_top_m
from dppca_dask.datasets import PlantedSpec, write_low_coherence
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.kernels import power as K
from dppca_dask.mechanisms import svt_cutoff
from dppca_dask.storage import _format
from dppca_dask.storage._chunks import POOL, chunk_layout, read_range


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nnz", type=float, default=1.6e7, help="stored entries of the partition")
    parser.add_argument("--cols", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    rows = int(args.nnz // 230) + 1
    spec = PlantedSpec(n_rows=rows, n_cols=args.cols, nnz_per_row=30, support=200, signal_share=0.003, seed=5)
    with tempfile.TemporaryDirectory() as tmp:
        stores = {codec: write_low_coherence(f"{tmp}/{codec}.zarr", spec, dtype=np.float32, rows_per_partition=rows,
                                             progress=False, codec=codec) for codec in _format.CODECS}
        nnz = stores["none"].nnz
        raw_bytes = nnz * 8
        arrays = {c: [zarr.open_group(s.path, mode="r")[f"X/{n}"] for n in ("data", "indices")]
                  for c, s in stores.items()}
        block, norms = stores["none"].read_partition_with_norms(0, dtype=np.float64)
        POOL.clear()  # the kernel's block keeps its arrays; the reads below reuse theirs, as on a worker
        x = np.random.default_rng(0).standard_normal(args.cols)
        x /= np.linalg.norm(x)
        grid = ThresholdGrid.for_bound(1.0)
        top_m = default_top_m(cutoff=svt_cutoff(0.03, 0.05), epsilon_svt=0.03)

        def kernel() -> None:
            K.power_partial(block, norms, x, partition=0, row_norm_bound=1.0, grid=grid, top_m=top_m)

        runs = {"kernel": kernel}
        for codec, store in stores.items():
            runs[f"{codec}: zarr"] = lambda a=arrays[codec]: [v[:] for v in a]
            runs[f"{codec}: direct"] = lambda a=arrays[codec]: [read_range(chunk_layout(v), 0, v.shape[0]) for v in a]
            runs[f"{codec}: checked"] = lambda s=store: s.read_partition_with_norms(0, dtype=np.float64)
        for run in runs.values():  # warm the page cache and the array handles
            run()
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.repeats):  # interleaved, so that load on the machine affects all alike
            for name, run in runs.items():
                t0 = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t0)
        med = {name: float(np.median(t)) for name, t in times.items()}
        print(f"one partition: {rows:,} x {args.cols:,}, {nnz:,} entries ({raw_bytes / 1e6:.0f} MB of float32 values "
              f"and int32 indices); medians of {args.repeats}; load average {os.getloadavg()[0]:.1f}")
        print(f"power-step kernel: {med['kernel']:.3f} s ({nnz / med['kernel'] / 1e6:.0f} M entries/s)")
        for codec, store in stores.items():
            disk = sum(os.path.getsize(os.path.join(r, f)) for n in ("data", "indices")
                       for r, _, fs in os.walk(os.path.join(store.path, "X", n)) for f in fs)
            z, d, c = med[f"{codec}: zarr"], med[f"{codec}: direct"], med[f"{codec}: checked"]
            print(f"{codec:>5}: {disk / 1e6:6.1f} MB on disk ({raw_bytes / disk:.2f}x); zarr {z:.3f} s "
                  f"({raw_bytes / z / 1e6:.0f} MB/s), direct {d:.3f} s ({raw_bytes / d / 1e6:.0f} MB/s), checked read "
                  f"{c:.3f} s = {c / med['kernel']:.2f} x kernel")
        print(f"ratio {med[f'{_format.DEFAULT_CODEC}: checked'] / med['kernel']:.3f}")


if __name__ == "__main__":
    main()
