"""The entry points, side by side: :func:`pca`, :func:`lowrank`, :func:`window` and :func:`topics`.

Each reads the same way: open the input, plan the release from public values only (nothing is read before the
noise is calibrated and the budget reserved), execute it on the chosen executor, and report (a frozen result with
its privacy report, provenance and diagnostics). The families' own steps live in :mod:`dppca_dask.methods`; the
scikit-learn estimator :class:`~dppca_dask.estimator.DPPCA` is in :mod:`dppca_dask.estimator`.

- :mod:`~dppca_dask.api._pca`: :func:`pca`, :func:`plan_release`, the mechanism names and their registration;
- :mod:`~dppca_dask.api._lowrank`: :func:`lowrank` (its Hardt-Roth steps in
  :mod:`dppca_dask.methods.hardt_roth.entry`);
- :mod:`~dppca_dask.api._window`: :func:`window` (its steps in :mod:`dppca_dask.methods.window.release`);
- :mod:`~dppca_dask.api._topics`: :func:`topics` (its steps in :mod:`dppca_dask.methods.tensor.topics`);
- the plumbing they share: opening an AnnData input (``_input``), progress and log lines (``_progress``),
  provenance and timings (``_provenance``), pca's report, extras and diagnostics (``_pca_report``).
"""

from __future__ import annotations

from dppca_dask.api._lowrank import lowrank
from dppca_dask.api._pca import ReleasePlan, mechanisms, pca, plan_release, register_mechanism
from dppca_dask.api._topics import topics
from dppca_dask.api._window import window
from dppca_dask.methods import MechanismPlan
from dppca_dask.methods._params import (
    ADD_REMOVE_ROW,
    DEFAULT_N_ITER,
    DEFAULT_SVT_SHARE,
    MAX_EPSILON,
    MAX_GRID_OCTAVES,
    MAX_GRID_PER_OCTAVE,
    MAX_N_ITER,
    MIN_DELTA,
    NON_PRIVATE_MECHANISMS,
    PCA_DEFAULTS,
    ROW_NORM_BOUND_RANGE,
    PCAParameters,
    default_mechanism,
    validate_parameters,
)
from dppca_dask.methods.hardt_roth.lowrank_plan import LowRankPlan, plan_lowrank, validate_lowrank
from dppca_dask.results import LowRankResult, load_lowrank

__all__ = [
    "ADD_REMOVE_ROW",
    "DEFAULT_N_ITER",
    "DEFAULT_SVT_SHARE",
    "MAX_EPSILON",
    "MAX_GRID_OCTAVES",
    "MAX_GRID_PER_OCTAVE",
    "MAX_N_ITER",
    "MIN_DELTA",
    "NON_PRIVATE_MECHANISMS",
    "PCA_DEFAULTS",
    "ROW_NORM_BOUND_RANGE",
    "LowRankPlan",
    "LowRankResult",
    "MechanismPlan",
    "PCAParameters",
    "ReleasePlan",
    "default_mechanism",
    "load_lowrank",
    "lowrank",
    "mechanisms",
    "pca",
    "plan_lowrank",
    "plan_release",
    "register_mechanism",
    "topics",
    "validate_lowrank",
    "validate_parameters",
    "window",
]
