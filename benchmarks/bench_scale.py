"""Out-of-core against persisted: the private power step over the same store, side by side, at several sizes.

For each size it generates (once, in bounded memory) a low-coherence float32 store, starts two LocalClusters of
the same shape (2 workers x 1 thread by default): one holds the partitions in memory (persisted), the other re-reads
every partition from zarr in every step (out-of-core) with its workers capped in memory. Steps alternate between the
two (medians of interleaved repeats, so load on the machine affects both alike). It prints per size: the persisted
and out-of-core private step, the plain non-private step (persisted), a read-only pass (read, check, norms; no
kernel) with its read rate, the plain step out of core, and the peak resident memory of the out-of-core workers. The last two lines are
``ratio <private / non-private step, persisted>`` and ``ooc ratio <out-of-core step / persisted step>``, both at the
largest size.

    python benchmarks/bench_scale.py --quick                      # 2·10⁶ and 10⁷ entries, under two minutes
    python benchmarks/bench_scale.py --sizes 1e7,1e8 --workdir DIR
    python benchmarks/bench_scale.py --sizes 1e8 --codec lz4       # the same with Blosc lz4 chunks
"""

from __future__ import annotations

import _common  # (thread environment first)

import argparse
import math
import os
import tempfile
import time
from typing import Any

import numpy as np
from distributed import Client

from dppca_dask.methods.adaptive_power.sequential import default_top_m
from dppca_dask.coordinator.requests import PlainGramTimes, PowerStep
from dppca_dask.coordinator import Coordinator, as_source
from dppca_dask.datasets import PlantedSpec, write_low_coherence
from dppca_dask.kernels import ThresholdGrid
from dppca_dask.mechanisms import svt_cutoff
from dppca_dask.storage import MatrixStore, open_matrix

#: Stored entries per generated row (30 noise entries and the planted support of 200, minus rare collisions).
_PER_ROW = 230


def _read_only(store: MatrixStore, index: int) -> int:
    """What an out-of-core step reads per partition, without the kernel (runs on a worker)."""
    from dppca_dask.coordinator.sources import load_store_partition

    return int(load_store_partition(store, index).block.nnz)


