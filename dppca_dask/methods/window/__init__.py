"""Sliding-window private covariance, PCA and regression over appended partitions (seed 001).

A window (the last ``30D`` of stamped partitions, or the last ``W`` rows) is released once as a ``d×d`` matrix
through the Gaussian (Analyze Gauss), Wishart or JL mechanism; every downstream task is post-processing of it.
The entry point is :func:`dppca_dask.window`; this package holds its steps.
The public names are loaded on first use, so that the registry (:mod:`dppca_dask.methods`) can import this
family's entries (:mod:`~dppca_dask.methods.window.mechanisms`) without the coordinator.
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
