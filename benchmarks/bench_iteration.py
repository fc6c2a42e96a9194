"""Time per iteration: the private adaptive-power step against a plain non-private Dask power iteration.

Both run over the same store, on the same LocalCluster, through the same coordinator (same persistence), and
alternate iteration by iteration (private, plain, private, plain, ...) so that drift in the machine affects both
alike. The last line is ``ratio <private / non-private median time per iteration>`` (goal: <= 1.1).

    python benchmarks/bench_iteration.py --quick          # under a minute
    python benchmarks/bench_iteration.py --rows 2000000   # larger
"""

from __future__ import annotations

import _common  # noqa: F401  (sets thread environment variables first)

import argparse
import os
import tempfile
import time

import numpy as np
from distributed import Client, LocalCluster

from dppca_dask.algorithms.adaptive_power import adaptive_power_run, default_top_m
from dppca_dask.algorithms.requests import PlainGramTimes
from dppca_dask.coordinator import Coordinator, as_source
from dppca_dask.datasets import PlantedSpec, write_low_coherence
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.mechanisms import NoiseSource, svt_cutoff


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small data, a few iterations (< 1 minute)")
    parser.add_argument("--rows", type=int, default=600_000)
    parser.add_argument("--cols", type=int, default=3_000)
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--persist", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--rows-per-partition", type=int, default=None)
    parser.add_argument("--workdir", default=None, help="where to write the generated store (default: a temp dir)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.cols, args.iterations = 150_000, 2_000, 6
    rpp = args.rows_per_partition or max(args.rows // 8, 1)

    workdir = args.workdir or tempfile.mkdtemp(prefix="dppca-bench-")
    path = os.path.join(workdir, f"planted-{args.rows}x{args.cols}.zarr")
    spec = PlantedSpec(n_rows=args.rows, n_cols=args.cols, nnz_per_row=30, support=200, signal_share=0.003, seed=7)
    t = time.perf_counter()
    if os.path.exists(path):
        from dppca_dask.storage import open_matrix

        store = open_matrix(path)
    else:
        store = write_low_coherence(path, spec, rows_per_partition=rpp, progress=False)
    print(f"store: {store.n_rows} x {store.n_cols}, nnz {store.nnz:,}, {store.n_partitions} partitions "
          f"(ready in {time.perf_counter() - t:.1f} s)")

    # A fixed, public calibration typical of (epsilon=1, delta=1e-6, T=5); the cost of a step does not depend on it.
    epsilon_svt, multiplier = 0.04, 13.0
    cutoff = svt_cutoff(epsilon_svt, 0.05)
    grid = ThresholdGrid.for_bound(1.0)
    top_m = default_top_m(cutoff=cutoff, epsilon_svt=epsilon_svt)

    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        with Coordinator(client, as_source(store), persist=args.persist) as coordinator:
            import warnings

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                noise = NoiseSource.from_seed(0)
            run = adaptive_power_run(
                n_cols=store.n_cols, n_iter=args.iterations + 2, n_components=1, row_norm_bound=1.0,
                epsilon_svt=epsilon_svt, noise_multiplier=multiplier, cutoff=cutoff, grid=grid, noise=noise,
                top_m=top_m,
            )
            x_plain = np.random.default_rng(1).standard_normal(store.n_cols)
            x_plain /= np.linalg.norm(x_plain)
            # Warm-up: loads (and persists) the partitions, imports on the workers.
            request = next(run)
            request = run.send(coordinator.execute(request))
            coordinator.execute(PlainGramTimes(x_plain))
            private_times, plain_times = [], []
            for _ in range(args.iterations):
                t = time.perf_counter()
                while True:  # one private iteration: the power step and, rarely, its second pass
                    aggregate = coordinator.execute(request)
                    request = run.send(aggregate)
                    if type(request).__name__ == "PowerStep":
                        break
                private_times.append(time.perf_counter() - t)
                t = time.perf_counter()
                y = coordinator.execute(PlainGramTimes(x_plain))
                x_plain = y / np.linalg.norm(y)
                plain_times.append(time.perf_counter() - t)
            run.close()
    private = float(np.median(private_times))
    plain = float(np.median(plain_times))
    rate = store.nnz / plain / args.workers
    print(f"private step:     median {private:.3f} s/iteration  (all: {', '.join(f'{v:.3f}' for v in private_times)})")
    print(f"non-private step: median {plain:.3f} s/iteration  (all: {', '.join(f'{v:.3f}' for v in plain_times)})")
    print(f"persisted partitions: {args.persist}; workers: {args.workers}; "
          f"non-private throughput {rate / 1e6:.1f} M nnz/s per core, private {store.nnz / private / args.workers / 1e6:.1f}")
    print(f"ratio {private / plain:.3f}")


if __name__ == "__main__":
    main()