def _store(workdir: str, nnz: float, cols: int, codec: str) -> MatrixStore:
    rows = max(int(nnz // _PER_ROW), 1)
    path = os.path.join(workdir, f"scale-{rows}x{cols}-{codec}.zarr")
    if os.path.exists(path):
        return open_matrix(path)
    spec = PlantedSpec(n_rows=rows, n_cols=cols, nnz_per_row=30, support=200, signal_share=0.003, seed=5)
    # at least 8 partitions, else about 128 MB of stored values and indices each
    parts = max(8, math.ceil(nnz * 8 / 2**27))
    return write_low_coherence(path, spec, dtype=np.float32, rows_per_partition=math.ceil(rows / parts),
                               progress=None, codec=codec)


def _stored_bytes(store: MatrixStore) -> int:
    """Bytes of the partitions' chunk files (values, indices, row pointers) on disk."""
    total = 0
    for name in ("data", "indices", "indptr"):
        for root, _dirs, files in os.walk(os.path.join(store.path, "X", name)):
            total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    return total


def _measure(store: MatrixStore, big_client: Client, small_client: Client, repeats: int) -> dict[str, Any]:
    grid = ThresholdGrid.for_bound(1.0)
    epsilon_svt = 0.03
    top_m = default_top_m(cutoff=svt_cutoff(epsilon_svt, 0.05), epsilon_svt=epsilon_svt)
    x = np.random.default_rng(0).standard_normal(store.n_cols)
    x /= np.linalg.norm(x)
    step = PowerStep(x, row_norm_bound=1.0, grid=grid, top_m=top_m)
    small_client.run(_reset_peak)
    with Coordinator(big_client, as_source(store), persist=True) as persisted, \
            Coordinator(small_client, as_source(store), persist=False) as ooc:
        for coordinator in (persisted, ooc):  # the first step pays for start-up and the first reads
            coordinator.execute(step)
        times: dict[str, list[float]] = {"persisted": [], "ooc": [], "plain": [], "plain_ooc": [], "read": []}
        for _ in range(repeats):
            for name, run in (
                ("persisted", lambda: persisted.execute(step)),
                ("ooc", lambda: ooc.execute(step)),
                ("plain", lambda: persisted.execute(PlainGramTimes(x))),
                ("plain_ooc", lambda: ooc.execute(PlainGramTimes(x))),
                ("read", lambda: sum(small_client.gather(small_client.map(
                    _read_only, [store] * store.n_partitions, range(store.n_partitions), pure=False)))),
            ):
                t = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - t)
    peaks = small_client.run(_peak_mib)
    return {**{k: _common.median(v) for k, v in times.items()}, "peak": max(peaks.values())}


def _reset_peak() -> None:
    """Start a new peak of resident memory for this worker (Linux: ``/proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_mib() -> float:
    """Peak resident memory of this worker since :func:`_reset_peak` (MiB; the process's peak where unsupported)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="2·10⁶ and 10⁷ entries, d = 5,000")
    parser.add_argument("--sizes", default="1e7,1e8", help="stored entries of each store, comma-separated")
    parser.add_argument("--cols", type=int, default=20_000)
    parser.add_argument("--codec", default="none", help="codec of generated stores: none, lz4 or zstd")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--memory-limit", default="1GiB", help="per out-of-core worker")
    parser.add_argument("--persisted-memory-limit", default="8GiB", help="per worker of the persisted cluster")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workdir", default=None, help="where the stores are kept (default: a new temporary one)")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.cols, args.repeats, args.memory_limit = "2e6,1e7", 5_000, 3, "600MiB"
    workdir = args.workdir or tempfile.mkdtemp(prefix="dppca-scale-")
    print(f"load average {os.getloadavg()[0]:.1f}; {args.workers} workers x 1 thread per cluster; codec {args.codec}")
    print(f"{'nnz':>12} {'parts':>5} {'persisted':>10} {'ooc':>8} {'plain':>8} {'plain ooc':>10} {'read pass':>10} "
          f"{'read MB/s':>10} {'M nnz/s read':>12} {'ooc peak MiB':>13} {'cap MiB':>8} {'ooc/pers':>8} "
          f"{'plain ooc/pers':>14}")
    result: dict[str, Any] = {}
    stores = [_store(workdir, float(size), args.cols, args.codec) for size in args.sizes.split(",")]
    shape = dict(n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0")
    with _common.local_cluster(**shape, memory_limit=args.persisted_memory_limit) as big, Client(big) as big_client, \
            _common.local_cluster(**shape, memory_limit=args.memory_limit) as small, Client(small) as small_client:
        cap = sum(w["memory_limit"] for w in small_client.scheduler_info(n_workers=-1)["workers"].values())
        for store in stores:
            result = _measure(store, big_client, small_client, args.repeats)
            disk = _stored_bytes(store)
            print(f"{store.nnz:>12,} {store.n_partitions:>5} {result['persisted']:>9.3f}s {result['ooc']:>7.3f}s "
                  f"{result['plain']:>7.3f}s {result['plain_ooc']:>9.3f}s {result['read']:>9.3f}s "
                  f"{disk / result['read'] / 1e6:>10.0f} {store.nnz / result['read'] / 1e6:>12.1f} "
                  f"{result['peak']:>13.0f} {cap / args.workers / 2**20:>8.0f} "
                  f"{result['ooc'] / result['persisted']:>8.2f} {result['plain_ooc'] / result['plain']:>14.2f}",
                  flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")
    print(f"ratio {result['persisted'] / result['plain']:.3f}")
    print(f"ooc ratio {result['ooc'] / result['persisted']:.3f}")


if __name__ == "__main__":
    main()
