"""Calibration of the window releases from public parameters only (no data): the relation, the constants and the
events. Shared by :func:`dppca_dask.window` and the registry entries of :mod:`~dppca_dask.methods.window.mechanisms`.
"""

from __future__ import annotations

import math
from typing import Any

from dppca_dask.accounting import ADD_REMOVE_ROW, calibrate_gaussian
from dppca_dask.accounting.events import EpsilonDeltaDpEvent
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms.wishart import jl_sigma, wishart_tau

__all__ = ["MAX_NOISE_DRAWS", "RELEASES", "ROW_WINDOW_NEIGHBOURING", "calibrate_release"]

#: The release mechanisms; ``"gaussian"`` is the default (chosen by measurement, see benchmarks/bench_window.py).
RELEASES: tuple[str, ...] = ("gaussian", "wishart", "jl")

#: Largest noise matrix of a Wishart or JL release, ``⌈τ⌉·d`` or ``m·d`` standard normals (2 GiB of float64);
#: larger ones are refused before anything is read, since a draw that fails for memory has already consumed its
#: release (and a partition-scoped budget).
MAX_NOISE_DRAWS = 2**28

#: The relation of a row window: adding or removing a row also moves the window's oldest row out or in.
ROW_WINDOW_NEIGHBOURING = "add/remove one row (row window: the oldest row of the window shifts in or out)"


def calibrate_release(
    release: str,
    *,
    dim: int,
    epsilon: float,
    delta: float,
    row_norm_bound: float,
    rows_window: bool,
    tau_rule: str = "thm11",
    sketch_rows: int | None = None,
    rank_bound: int = 1,
) -> tuple[str, dict[str, Any], tuple[Any, ...]]:
    """The neighbouring relation, public calibration and planned events of one window release (no data).

    A row window's neighbour also moves the oldest row out: the Gaussian release is calibrated to ``√2·c²``; the
    Wishart and JL releases run at ``(ε/2, δ/(1 + e^{ε/2}))`` (group privacy of two fixed-position changes).
    """
    if sketch_rows is not None and release != "jl":
        raise InvalidParameterError(f"sketch_rows applies to release='jl' only; got release={release!r}")
    c = row_norm_bound
    neighbouring = ROW_WINDOW_NEIGHBOURING if rows_window else ADD_REMOVE_ROW
    # the mechanism's own (ε, δ) for one fixed-position change; a row window is two such changes
    run_eps, run_delta = (epsilon / 2.0, delta / (1.0 + math.exp(epsilon / 2.0))) if rows_window else (epsilon, delta)
    calibration: dict[str, Any] = {"release": release, "row_norm_bound": c}
    if release == "gaussian":
        multiplier = calibrate_gaussian(epsilon=epsilon, delta=delta)
        calibration.update({"noise_multiplier": multiplier,
                            "l2_sensitivity": c * c * (math.sqrt(2.0) if rows_window else 1.0)})
        from dp_accounting import GaussianDpEvent

        events: tuple[Any, ...] = (GaussianDpEvent(multiplier),)
    elif release == "wishart":
        tau = float(math.ceil(wishart_tau(dim, epsilon=run_eps, delta=run_delta, rule=tau_rule)))
        if tau * dim > MAX_NOISE_DRAWS:
            raise InvalidParameterError(
                f"the Wishart release at epsilon={epsilon:g} draws tau={tau:.0f} rows of {dim} normals, more than "
                f"{MAX_NOISE_DRAWS} (its noise would also swamp the window); use release='gaussian' or a larger "
                "epsilon"
            )
        calibration.update({"tau": tau, "tau_rule": tau_rule, "mechanism_epsilon": run_eps,
                            "mechanism_delta": run_delta})
        events = (EpsilonDeltaDpEvent(epsilon, delta),)
    else:
        m = dim if sketch_rows is None else sketch_rows
        sigma = jl_sigma(sketch_rows=m, epsilon=run_eps, delta=run_delta, rank_bound=rank_bound)
        if m * dim > MAX_NOISE_DRAWS:
            raise InvalidParameterError(f"the JL release with sketch_rows={m} draws {m} rows of {dim} normals, more "
                                        f"than {MAX_NOISE_DRAWS}; choose fewer sketch_rows")
        calibration.update({"sigma": sigma, "sketch_rows": int(m), "rank_bound": int(rank_bound),
                            "mechanism_epsilon": run_eps, "mechanism_delta": run_delta})
        events = (EpsilonDeltaDpEvent(epsilon, delta),)
    return neighbouring, calibration, events
