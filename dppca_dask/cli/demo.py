"""``dppca-dask demo``: the main job end to end on sample data and an embedded LocalCluster.

Ingests the sample data (LIBSVM's w8a when it is available, otherwise a generated low-coherence matrix), prints the
store's metadata, runs adaptive private power iteration, and prints the private components with their privacy
report, next to the exact answer for comparison (the comparison uses the exact, non-private answer and is for the
demo only: never publish such a comparison for private data).
"""

from __future__ import annotations

import argparse
import os
import warnings
from typing import Any

import numpy as np

__all__ = ["register"]

#: One line for ``dppca-dask --help`` (read without registering the command).
SUMMARY = "run the main job on sample data with an embedded LocalCluster"


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo",
        help=SUMMARY,
        description="Ingest sample data and compute a differentially private top component on a LocalCluster.",
    )
    p.add_argument("--data", default=None, help="a LIBSVM file to use (default: generate data)")
    p.add_argument("--n-features", type=int, default=None,
                   help="the public number of columns of --data (declared at ingest; otherwise inferred from the "
                        "data, which the privacy report then states is not covered)")
    p.add_argument("--workdir", default="build/demo", help="where the sample store is written")
    p.add_argument("--epsilon", type=float, default=1.0, help="privacy budget epsilon of the release (default 1)")
    p.add_argument("--delta", type=float, default=1e-6, help="privacy budget delta of the release (default 1e-6)")
    p.add_argument("--workers", type=int, default=None, help="LocalCluster workers (default: one per core)")
    p.add_argument("--row-norm-bound", type=_bound, default="auto",
                   help="the rows' L2 norm bound, or 'auto' (default): a private quantile of the row norms, released "
                        "with a share of the budget (w8a's binary rows have norms of about 3, so a bound of 1 clips "
                        "most of them)")
    p.set_defaults(handler=run)


def _bound(text: str) -> float | str:
    from dppca_dask.cli.pca import _bound as bound

    return bound(text)


def _sample_store(args: argparse.Namespace) -> Any:
    from dppca_dask.datasets import PlantedSpec, write_low_coherence
    from dppca_dask.storage import open_matrix

    os.makedirs(args.workdir, exist_ok=True)
    if args.data and os.path.exists(args.data):
        from dppca_dask.ingest import ingest

        path = os.path.join(args.workdir, "sample.zarr")
        print(f"ingesting {args.data} -> {path}")
        # Several partitions even for a small sample, so the demo exercises the partitioned path.
        return ingest(args.data, path, rows_per_partition=10_000, overwrite=True, n_features=args.n_features)
    if args.data:
        print(f"{args.data} not found; generating a low-coherence sample instead")
    path = os.path.join(args.workdir, "generated.zarr")
    spec = PlantedSpec(n_rows=100_000, n_cols=1_000, nnz_per_row=30, support=100, signal_share=0.01, seed=2026)
    if os.path.exists(path):
        store = open_matrix(path)
        if store.metadata.get("source", {}).get("seed") == spec.seed and store.n_rows == spec.n_rows:
            return store
    print(f"generating a {spec.n_rows} x {spec.n_cols} low-coherence sample -> {path}")
    return write_low_coherence(path, spec, rows_per_partition=20_000, overwrite=True)


def run(args: argparse.Namespace) -> int:
    from dppca_dask.api._pca import pca
    from dppca_dask.coordinator import connect
    from dppca_dask.cli.pca import format_result
    from dppca_dask.errors import NotPrivateWarning

    if args.workers is not None and args.workers < 1:  # before anything is written
        from dppca_dask.errors import InvalidParameterError

        raise InvalidParameterError(f"--workers must be >= 1; got {args.workers}; omit it for one per core")
    store = _sample_store(args)
    info = store.info()
    print(f"store: {info['n_rows']} rows x {info['n_cols']} columns, {info['nnz']} stored entries, "
          f"{info['n_partitions']} partitions, {info['size_on_disk'] / 2**20:.1f} MiB on disk")
    # The embedded LocalCluster of the library: everything on 127.0.0.1, no dashboard (or the active client).
    with connect(None, n_workers=args.workers) as client:
        workers = len(client.scheduler_info()["workers"])
        print(f"Dask cluster with {workers} workers at {client.scheduler.address}")
        result = pca(store, epsilon=args.epsilon, delta=args.delta, row_norm_bound=args.row_norm_bound, client=client,
                     timings=True)
        print()
        print(format_result(result))
        with warnings.catch_warnings():  # the exact answer is computed knowingly, for the comparison below
            warnings.simplefilter("ignore", NotPrivateWarning)
            # The same rows as the private run's: clipped to the bound it used (the released one for "auto").
            bound = (result.extras or {}).get("row_norm_bound", args.row_norm_bound)
            exact = pca(store, epsilon=args.epsilon, delta=args.delta, mechanism="exact", row_norm_bound=bound,
                        client=client)
    cos = float(abs(np.dot(result.components[0], exact.components[0])))
    print()
    print(f"demo check against the exact (non-private) top component: sin^2 = {1 - cos**2:.4g}")
    print(f"run time {result.timings['total']:.1f} s (calibration {result.timings['calibration']:.1f} s; "
          "timings are not covered by the privacy guarantee)")
    return 0
