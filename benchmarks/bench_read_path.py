"""What reading a partition costs against the private power-step kernel on it, for each codec and value type.

One generated low-coherence partition (float32 values, int32 indices) is written once per codec. In one process,
interleaved repeats measure: the values and indices read through zarr (a slice of each array), the same read
straight into the partition's arrays (what the store does for its own layouts), the whole checked read a worker does
every out-of-core step (``read_partition_with_norms``: structure, finite values, canonical form, float64 values, row
norms from the values, into arrays reused from the previous read) as a first read (every check) and as a re-read of
unchanged chunk files (``storage.store.CHECKED``: no canonical-form scan, the norms of the checked read), and the
power-step kernel on the block. The
kernel runs on the block as float64 (converted once, while it is read) and as float32 (as stored), each through
scipy's products (``block @ x``, which converts float32 values to float64 on every product) and through the chunked
loops of :mod:`dppca_dask.kernels._sparse` (both products on each chunk of rows while it is in cache; float32 values
converted chunk by chunk). The last lines are ``ratio <checked first read with the default codec / kernel>``,
``re-read ratio <re-read / kernel>`` and ``float32 ratio <float32 kernel before (scipy) / float32 kernel now>``.

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

from dppca_dask.methods.adaptive_power.sequential import default_top_m
from dppca_dask.datasets import PlantedSpec, write_low_coherence
from dppca_dask.kernels import ThresholdGrid, _sparse
from dppca_dask.kernels import power as K
from dppca_dask.mechanisms import svt_cutoff
from dppca_dask.storage import _format
from dppca_dask.storage._chunks import POOL, chunk_layout, read_range
from dppca_dask.storage.store import CHECKED, CheckedReads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nnz", type=float, default=1.6e7, help="stored entries of the partition")
    parser.add_argument("--cols", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="a partition of 2·10⁶ entries, three repeats")
    args = parser.parse_args()
    if args.quick:
        args.nnz, args.repeats = 2e6, 3
    rows = int(args.nnz // 230) + 1
    spec = PlantedSpec(n_rows=rows, n_cols=args.cols, nnz_per_row=30, support=200, signal_share=0.003, seed=5)
    with tempfile.TemporaryDirectory() as tmp:
        stores = {codec: write_low_coherence(f"{tmp}/{codec}.zarr", spec, dtype=np.float32, rows_per_partition=rows,
                                             progress=False, codec=codec) for codec in _format.CODECS}
        settled = time.time() + CheckedReads.SETTLED / 1e9
        nnz = stores["none"].nnz
        raw_bytes = nnz * 8
        arrays = {c: [zarr.open_group(s.path, mode="r")[f"X/{n}"] for n in ("data", "indices")]
                  for c, s in stores.items()}
        block, norms = stores["none"].read_partition_with_norms(0, dtype=np.float64)
        block32, _ = stores["none"].read_partition_with_norms(0)
        block32 = block32.copy()  # its own arrays (the reads below reuse the pooled ones)
        assert block32.dtype == np.float32
        POOL.clear()  # the kernel's block keeps its arrays; the reads below reuse theirs, as on a worker
        x = np.random.default_rng(0).standard_normal(args.cols)
        x /= np.linalg.norm(x)
        grid = ThresholdGrid.for_bound(1.0)
        top_m = default_top_m(cutoff=svt_cutoff(0.03, 0.05), epsilon_svt=0.03)
        loops = _sparse._sparsetools

        def kernel(b: object = block, chunked: bool = True) -> None:
            _sparse._sparsetools = loops if chunked else None  # None: every product through scipy's operators
            try:
                K.power_partial(b, norms, x, partition=0, row_norm_bound=1.0, grid=grid, top_m=top_m)
            finally:
                _sparse._sparsetools = loops

        runs = {"kernel": kernel, "kernel f64 scipy": lambda: kernel(block, False),
                "kernel f32 scipy": lambda: kernel(block32, False), "kernel f32": lambda: kernel(block32, True)}
        for codec, store in stores.items():
            runs[f"{codec}: zarr"] = lambda a=arrays[codec]: [v[:] for v in a]
            runs[f"{codec}: direct"] = lambda a=arrays[codec]: [read_range(chunk_layout(v), 0, v.shape[0]) for v in a]
            # A first read checks everything (the memo of checked reads emptied); a re-read finds its files unchanged.
            runs[f"{codec}: checked"] = lambda s=store: (CHECKED.clear(),
                                                         s.read_partition_with_norms(0, dtype=np.float64))
            runs[f"{codec}: re-read"] = lambda s=store: s.read_partition_with_norms(0, dtype=np.float64)
            runs[f"{codec}: checked f32"] = lambda s=store: (CHECKED.clear(), s.read_partition_with_norms(0))
        time.sleep(max(0.0, settled - time.time()))  # re-reads are kept only for files this much older than a check
        for run in runs.values():  # warm the page cache and the array handles
            run()
        hits = CHECKED.hits
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.repeats):  # interleaved, so that load on the machine affects all alike
            for name, run in runs.items():
                t0 = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t0)
        med = {name: float(np.median(t)) for name, t in times.items()}
        assert CHECKED.hits - hits == args.repeats * len(stores), "every re-read should find its files unchanged"
        print(f"one partition: {rows:,} x {args.cols:,}, {nnz:,} entries ({raw_bytes / 1e6:.0f} MB of float32 values "
              f"and int32 indices); medians of {args.repeats}; load average {os.getloadavg()[0]:.1f}")
        print(f"power-step kernel: {med['kernel']:.3f} s ({nnz / med['kernel'] / 1e6:.0f} M entries/s)")
        for name in ("kernel f64 scipy", "kernel f32", "kernel f32 scipy"):
            print(f"  {name:<17} {med[name]:.3f} s = {med[name] / med['kernel']:.2f} x kernel")
        for codec, store in stores.items():
            disk = sum(os.path.getsize(os.path.join(r, f)) for n in ("data", "indices")
                       for r, _, fs in os.walk(os.path.join(store.path, "X", n)) for f in fs)
            z, d, c = med[f"{codec}: zarr"], med[f"{codec}: direct"], med[f"{codec}: checked"]
            print(f"{codec:>5}: {disk / 1e6:6.1f} MB on disk ({raw_bytes / disk:.2f}x); zarr {z:.3f} s "
                  f"({raw_bytes / z / 1e6:.0f} MB/s), direct {d:.3f} s ({raw_bytes / d / 1e6:.0f} MB/s), checked read "
                  f"{c:.3f} s = {c / med['kernel']:.2f} x kernel ({raw_bytes / c / 1e6:.0f} MB/s; kept float32: "
                  f"{med[f'{codec}: checked f32']:.3f} s); re-read of unchanged files {med[f'{codec}: re-read']:.3f} s "
                  f"= {med[f'{codec}: re-read'] / c:.2f} x the checked read")
        print(f"ratio {med[f'{_format.DEFAULT_CODEC}: checked'] / med['kernel']:.3f}")
        print(f"re-read ratio {med[f'{_format.DEFAULT_CODEC}: re-read'] / med['kernel']:.3f}")
        print(f"float32 ratio {med['kernel f32 scipy'] / med['kernel f32']:.3f}")


if __name__ == "__main__":
    main()
