"""Privacy accounting: DpEvents, their composition into (ε, δ), noise calibration, and the privacy report.

Built on Google's dp-accounting (0.6.0): the PLD accountant gives the reported figure, the RDP accountant a
cross-check. Gaussian events are merged exactly into one Gaussian before composition, and pure ε-DP events
(AboveThreshold) enter as the worst-case ε-DP privacy loss distribution.
"""

from __future__ import annotations

from dppca_dask.accounting.calibration import (
    CACHE_DIR_ENV,
    MIN_PLD_DELTA,
    cache_path,
    NoiseScaleCalibration,
    calibrate_gaussian,
    calibrate_noise_scale,
    clear_memory_cache,
)
from dppca_dask.accounting.composition import (
    DEFAULT_VALUE_DISCRETIZATION_INTERVAL,
    delta_for,
    epsilon_for,
    flatten_events,
    gaussian_delta,
    gaussian_epsilon,
    merged_gaussian_multiplier,
    pld_interval_for,
    summarise_events,
)
from dppca_dask.accounting.events import EVENT_TYPES, EpsilonDeltaDpEvent, event_from_json, event_to_json
from dppca_dask.accounting.report import (
    ADD_REMOVE_ROW,
    ENTRY_CHANGE,
    NOT_PRIVATE,
    REPLACE_ROW,
    ROW_CHANGE,
    PrivacyReport,
    build_report,
    group_events,
)
from dppca_dask.accounting.zcdp import (
    gaussian_rho,
    pure_dp_rho,
    zcdp_epsilon,
    zcdp_epsilon_loose,
    zcdp_rho_for,
)

__all__ = [
    "ADD_REMOVE_ROW",
    "CACHE_DIR_ENV",
    "MIN_PLD_DELTA",
    "DEFAULT_VALUE_DISCRETIZATION_INTERVAL",
    "ENTRY_CHANGE",
    "EVENT_TYPES",
    "NOT_PRIVATE",
    "REPLACE_ROW",
    "ROW_CHANGE",
    "NoiseScaleCalibration",
    "EpsilonDeltaDpEvent",
    "PrivacyReport",
    "build_report",
    "cache_path",
    "calibrate_gaussian",
    "calibrate_noise_scale",
    "clear_memory_cache",
    "delta_for",
    "epsilon_for",
    "event_from_json",
    "event_to_json",
    "flatten_events",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_rho",
    "group_events",
    "merged_gaussian_multiplier",
    "pld_interval_for",
    "pure_dp_rho",
    "summarise_events",
    "zcdp_epsilon",
    "zcdp_epsilon_loose",
    "zcdp_rho_for",
]
