"""Validation and planning of the ``lowrank`` entry (Hardt-Roth 2012 and 2013), from public values only.

Every public parameter of :func:`dppca_dask.lowrank` is checked here exactly as a run checks it, and a run
on a store of a given shape is planned (its relation, calibrated constants and DpEvents) without reading the data.
Below both the entry point and the family's registry entries (:mod:`dppca_dask.methods.hardt_roth.lowrank_mechanisms`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods._params import MAX_N_ITER as PCA_MAX_N_ITER
from dppca_dask.methods._registry import mechanism_names

__all__ = ["LowRankPlan", "plan_lowrank", "validate_lowrank"]


def _positive(name: str, value: Any, *, allow_inf: bool = False) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"{name} must be a number; got {value!r}") from None
    if math.isnan(out) or out <= 0 or (math.isinf(out) and not allow_inf):
        raise InvalidParameterError(f"{name} must be {'> 0' if allow_inf else 'finite and > 0'}; got {out}")
    return out


def _integer(name: str, value: Any, minimum: int, *, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidParameterError(f"{name} must be an integer >= {minimum}; got {value!r}")
    if maximum is not None and value > maximum:
        raise InvalidParameterError(f"{name} must be an integer <= {maximum}; got {value!r}")
    return int(value)


_SPECIFIC: dict[str, tuple[str, ...]] = {
    "private-low-rank": ("oversampling", "projection", "prune_alpha", "left_factor", "truncate"),
    "randomized-response": ("max_dense_bytes",),
    "private-power": ("entry_bound", "coherence", "c_doubling", "n_iter", "symmetric", "signed_values"),
}
_ROW_PARAMETERS = ("row_norm_bound", "row_change_bound")


#: Bounds on public parameters (issue: absurd values must fail before anything is read, not deep in calibration).
MAX_EPSILON = 100.0
MIN_DELTA = 1e-30
MAX_RANK = 100_000
#: Largest ``n_iter`` of private power iteration: every iteration is a pass over the data, as for :func:`dppca_dask.pca`,
#: whose limit (:data:`dppca_dask.methods._params.MAX_N_ITER`, with the cost measured there) this is.
MAX_N_ITER = PCA_MAX_N_ITER
MAX_BOUND = 1e100


def _bounded(name: str, value: Any, *, allow_inf: bool = False) -> float:
    out = _positive(name, value, allow_inf=allow_inf)
    if math.isfinite(out) and not 1.0 / MAX_BOUND <= out <= MAX_BOUND:
        raise InvalidParameterError(
            f"{name} must be in [{1.0 / MAX_BOUND:g}, {MAX_BOUND:g}] (noise scales are proportional to it); got "
            f"{out:g}; rescale the data instead"
        )
    return out


def _validate(
    *, rank: Any, epsilon: Any, delta: Any, mechanism: str, oversampling: Any, calibration: str, projection: str,
    prune_alpha: Any, left_factor: str, truncate: bool, row_norm_bound: Any, row_change_bound: Any,
    max_dense_bytes: Any, entry_bound: Any, coherence: Any, c_doubling: bool, n_iter: Any, symmetric: bool,
    signed_values: bool,
) -> tuple[dict[str, Any], str]:
    """Every public parameter of :func:`~dppca_dask.lowrank` checked, without the data: (parameters, neighbouring relation)."""
    from dppca_dask.methods.hardt_roth.relations import entry_relation, row_change_relation
    from dppca_dask.methods.hardt_roth.power_iteration import DEFAULT_PRIVATE_POWER_N_ITER
    from dppca_dask.methods.hardt_roth.randomized_response import DEFAULT_MAX_DENSE_BYTES

    if mechanism not in mechanism_names("lowrank"):
        raise InvalidParameterError(
            f"mechanism must be one of {', '.join(mechanism_names('lowrank'))}; got {mechanism!r}"
        )
    for name, flag in (("truncate", truncate), ("c_doubling", c_doubling), ("symmetric", symmetric),
                       ("signed_values", signed_values)):
        if not isinstance(flag, (bool, np.bool_)):  # bool("False") is True: never coerce a flag
            raise InvalidParameterError(f"{name} must be True or False; got {flag!r}")
    given = {
        "oversampling": oversampling != 2, "projection": projection != "paper", "prune_alpha": prune_alpha != 1.0,
        "left_factor": left_factor != "orthonormal", "truncate": bool(truncate),
        "max_dense_bytes": max_dense_bytes is not None, "entry_bound": entry_bound != 1.0,
        "coherence": coherence is not None, "c_doubling": bool(c_doubling), "n_iter": n_iter is not None,
        "symmetric": bool(symmetric), "signed_values": bool(signed_values), "row_norm_bound": row_norm_bound != 1.0,
        "row_change_bound": row_change_bound is not None,
    }
    allowed = set(_SPECIFIC[mechanism]) | (set(_ROW_PARAMETERS) if mechanism != "private-power" else set())
    wrong = [name for name, is_set in given.items() if is_set and name not in allowed]
    if wrong:
        raise InvalidParameterError(f"{', '.join(wrong)} do not apply to mechanism={mechanism!r}")
    epsilon = _positive("epsilon", epsilon)
    if epsilon > MAX_EPSILON:
        raise InvalidParameterError(
            f"epsilon must be <= {MAX_EPSILON:g} (a larger epsilon protects nothing); got {epsilon:g}"
        )
    try:
        delta = float(delta)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"delta must be a number; got {delta!r}") from None
    if not MIN_DELTA <= delta < 1.0:
        raise InvalidParameterError(
            f"delta must be in [{MIN_DELTA:g}, 1); got {delta}; pass e.g. delta=1e-6 (or below 1/n_rows)"
        )
    rank = _integer("rank", rank, 1, maximum=MAX_RANK)
    if calibration not in ("standard", "paper"):
        raise InvalidParameterError(f"calibration must be 'standard' or 'paper'; got {calibration!r}")
    parameters: dict[str, Any] = {"mechanism": mechanism, "epsilon": epsilon, "delta": delta, "rank": rank,
                                  "calibration": calibration}
    if mechanism == "private-power":
        entry_bound = _bounded("entry_bound", entry_bound)
        if coherence is not None:
            coherence = _bounded("coherence", coherence)
            if coherence < 1.0:
                raise InvalidParameterError(
                    f"coherence must be >= 1 (the coherence of any matrix is >= 1); got {coherence}"
                )
        iters = DEFAULT_PRIVATE_POWER_N_ITER if n_iter is None else _integer("n_iter", n_iter, 1, maximum=MAX_N_ITER)
        if rank > 1 and not symmetric:
            raise InvalidParameterError(
                f"mechanism='private-power' with rank={rank} needs symmetric=True (a symmetric PSD store); use "
                "mechanism='private-low-rank' for an asymmetric store"
            )
        parameters.update(entry_bound=entry_bound, coherence=coherence, c_doubling=bool(c_doubling),
                          n_iter=iters, symmetric=bool(symmetric), signed_values=bool(signed_values))
        neighbouring = entry_relation(entry_bound)
    else:
        clip = _bounded("row_norm_bound", row_norm_bound, allow_inf=True)
        if row_change_bound is None:
            if math.isinf(clip):
                raise InvalidParameterError(
                    "row_norm_bound=inf leaves rows unbounded; give row_change_bound (the L2 change of one row the "
                    "guarantee covers) or a finite row_norm_bound"
                )
            change = clip
        else:
            change = _bounded("row_change_bound", row_change_bound)
        parameters.update(row_norm_bound=clip, row_change_bound=change)
        neighbouring = row_change_relation(change)
        if mechanism == "private-low-rank":
            oversampling = _integer("oversampling", oversampling, 0, maximum=MAX_RANK)
            prune_alpha = _positive("prune_alpha", prune_alpha)
            if left_factor not in ("orthonormal", "pruned"):
                raise InvalidParameterError(f"left_factor must be 'orthonormal' or 'pruned'; got {left_factor!r}")
            if projection not in ("paper", "tight"):
                raise InvalidParameterError(f"projection must be 'paper' or 'tight'; got {projection!r}")
            parameters.update(oversampling=oversampling, projection=projection, prune_alpha=prune_alpha,
                              left_factor=left_factor, truncate=bool(truncate))
        else:
            limit = DEFAULT_MAX_DENSE_BYTES if max_dense_bytes is None else _integer("max_dense_bytes",
                                                                                     max_dense_bytes, 1)
            parameters.update(max_dense_bytes=limit)
    return parameters, neighbouring


@dataclass(frozen=True)
class LowRankPlan:
    """What a complete :func:`~dppca_dask.lowrank` run on a store of a given (public) shape releases, known before the run."""

    mechanism: str
    neighbouring: str
    """The relation the guarantee is stated for."""
    events: tuple[Any, ...]
    """The DpEvents a complete run emits (the same accounting as the run's report): a ledger reserves these."""
    parameters: Mapping[str, Any]
    calibration: Mapping[str, Any]
    """Public calibrated constants."""


def _plan_shape(p: Mapping[str, Any], neighbouring: str, n_rows: int, n_cols: int) -> LowRankPlan:
    from dp_accounting import dp_event

    from dppca_dask.methods.hardt_roth.randomized_response import dense_bytes_needed
    from dppca_dask.methods.hardt_roth.low_rank_calibration import calibrate_private_low_rank, rr_sigma
    from dppca_dask.methods.hardt_roth.power_iteration import planned_private_power

    mechanism, epsilon, delta, rank, calibration = p["mechanism"], p["epsilon"], p["delta"], p["rank"], p["calibration"]
    if mechanism == "private-low-rank":
        width = rank + p["oversampling"]
        if width > min(n_rows, n_cols):
            raise InvalidParameterError(
                f"rank + oversampling = {width} must be <= min(n_rows, n_cols) = {min(n_rows, n_cols)}; lower them"
            )
        cal = calibrate_private_low_rank(epsilon=epsilon, delta=delta, rank=rank, oversampling=p["oversampling"],
                                         calibration=calibration, projection=p["projection"])
        calibration_info = cal.to_dict()
        events = list(cal.events())
    elif mechanism == "randomized-response":
        if rank > min(n_rows, n_cols):
            raise InvalidParameterError(f"rank must be <= min(n_rows, n_cols) = {min(n_rows, n_cols)}; got {rank}")
        need = dense_bytes_needed(n_rows, n_cols)
        if need > p["max_dense_bytes"]:
            raise InvalidParameterError(
                f"randomized-response densifies the {n_rows}x{n_cols} matrix at the coordinator and would need about "
                f"{need / 2**30:.2f} GiB ({need} bytes), more than max_dense_bytes={p['max_dense_bytes']}; "
                "use mechanism='private-low-rank', or raise max_dense_bytes if the coordinator has the memory"
            )
        sigma = rr_sigma(epsilon, delta, calibration=calibration)
        calibration_info = {"sigma": sigma, "calibration": calibration}
        events = [dp_event.GaussianDpEvent(sigma)]
    else:
        if rank > n_cols:
            raise InvalidParameterError(f"rank must be <= the number of columns ({n_cols}); got {rank}")
        pp = planned_private_power(
            n_rows=n_rows, n_cols=n_cols, epsilon=epsilon, delta=delta, n_iter=p["n_iter"], n_components=rank,
            symmetric=p["symmetric"], coherence=p["coherence"], c_doubling=p["c_doubling"], calibration=calibration,
            release_values=True,
        )
        calibration_info = pp.to_dict()
        events = list(pp.events())
    return LowRankPlan(mechanism=mechanism, neighbouring=neighbouring, events=tuple(events), parameters=dict(p),
                       calibration=calibration_info)


#: Defaults of :func:`~dppca_dask.lowrank`'s public parameters (for planning without running).
_PLAN_DEFAULTS: dict[str, Any] = {
    "mechanism": "private-low-rank", "oversampling": 2, "calibration": "standard", "projection": "paper",
    "prune_alpha": 1.0, "left_factor": "orthonormal", "truncate": False, "row_norm_bound": 1.0,
    "row_change_bound": None, "max_dense_bytes": None, "entry_bound": 1.0, "coherence": None,
    "c_doubling": False, "n_iter": None, "symmetric": False, "signed_values": False,
}


def validate_lowrank(*, rank: Any, epsilon: Any, delta: Any, **parameters: Any) -> dict[str, Any]:
    """Every public parameter of :func:`~dppca_dask.lowrank` checked with its defaults, without the data (the same errors)."""
    unknown = sorted(set(parameters) - set(_PLAN_DEFAULTS))
    if unknown:
        raise InvalidParameterError(f"unknown lowrank parameters: {', '.join(unknown)}")
    return _validate(rank=rank, epsilon=epsilon, delta=delta, **{**_PLAN_DEFAULTS, **parameters})[0]


def plan_lowrank(
    n_rows: int, n_cols: int, *, rank: int, epsilon: float, delta: float, **parameters: Any
) -> LowRankPlan:
    """Plan a :func:`~dppca_dask.lowrank` run on an n_rows×n_cols store from public parameters only (nothing is read).

    Validates every parameter exactly as :func:`~dppca_dask.lowrank` does (the same errors) and returns the relation and the
    DpEvents a complete run emits, under either calibration; the job runner reserves these before the run.
    ``parameters`` are :func:`~dppca_dask.lowrank`'s keyword arguments (``mechanism``, ``oversampling``, ...).
    """
    unknown = sorted(set(parameters) - set(_PLAN_DEFAULTS))
    if unknown:
        raise InvalidParameterError(f"unknown lowrank parameters: {', '.join(unknown)}")
    params, neighbouring = _validate(rank=rank, epsilon=epsilon, delta=delta, **{**_PLAN_DEFAULTS, **parameters})
    return _plan_shape(params, neighbouring, _integer("n_rows", n_rows, 1), _integer("n_cols", n_cols, 1))
