"""Time per iteration: the private adaptive-power step against a plain non-private Dask power iteration.

For each store size, both run over the same store, on the same LocalCluster, through the same coordinator (same
persistence), and alternate iteration by iteration (private, plain, private, plain, ...) so that drift in the
machine affects both alike. Beside them, in this process on one core: scipy's ``Aᵀ(Ax)`` on one partition (the
reference throughput) and the private kernel on the same partition (CPU time, which load on a shared machine
inflates less than wall time); with the compiled loops on, also the private kernel against a plain step computed by
the compiled private step's own pass over blocks of rows (``A x`` and ``Aᵀw`` reading each block from memory once:
faster than scipy's two products), which isolates the private step's own work (the rows' scores, bins and the top
rows' per-bin sums).
Then, on the largest store, the private step on 1 worker × 1 thread against W workers × 1 thread (the speed-up from
more cores), and the same steps in this process on a pool of threads: private against plain on W threads, and the
private step on 1 thread against W (the in-process executor, which ``executor="auto"`` picks for stores of at most
16 partitions and 100,000 columns; the benchmark says which one ``auto`` picks for the store measured). Prints one
table and ends with the line ``ratio <private / non-private median time per iteration, largest store>`` (goal: <= 1.1).

    python benchmarks/bench_iteration.py --quick                 # 10^6 and 10^7 non-zeros, about a minute
    python benchmarks/bench_iteration.py --nnz 1e6 1e7 1e8       # the issue's table (d = 20,000, 8 partitions)
    python benchmarks/bench_iteration.py --nnz 1e8 --workdir DIR # reuse the stores generated in DIR
    DPPCA_DASK_NUMBA=0 python benchmarks/bench_iteration.py ...   # without the compiled loops (on wherever numba is)
"""

from __future__ import annotations

import _common  # (sets thread environment variables first)

import argparse
import os
import tempfile
import time
import warnings
from typing import Any

import numpy as np
from distributed import Client

from dppca_dask.methods.adaptive_power.sequential import adaptive_power_run, default_top_m
from dppca_dask.coordinator.requests import PlainGramTimes
from dppca_dask.coordinator import Coordinator, as_source
from dppca_dask.coordinator.sources import load_store_partition
from dppca_dask.datasets import PlantedSpec, write_low_coherence
from dppca_dask.kernels import ThresholdGrid, plain_gram_times, power_partial
from dppca_dask.mechanisms import NoiseSource, svt_cutoff

#: The generator's rows hold about this many non-zeros (30 noise entries and the planted direction's 200).
NNZ_PER_ROW = 230
#: A fixed, public calibration typical of (epsilon=1, delta=1e-6, T=5); the cost of a step does not depend on it.
EPSILON_SVT, MULTIPLIER = 0.04, 13.0


