"""The registry entry of the private topic model (entry point ``topics``): validation and planned events from public
parameters only, so that a ledger can reserve a run's budget before the data is read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods._registry import Mechanism

__all__ = ["MECHANISM", "TopicsPlan"]

_DEFAULTS: dict[str, Any] = {"alpha0": 0.0, "n_restarts": None, "n_iter": None, "pca_iter": None,
                             "pca_share": None, "pair_bound": None, "tensor_clip": None}


@dataclass(frozen=True)
class TopicsPlan:
    """What a topic model run will emit (public)."""

    neighbouring: str
    planned_events: tuple[Any, ...]
    calibration: Mapping[str, Any]

    @property
    def events(self) -> tuple[Any, ...]:
        return self.planned_events


def _topics_module() -> Any:
    import importlib

    return importlib.import_module("dppca_dask.methods.tensor.topics")  # the package re-exports the function


def validate(params: Mapping[str, Any]) -> dict[str, Any]:
    """Normalize ``{n_topics, epsilon, delta, alpha0, n_restarts, n_iter, pca_iter, pca_share, ...}``."""
    T = _topics_module()

    unknown = set(params) - {"n_topics", "epsilon", "delta", *_DEFAULTS}
    if unknown:
        raise InvalidParameterError(f"unknown topics parameters {sorted(unknown)}; allowed: n_topics, epsilon, "
                                    f"delta, {', '.join(_DEFAULTS)}")
    out = {**_DEFAULTS, **dict(params)}
    for name, default in (("n_restarts", T.DEFAULT_RESTARTS), ("n_iter", T.DEFAULT_TENSOR_ITER),
                          ("pca_iter", T.DEFAULT_PCA_ITER), ("pca_share", T.DEFAULT_PCA_SHARE),
                          ("tensor_clip", T.DEFAULT_TENSOR_CLIP)):
        if out[name] is None:
            out[name] = default
    if "n_topics" not in out:
        raise InvalidParameterError("topics needs n_topics (the number of topics K)")
    for name in ("epsilon", "delta"):
        if name not in out:
            raise InvalidParameterError(f"topics needs {name}")
    return out


def plan(params: Mapping[str, Any], *, n_rows: int | None, n_cols: int) -> TopicsPlan:
    """Calibrate a run on a store of ``n_cols`` columns; raises like :func:`dppca_dask.topics` for bad values.

    ``n_rows`` is not read: the number of documents is private under add/remove one document.
    """
    T = _topics_module()

    import math

    p = validate(params)
    T._check_params(p["n_topics"], p["n_restarts"], p["n_iter"], p["pca_iter"], p["pca_share"], p["alpha0"], n_cols)
    for name in ("pair_bound", "tensor_clip"):
        value = p[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 < float(value) <= 1):
            raise InvalidParameterError(f"{name} must be in (0, 1]; got {value!r}; e.g. 0.2")
    for name in ("epsilon", "delta"):
        value = p[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise InvalidParameterError(f"{name} must be finite and > 0; got {value!r}")
    if not float(p["delta"]) < 1:
        raise InvalidParameterError(f"delta must be in (0, 1); got {p['delta']}")
    calibration = T.calibrate_topics(epsilon=float(p["epsilon"]), delta=float(p["delta"]), n_topics=p["n_topics"],
                                     n_restarts=p["n_restarts"], n_iter=p["n_iter"], pca_iter=p["pca_iter"],
                                     pca_share=float(p["pca_share"]), alpha0=float(p["alpha0"]))
    return TopicsPlan(T.DOCUMENT, tuple(calibration.events()), calibration.to_dict())


MECHANISM = Mechanism(
    name="topics",
    entry="topics",
    summary="topic-word distributions by the method of moments and the private tensor power method",
    neighbouring="add/remove one row",
    private=True,
    validate=validate,
    plan=plan,
)
