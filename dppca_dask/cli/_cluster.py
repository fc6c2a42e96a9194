"""Options of the embedded LocalCluster shared by the commands that run on Dask (``pca``, ``lowrank``, ``run``)."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

__all__ = ["add_cluster_arguments", "apply_cluster_arguments"]

_FIELDS = (
    ("n_workers", "n-workers"),
    ("threads_per_worker", "threads-per-worker"),
    ("memory_limit", "memory-limit"),
    ("dashboard_address", "dashboard-address"),
)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "embedded Dask cluster",
        "used when no scheduler is given and no Dask client is active; defaults from Dask's configuration "
        "(dppca_dask.cluster.*)",
    )
    group.add_argument("--n-workers", type=int, default=None, metavar="N",
                       help="worker processes (default: the cores this process may use)")
    group.add_argument("--threads-per-worker", type=int, default=None, metavar="N",
                       help="threads per worker process (default 1)")
    group.add_argument("--memory-limit", default=None, metavar="SIZE",
                       help="memory limit per worker, e.g. 4GiB (default: auto, the machine's memory shared)")
    group.add_argument("--dashboard-address", default=None, metavar="HOST:PORT",
                       help="serve the Dask dashboard there and print its link (default: no dashboard, no HTTP port)")


def apply_cluster_arguments(args: argparse.Namespace) -> contextlib.AbstractContextManager[Any]:
    """Validate the options given (exit code 2 on a bad value); a context in which Dask's configuration holds them
    (restored on exit)."""
    given: dict[str, Any] = {name: getattr(args, name) for name, _ in _FIELDS if getattr(args, name, None) is not None}
    if not given:
        return contextlib.nullcontext()
    from dppca_dask.coordinator.client import ClusterOptions

    ClusterOptions(**given)
    import dask.config

    return dask.config.set({f"dppca_dask.cluster.{key}": given[name] for name, key in _FIELDS if name in given})
