"""Run time of a whole private PCA with hardened noise against the float samplers.

Generates a low-coherence matrix (``dppca_dask.datasets``) with d = 20,000 columns, ingests it into a store
(``dppca_dask.ingest``), then runs ``dppca_dask.pca`` (adaptive power, default T) with a private noise source of
each sampler, alternating hardened and float runs so that drift in the machine affects both alike, on the
in-process executor (``client="local"``) and on a 2-worker LocalCluster. Prints the median wall time of each and
ends with the line ``ratio <hardened run time / float run time>`` (sum of the two executors' medians).

    python benchmarks/bench_noise.py --quick      # 1 repetition per cell, fewer rows
    python benchmarks/bench_noise.py              # 3 repetitions per cell
"""

from __future__ import annotations

import _common  # (sets thread environment variables first)

import argparse
import os
import tempfile
import time
import warnings

from distributed import Client

import dppca_dask
from dppca_dask.datasets import PlantedSpec, low_coherence_matrix
from dppca_dask.ingest import ingest
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.hardened import discrete_gaussian


def _run(store: str, sampler: str, client: object, components: int) -> float:
    noise = NoiseSource.from_entropy(sampler)
    t = time.perf_counter()
    result = dppca_dask.pca(
        store, epsilon=1.0, delta=1e-6, n_components=components, client=client, noise=noise, progress=False
    )
    elapsed = time.perf_counter() - t
    assert result.private, "a run with an OS-seeded source must be marked private"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rows, one repetition per cell")
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--cols", type=int, default=20_000)
    parser.add_argument("--components", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workdir", default=None, help="where to write the generated store (default: a temp dir)")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repeats = 50_000, 1

    workdir = args.workdir or tempfile.mkdtemp(prefix="dppca-bench-noise-")
    path = os.path.join(workdir, f"planted-{args.rows}x{args.cols}.zarr")
    t = time.perf_counter()
    if not os.path.exists(path):
        spec = PlantedSpec(n_rows=args.rows, n_cols=args.cols, nnz_per_row=30, support=200, seed=7)
        ingest(low_coherence_matrix(spec), path, rows_per_partition=max(args.rows // 8, 1), progress=False)
    print(f"store: {args.rows} x {args.cols} (ready in {time.perf_counter() - t:.1f} s)")

    t = time.perf_counter()
    discrete_gaussian(10.0, args.cols, -37)
    print(f"one hardened Gaussian draw of {args.cols} values: {time.perf_counter() - t:.3f} s")

    times: dict[tuple[str, str], list[float]] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with _common.local_cluster(n_workers=args.workers, threads_per_worker=1, processes=True) as cluster, \
                Client(cluster) as client:
            executors = {"in-process": "local", "LocalCluster": client}
            _run(path, "float", "local", args.components)  # warm-up: imports, OpenDP library load, file cache
            _run(path, "hardened", "local", args.components)
            for _ in range(args.repeats):
                for executor, target in executors.items():
                    for sampler in ("hardened", "float"):
                        times.setdefault((executor, sampler), []).append(
                            _run(path, sampler, target, args.components)
                        )

    for executor in ("in-process", "LocalCluster"):
        h = _common.median(times[(executor, "hardened")])
        f = _common.median(times[(executor, "float")])
        print(f"{executor:13s} hardened {h:7.2f} s   float {f:7.2f} s   ratio {h / f:.3f}")
    hardened = sum(_common.median(v) for (_, s), v in times.items() if s == "hardened")
    floating = sum(_common.median(v) for (_, s), v in times.items() if s == "float")
    print(f"ratio {hardened / floating:.3f}")


if __name__ == "__main__":
    main()