def _store(workdir: str, nnz: float, cols: int, partitions: int) -> Any:
    rows = max(int(round(nnz / NNZ_PER_ROW)), partitions)
    path = os.path.join(workdir, f"planted-{rows}x{cols}.zarr")
    if os.path.exists(path):
        from dppca_dask.storage import open_matrix

        return open_matrix(path)
    spec = PlantedSpec(n_rows=rows, n_cols=cols, nnz_per_row=30, support=200, signal_share=0.003, seed=7)
    return write_low_coherence(path, spec, rows_per_partition=-(-rows // partitions), progress=False)


def _private_run(store: Any, iterations: int) -> Any:
    cutoff = svt_cutoff(EPSILON_SVT, 0.05)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a seeded noise source (not private): the cost is what is measured here
        noise = NoiseSource.from_seed(0)
    return adaptive_power_run(
        n_cols=store.n_cols, n_iter=iterations + 2, n_components=1, row_norm_bound=1.0, epsilon_svt=EPSILON_SVT,
        noise_multiplier=MULTIPLIER, cutoff=cutoff, grid=ThresholdGrid.for_bound(1.0), noise=noise,
        top_m=default_top_m(cutoff=cutoff, epsilon_svt=EPSILON_SVT),
    )


def _private_step(coordinator: Coordinator, run: Any, request: Any) -> Any:
    """One private iteration: the power step and, rarely, its second pass; returns the next power step."""
    while True:
        request = run.send(coordinator.execute(request))
        if type(request).__name__ == "PowerStep":
            return request


def _cluster_steps(store: Any, workers: int, iterations: int, plain: bool) -> dict[str, Any]:
    """Median private (and plain) step on ``workers`` × 1 thread, partitions persisted, steps interleaved."""
    shape = dict(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    with _common.local_cluster(**shape) as cluster, Client(cluster) as client:
        return _steps(client, store, iterations, plain)


def _in_process_steps(store: Any, threads: int, iterations: int, plain: bool) -> dict[str, Any]:
    """As :func:`_cluster_steps` in this process, on a pool of ``threads`` threads: the executor that
    ``executor="auto"`` picks for a store of at most 16 partitions and 100,000 columns (the package's defaults)."""
    from dppca_dask.coordinator.client import InProcessClient

    with InProcessClient(threads) as client:
        return _steps(client, store, iterations, plain)


def _steps(client: Any, store: Any, iterations: int, plain: bool) -> dict[str, Any]:
    with Coordinator(client, as_source(store), persist=True) as coordinator:
        run = _private_run(store, iterations)
        t = time.perf_counter()
        request = run.send(coordinator.execute(next(run)))  # loads and persists the partitions
        first = time.perf_counter() - t
        x_plain = np.random.default_rng(1).standard_normal(store.n_cols)
        x_plain /= np.linalg.norm(x_plain)
        if plain:
            coordinator.execute(PlainGramTimes(x_plain))
        private_times, plain_times = [], []
        for _ in range(iterations):
            t = time.perf_counter()
            request = _private_step(coordinator, run, request)
            private_times.append(time.perf_counter() - t)
            if plain:
                t = time.perf_counter()
                y = coordinator.execute(PlainGramTimes(x_plain))
                x_plain = y / np.linalg.norm(y)
                plain_times.append(time.perf_counter() - t)
        run.close()
    return {"first": first, "private": float(np.median(private_times)),
            "plain": float(np.median(plain_times)) if plain_times else float("nan"),
            "all_private": private_times, "all_plain": plain_times}


def _same_loop_plain(block: Any, x: np.ndarray) -> np.ndarray:
    """The plain step's ``Aᵀ(Ax)`` with the compiled private step's own pass (no clipping: an infinite bound makes
    every row's weight its product): the plain step the private one would be compared with if it had the same
    loops."""
    from dppca_dask.kernels import power

    n, d = block.shape
    out = np.zeros(d)
    power._pass_jit(power._unsigned(block.indptr), power._unsigned(block.indices), block.data, x,
                    np.ones(n), np.inf, np.empty(n), np.empty(n), out, power.PASS_ENTRIES)
    return out


def _one_core(store: Any, repeats: int = 7) -> dict[str, float]:
    """CPU seconds on one partition in this process: scipy ``Aᵀ(Ax)`` and the private kernel, interleaved (and, with
    the compiled loops on, the plain step by the private step's compiled pass, which is faster than scipy's)."""
    from dppca_dask.kernels._jit import HAVE_NUMBA

    part = load_store_partition(store, 0)
    grid = ThresholdGrid.for_bound(1.0)
    top_m = default_top_m(cutoff=svt_cutoff(EPSILON_SVT, 0.05), epsilon_svt=EPSILON_SVT)
    x = np.random.default_rng(2).standard_normal(store.n_cols)
    x /= np.linalg.norm(x)
    scipy_times, kernel_times, same_times = [], [], []
    power_partial(part.block, part.norms, x, partition=0, row_norm_bound=1.0, grid=grid, top_m=top_m)  # compile
    if HAVE_NUMBA:
        assert np.allclose(_same_loop_plain(part.block, x), plain_gram_times(part.block, x), rtol=1e-12, atol=0)
    for _ in range(repeats):
        t = time.process_time()
        plain_gram_times(part.block, x)
        scipy_times.append(time.process_time() - t)
        t = time.process_time()
        power_partial(part.block, part.norms, x, partition=0, row_norm_bound=1.0, grid=grid, top_m=top_m)
        kernel_times.append(time.process_time() - t)
        if HAVE_NUMBA:
            t = time.process_time()
            _same_loop_plain(part.block, x)
            same_times.append(time.process_time() - t)
    nnz = part.block.nnz
    kernel = float(np.median(kernel_times))
    return {"scipy_rate": nnz / float(np.median(scipy_times)), "kernel_ratio": kernel / float(np.median(scipy_times)),
            "same_loop_ratio": kernel / float(np.median(same_times)) if same_times else float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="10^6 and 10^7 non-zeros, 4 iterations, no scaling, no in-process steps")
    parser.add_argument("--nnz", type=float, nargs="+", default=[1e6, 1e7, 1e8], help="store sizes (non-zeros)")
    parser.add_argument("--cols", type=int, default=20_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--iterations", type=int, default=24,
                        help="interleaved private and plain steps per store (the medians of 8 steps are unsteady: at "
                             "10^8 entries four runs in a row ended between 1.06 and 1.20)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-scaling", action="store_true", help="skip the 1-worker vs W-worker comparison")
    parser.add_argument("--no-in-process", action="store_true",
                        help="skip the in-process executor's steps (W threads against 1, private against plain)")
    parser.add_argument("--workdir", default=None, help="where the generated stores are (or go; default: a temp dir)")
    args = parser.parse_args()
    if args.quick:
        args.nnz, args.iterations, args.no_scaling, args.no_in_process = [1e6, 1e7], 4, True, True
    workdir = args.workdir or tempfile.mkdtemp(prefix="dppca-bench-")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    from dppca_dask.kernels._jit import HAVE_NUMBA, NUMBA_INSTALLED

    print(f"load average at start {load:.1f}; {args.workers} workers x 1 thread; d = {args.cols:,}; "
          f"{args.partitions} partitions; medians of {args.iterations} interleaved steps; compiled loops "
          + ("on (numba installed; DPPCA_DASK_NUMBA=0 turns them off, and the workers inherit it)" if HAVE_NUMBA
             else "off (DPPCA_DASK_NUMBA=0)" if NUMBA_INSTALLED else "off (numba is not installed)"))

    rows, stores = [], []
    for nnz in args.nnz:
        store = _store(workdir, nnz, args.cols, args.partitions)
        stores.append(store)
        steps = _cluster_steps(store, args.workers, args.iterations, plain=True)
        core = _one_core(store)
        rows.append({
            "nnz": f"{store.nnz:.3g}", "private s": steps["private"], "plain s": steps["plain"],
            "ratio": steps["private"] / steps["plain"],
            "private nnz/s/core": f"{store.nnz / steps['private'] / args.workers / 1e6:.0f}M",
            "scipy 1 core nnz/s": f"{core['scipy_rate'] / 1e6:.0f}M",
            "kernel/scipy (CPU)": core["kernel_ratio"], "kernel/same-loop plain": core["same_loop_ratio"],
            "first step s": steps["first"],
        })
        print(f"  {store.nnz:.3g} nnz: private {', '.join(f'{v:.3f}' for v in steps['all_private'])}; "
              f"plain {', '.join(f'{v:.3f}' for v in steps['all_plain'])}", flush=True)
    print(_common.table(rows, list(rows[0])))
    if not args.no_scaling and args.workers > 1:
        one = _cluster_steps(stores[-1], 1, args.iterations, plain=False)
        many = _cluster_steps(stores[-1], args.workers, args.iterations, plain=False)
        print(f"private step on {stores[-1].nnz:.3g} nnz: 1 worker {one['private']:.3f} s, {args.workers} workers "
              f"{many['private']:.3f} s: speed-up {one['private'] / many['private']:.2f}")
    if not args.no_in_process:
        # The same coordinator and tasks on a pool of threads in this process, without the scheduler's and the
        # workers' processes: private against plain (interleaved), then private steps alone on 1 thread and on W,
        # in the order and the way the cluster's speed-up above is measured
        from dppca_dask.coordinator.client import choose_executor

        largest = stores[-1]
        choice = choose_executor(None, n_cols=largest.n_cols, n_partitions=largest.n_partitions)
        both = _in_process_steps(largest, args.workers, args.iterations, plain=True)
        print(f"in process on {largest.nnz:.3g} nnz, {args.workers} threads (executor='auto' picks {choice.executor} "
              f"here: {choice.reason}): private {both['private']:.3f} s, plain {both['plain']:.3f} s: ratio "
              f"{both['private'] / both['plain']:.3f}; {largest.nnz / both['private'] / args.workers / 1e6:.0f}M "
              f"nnz/s per thread")
        if args.workers > 1:
            one = _in_process_steps(largest, 1, args.iterations, plain=False)
            many = _in_process_steps(largest, args.workers, args.iterations, plain=False)
            print(f"private step in process on {largest.nnz:.3g} nnz: 1 thread {one['private']:.3f} s, "
                  f"{args.workers} threads {many['private']:.3f} s: speed-up {one['private'] / many['private']:.2f}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"load average at end {load:.1f}")
    print(f"ratio {rows[-1]['ratio']:.3f}")


if __name__ == "__main__":
    main()
