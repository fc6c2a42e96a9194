"""Options shared by the commands that release (``pca``, ``lowrank``, ``window``, ``topics``, ``run``): where the run
executes (``--executor``) and the shape of the embedded LocalCluster."""

from __future__ import annotations

import argparse
import contextlib
from typing import Any

__all__ = ["EXECUTOR_HELP", "add_cluster_arguments", "add_executor_argument", "apply_cluster_arguments"]

#: What ``--executor`` does (the same for every command that releases).
EXECUTOR_HELP = (
    "where to run without --scheduler: 'local' in this process (a pool of threads, no cluster to start), 'cluster' "
    "on Dask (the active client or an embedded LocalCluster), 'auto' (default) in this process for stores of few "
    "partitions and columns (dppca_dask.executor.* in Dask's configuration: public values only), else the cluster"
)

_FIELDS = (
    ("n_workers", "n-workers"),
    ("threads_per_worker", "threads-per-worker"),
    ("memory_limit", "memory-limit"),
    ("dashboard_address", "dashboard-address"),
)


def add_executor_argument(parser: argparse.ArgumentParser, *, text: str = EXECUTOR_HELP,
                          default: str | None = "auto") -> None:
    """``--executor {auto,local,cluster}`` (the values of :data:`dppca_dask.coordinator.client.EXECUTORS`) with
    the help ``text``."""
    parser.add_argument("--executor", choices=("auto", "local", "cluster"), default=default, help=text)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "embedded Dask cluster",
        "used when no scheduler is given, no Dask client is active and the run does not execute in this process "
        "(--executor); defaults from Dask's configuration (dppca_dask.cluster.*)",
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
