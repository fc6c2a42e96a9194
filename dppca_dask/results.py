"""Result objects: frozen, carrying their privacy report and provenance, writable to and readable from disk."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zarr

from dppca_dask.errors import StoreNotFoundError
from dppca_dask.signs import flip_signs

__all__ = ["PCAResult", "load_result"]


def _frozen(array: Any) -> np.ndarray | None:
    if array is None:
        return None
    out = np.array(array, dtype=np.float64, copy=True)
    out.setflags(write=False)
    return out


def _json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return _json_safe(value.item())
    if isinstance(value, np.ndarray):
        return _json_safe(value.tolist())
    return value


@dataclass(frozen=True)
class PCAResult:
    """The release of a PCA mechanism.

    Everything in it is safe to publish under ``privacy`` (when ``privacy.private`` is true) except
    ``timings``, which is empty unless asked for (``pca(..., timings=True)``, ``--timings``): wall-clock times
    depend on the data (e.g. on how many rows a partition filters) and the privacy guarantee does not cover them;
    keep them with the job logs rather than publishing them with the release.
    """

    components: np.ndarray
    """k×d array; row i is the i-th component (a unit vector), its largest-magnitude coordinate positive."""
    mechanism: str
    """Name of the mechanism that produced it (``"adaptive-power"``, ``"analyze-gauss"``, ``"exact"``, ...)."""
    privacy: Any
    """The privacy report (:class:`dppca_dask.accounting.PrivacyReport`): (ε, δ), neighbouring relation, accountant."""
    thresholds: np.ndarray | None = None
    """Released SVT thresholds θ, k×T (adaptive power only; differentially private outputs)."""
    provenance: Mapping[str, Any] = field(default_factory=dict)
    """Store fingerprint, parameters, package versions, start and end time."""
    timings: Mapping[str, Any] = field(default_factory=dict)
    """Empty unless asked for; then seconds (total, calibration, each iteration) and a ``"note"`` saying they are
    not covered by the privacy guarantee (see above)."""
    extras: Mapping[str, Any] = field(default_factory=dict)
    """Mechanism-specific outputs (e.g. eigenvalues of the non-private baseline)."""
    mean: np.ndarray | None = None
    """The centre the components were computed around (released privately, or given); None without centring."""
    explained_variance: np.ndarray | None = None
    """Released variance along each component (scikit-learn's ``explained_variance_``); None when not released."""
    explained_variance_ratio: np.ndarray | None = None
    """Released share of the released total variance along each component."""
    singular_values: np.ndarray | None = None
    """Released ``sqrt(Σ(ãᵀv)²)`` per component (scikit-learn's ``singular_values_``)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "components", _frozen(flip_signs(self.components)))
        object.__setattr__(self, "thresholds", _frozen(self.thresholds))
        for name in ("mean", "explained_variance", "explained_variance_ratio", "singular_values"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))

    @property
    def private(self) -> bool:
        """Whether the result is differentially private (false for baselines and seeded runs)."""
        return bool(getattr(self.privacy, "private", False))

    @property
    def n_components(self) -> int:
        return int(self.components.shape[0])

    def to_dict(self, *, include_components: bool = True) -> dict[str, Any]:
        """A JSON-safe dictionary (infinite ε becomes the string ``"inf"``)."""
        report = self.privacy.to_dict() if hasattr(self.privacy, "to_dict") else dict(self.privacy)
        out: dict[str, Any] = {
            "mechanism": self.mechanism,
            "private": self.private,
            "privacy": report,
            "thresholds": None if self.thresholds is None else self.thresholds.tolist(),
            "provenance": dict(self.provenance),
            **({"timings": dict(self.timings)} if self.timings else {}),
            "extras": dict(self.extras),
        }
        for name in ("mean", "explained_variance", "explained_variance_ratio", "singular_values"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value.tolist()
        if include_components:
            out["components"] = self.components.tolist()
        return _json_safe(out)

    def save(self, directory: str | os.PathLike[str]) -> str:
        """Write ``components.zarr`` (the vectors) and ``result.json`` (report, provenance) into ``directory``."""
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        zarr.save_array(os.path.join(directory, "components.zarr"), np.asarray(self.components), zarr_format=3)
        tmp = os.path.join(directory, ".result.json.tmp")
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(self.to_dict(include_components=False), handle, indent=2, sort_keys=True)
            handle.write("\n")
        os.replace(tmp, os.path.join(directory, "result.json"))
        return directory


@dataclass(frozen=True)
class _LoadedReport:
    """A privacy report read back from ``result.json`` (its dictionary form)."""

    data: Mapping[str, Any]

    @property
    def private(self) -> bool:
        return bool(self.data.get("private", False))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.data)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.data[name]
        except KeyError as exc:
            raise AttributeError(name) from exc


def load_result(directory: str | os.PathLike[str]) -> PCAResult:
    """Read a result written by :meth:`PCAResult.save`."""
    directory = os.fspath(directory)
    meta_path = os.path.join(directory, "result.json")
    if not os.path.exists(meta_path):
        raise StoreNotFoundError(f"no result.json in '{directory}'; write one with PCAResult.save or --out")
    with open(meta_path, encoding="utf-8") as handle:
        meta = json.load(handle)
    components = np.asarray(zarr.open_array(os.path.join(directory, "components.zarr"), mode="r")[...])
    thresholds = meta.get("thresholds")
    return PCAResult(
        components=components,
        mechanism=meta["mechanism"],
        privacy=_LoadedReport(meta["privacy"]),
        thresholds=None if thresholds is None else np.asarray(thresholds),
        provenance=meta.get("provenance", {}),
        timings=meta.get("timings", {}),
        extras=meta.get("extras", {}),
        **{name: None if meta.get(name) is None else np.asarray(meta[name], dtype=np.float64)
           for name in ("mean", "explained_variance", "explained_variance_ratio", "singular_values")},
    )
