"""Sliding-window private covariance, PCA and regression over appended partitions (seed 001).

A window (the last ``30D`` of stamped partitions, or the last ``W`` rows) is released once as a ``d×d`` matrix
through the Gaussian (Analyze Gauss), Wishart or JL mechanism; every downstream task is post-processing of it.
"""

from __future__ import annotations

from dppca_dask.methods.window.release import RELEASES, WindowRelease, plan_window, window
from dppca_dask.methods.window.selection import WindowSelection, parse_duration, parse_timestamp, select_window
from dppca_dask.methods.window.tree import tree_window

__all__ = [
    "RELEASES",
    "WindowRelease",
    "WindowSelection",
    "parse_duration",
    "parse_timestamp",
    "plan_window",
    "select_window",
    "tree_window",
    "window",
]
