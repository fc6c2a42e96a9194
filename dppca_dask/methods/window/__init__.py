"""Sliding-window private covariance, PCA and regression over appended partitions (seed 001).

A window (the last ``30D`` of stamped partitions, or the last ``W`` rows) is released once as a ``d×d`` matrix
through the Gaussian (Analyze Gauss), Wishart or JL mechanism; every downstream task is post-processing of it.
The entry point is :func:`dppca_dask.window`; this package holds its steps.
The public names are loaded on first use, so that the registry (:mod:`dppca_dask.methods`) can import this
family's entries (:mod:`~dppca_dask.methods.window.mechanisms`) without the coordinator.

Modules, in reading order:

1. :mod:`~dppca_dask.methods.window.selection`: windows over a store's partition table, by time or by rows;
2. :mod:`~dppca_dask.methods.window.calibration`: the releases' relation, constants and events from public
   parameters only;
3. :mod:`~dppca_dask.methods.window.mechanisms`: the registry entries of the releases (Gaussian, Wishart, JL);
4. :mod:`~dppca_dask.methods.window.gram`: the window's Gram matrix on Dask (its request and kernel task), and the
   Gram cache and private state files kept beside the store;
5. :mod:`~dppca_dask.methods.window.release`: a release's plan and its one release (from the exact Gram, the cached
   Grams or the spectral histogram), the partitions it is charged to, and the result
   :class:`~dppca_dask.methods.window.release.WindowRelease` with its loader;
6. :mod:`~dppca_dask.methods.window.tasks`: the downstream tasks, post-processing of the released matrix;
7. :mod:`~dppca_dask.methods.window.histogram`: the spectral histogram (``structure="spectral-histogram"``);
8. :mod:`~dppca_dask.methods.window.tree`: continual release by the binary tree mechanism (experimental,
   :func:`~dppca_dask.methods.window.tree.tree_window`);
9. :mod:`~dppca_dask.methods.window.budget`: the partition-scoped budget (a release charges each partition it
   reads);
10. :mod:`~dppca_dask.methods.window.job`: the ``sliding-window`` job (append the day's file, release the window,
    charge the partitions), the ``window`` entry's own job runner and dry run.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "RELEASES",
    "WindowRelease",
    "WindowSelection",
    "parse_duration",
    "parse_timestamp",
    "plan_window",
    "select_window",
    "tree_window",
]

_HOMES = {
    "RELEASES": "calibration",
    "WindowRelease": "release",
    "plan_window": "release",
    "WindowSelection": "selection",
    "parse_duration": "selection",
    "parse_timestamp": "selection",
    "select_window": "selection",
    "tree_window": "tree",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'dppca_dask.methods.window' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"dppca_dask.methods.window.{home}"), name)
    globals()[name] = value
    return value
