"""Registry entries of the window releases (entry ``"window"``): Gaussian (Analyze Gauss), Wishart, JL.

``validate`` checks the public parameters and ``plan`` returns the relation, the calibration and the events a
release emits, from public parameters only (``n_cols``, the window's kind), so that a ledger can reserve them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dppca_dask.accounting import ADD_REMOVE_ROW
from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods._registry import Mechanism
from dppca_dask.methods.window.calibration import RELEASES, calibrate_release

__all__ = ["MECHANISMS", "WindowMechanismPlan"]

_KEYS = frozenset({"epsilon", "delta", "row_norm_bound", "tau_rule", "sketch_rows", "rank_bound", "labels",
                   "rows_window"})


@dataclass(frozen=True)
class WindowMechanismPlan:
    neighbouring: str
    calibration: Mapping[str, Any]
    planned_events: tuple[Any, ...]

    @property
    def events(self) -> tuple[Any, ...]:
        return self.planned_events


def _validator(name: str) -> Any:
    def validate(params: Mapping[str, Any]) -> dict[str, Any]:
        extra = sorted(set(params) - _KEYS)
        if extra:
            raise InvalidParameterError(f"unknown parameter(s) {', '.join(extra)} for the {name} window release; "
                                        f"valid: {', '.join(sorted(_KEYS))}")
        out = dict(params)
        for key in ("epsilon", "delta"):
            value = out.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value)
                                                                                      and value > 0):
                raise InvalidParameterError(f"{key} must be finite and > 0; got {value!r}")
        if not out["delta"] < 1:
            raise InvalidParameterError(f"delta must be in (0, 1); got {out['delta']}")
        out.setdefault("row_norm_bound", 1.0)
        out.setdefault("labels", False)
        out.setdefault("rows_window", False)
        return out

    return validate


def _planner(name: str) -> Any:
    def plan(params: Mapping[str, Any], *, n_rows: int | None = None, n_cols: int) -> WindowMechanismPlan:
        p = _validator(name)(params)
        dim = int(n_cols) + (1 if p["labels"] else 0)
        neighbouring, calibration, events = calibrate_release(
            name, dim=dim, epsilon=float(p["epsilon"]), delta=float(p["delta"]),
            row_norm_bound=float(p["row_norm_bound"]), rows_window=bool(p["rows_window"]),
            tau_rule=p.get("tau_rule", "thm11"), sketch_rows=p.get("sketch_rows"),
            rank_bound=int(p.get("rank_bound", 1)),
        )
        return WindowMechanismPlan(neighbouring, calibration, events)

    return plan


_SUMMARIES = {
    "gaussian": "Analyze Gauss on the window Gram: symmetric Gaussian noise (default; smallest error measured)",
    "wishart": "the window Gram plus Wishart(tau, I) noise (seed 001 F2; tau rule thm11/thm14/alg7)",
    "jl": "JL sketch of the sigma-augmented window, sampled exactly from the Gram (seed 001 F1)",
}

MECHANISMS: tuple[Mechanism, ...] = tuple(
    Mechanism(name=name, entry="window", summary=_SUMMARIES[name], neighbouring=ADD_REMOVE_ROW, private=True,
              validate=_validator(name), plan=_planner(name))
    for name in RELEASES
)
