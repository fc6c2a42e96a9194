"""Algorithms as generators of requests: ``init → step(aggregate) → … → result``; they never see raw rows."""

from __future__ import annotations

from dppca_dask.algorithms.adaptive_power import AdaptivePowerOutput, AdaptivePowerState, adaptive_power_run
from dppca_dask.algorithms.analyze_gauss import AnalyzeGaussOutput, analyze_gauss_run
from dppca_dask.algorithms.exact import ExactOutput, exact_run

__all__ = [
    "AdaptivePowerOutput",
    "AdaptivePowerState",
    "AnalyzeGaussOutput",
    "ExactOutput",
    "adaptive_power_run",
    "analyze_gauss_run",
    "exact_run",
]
