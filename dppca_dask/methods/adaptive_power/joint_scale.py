"""The joint noise scale: one common factor on every noise scale of a plan, so that all its releases together spend
its (ε, δ) under the PLD accountant (the shares of :class:`~dppca_dask.methods.adaptive_power.centring.CentredReleases`
fix their relative noise).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["joint_noise_scale"]


def joint_noise_scale(params: Any, events_at: Callable[[float], list[Any]], *, needed: bool) -> float:
    """The common factor on every noise scale of a plan so that all its releases together spend its (ε, δ).

    A plan first calibrates each release to its public share (the parts compose to at most the total by basic
    composition, which leaves budget unspent); ``events_at(s)`` gives the run's events with every noise scale
    ``s`` times those. The returned s is the smallest (to 1e-4 relative) whose PLD composition meets the total
    (:func:`~dppca_dask.accounting.calibrate_noise_scale`; never above it). 1.0 when the plan has no release beside
    its main one (``needed`` false: the main release is already calibrated to the whole total) or reproduces a
    paper's constants (``calibration="paper"``). Public values only.
    """
    from dppca_dask import accounting

    if not needed or getattr(params, "calibration", "standard") == "paper":
        return 1.0
    return accounting.calibrate_noise_scale(events_at, epsilon=params.epsilon, delta=params.delta).scale
