"""Out-of-core scale run: adaptive private power iteration over a store larger than the workers' memory.

Generates (once) a low-coherence matrix with at least 5·10⁸ stored entries straight to disk in bounded memory,
starts a LocalCluster whose total worker memory limit is below the data size, and runs private iterations with
partitions re-read from zarr every step, side by side with plain non-private iterations over the same store. It
reports time per iteration, throughput and the peak resident memory of every worker. The last line is
``ratio <private / non-private time per iteration>``.

    python benchmarks/bench_scale.py --quick                    # 2·10⁷ entries, under a minute
    python benchmarks/bench_scale.py --workdir /data/bench      # ≥ 5·10⁸ entries (several GB on disk)
"""

from __future__ import annotations

import _common  # noqa: F401  (thread environment first)

import argparse
import os
import tempfile
import time
import warnings

import numpy as np
from distributed import Client, LocalCluster

from dppca_dask.algorithms.adaptive_power import adaptive_power_run, default_top_m
from dppca_dask.algorithms.requests import PlainGramTimes, PowerStep
from dppca_dask.coordinator import Coordinator, as_source
from dppca_dask.datasets import PlantedSpec, write_low_coherence
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.mechanisms import NoiseSource, svt_cutoff
from dppca_dask.storage import open_matrix


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--nnz", type=float, default=5.2e8, help="target stored entries")
    parser.add_argument("--cols", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="1.5GiB", help="per worker")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    if args.quick:
        args.nnz, args.cols, args.iterations, args.memory_limit = 2e7, 5_000, 2, "400MiB"
    per_row = 30 + 200  # noise entries + planted support
    rows = int(args.nnz // per_row) + 1
    workdir = args.workdir or tempfile.mkdtemp(prefix="dppca-scale-")
    path = os.path.join(workdir, f"scale-{rows}x{args.cols}.zarr")
    spec = PlantedSpec(n_rows=rows, n_cols=args.cols, nnz_per_row=30, support=200, signal_share=0.003, seed=5)
    t = time.perf_counter()
    rpp = 10_000 if args.quick else None  # small partitions for the small memory limit of the quick run
    store = open_matrix(path) if os.path.exists(path) else write_low_coherence(
        path, spec, dtype=np.float32, rows_per_partition=rpp, progress=None)
    disk = store.size_on_disk()
    in_memory = store.nnz * 12 + store.n_rows * 16
    print(f"store: {store.n_rows:,} x {store.n_cols:,}, {store.nnz:,} stored entries (float32), "
          f"{store.n_partitions} partitions, {disk / 2**30:.2f} GiB on disk, {in_memory / 2**30:.2f} GiB as float64 "
          f"in memory (ready in {time.perf_counter() - t:.0f} s)")

    epsilon_svt, multiplier = 0.03, 10.0  # typical of (1, 1e-6) with T = 5; cost does not depend on it
    cutoff = svt_cutoff(epsilon_svt, 0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        noise = NoiseSource.from_seed(0)
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None,
                      memory_limit=args.memory_limit) as cluster, Client(cluster) as client:
        limit = sum(w["memory_limit"] for w in client.scheduler_info(n_workers=-1)["workers"].values())
        print(f"LocalCluster: {args.workers} workers, total memory limit {limit / 2**30:.2f} GiB "
              f"({'below' if limit < in_memory else 'NOT below'} the data's {in_memory / 2**30:.2f} GiB in memory)")
        with Coordinator(client, as_source(store), persist=False) as coordinator:
            run = adaptive_power_run(
                n_cols=store.n_cols, n_iter=args.iterations, n_components=1, row_norm_bound=1.0,
                epsilon_svt=epsilon_svt, noise_multiplier=multiplier, cutoff=cutoff,
                grid=ThresholdGrid.for_bound(1.0), noise=noise,
                top_m=default_top_m(cutoff=cutoff, epsilon_svt=epsilon_svt),
            )
            x = np.random.default_rng(0).standard_normal(store.n_cols)
            x /= np.linalg.norm(x)
            private_times, plain_times = [], []
            request = next(run)
            done = False
            while not done:
                t = time.perf_counter()
                try:
                    while True:
                        request = run.send(coordinator.execute(request))
                        if isinstance(request, PowerStep):
                            break
                except StopIteration:
                    done = True
                private_times.append(time.perf_counter() - t)
                t = time.perf_counter()
                y = coordinator.execute(PlainGramTimes(x))
                x = y / np.linalg.norm(y)
                plain_times.append(time.perf_counter() - t)
                print(f"  iteration {len(private_times)}: private {private_times[-1]:.1f} s, "
                      f"non-private {plain_times[-1]:.1f} s", flush=True)
        peaks = _common.worker_peak_rss_mib(client)
    private, plain = float(np.median(private_times)), float(np.median(plain_times))
    print(f"time per iteration: private {private:.2f} s, non-private {plain:.2f} s; "
          f"private throughput {store.nnz / private / args.workers / 1e6:.1f} M entries/s per worker")
    print("peak worker memory: " + ", ".join(f"{v:.0f} MiB" for v in peaks.values())
          + f" (limit {limit / args.workers / 2**20:.0f} MiB each)")
    print(f"ratio {private / plain:.3f}")


if __name__ == "__main__":
    main()
