"""Result objects: frozen, carrying their privacy report and provenance, writable to and readable from disk."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import zarr

from dppca_dask._repr import short_repr, short_repr_html
from dppca_dask.diagnostics import Diagnostics
from dppca_dask.errors import InvalidParameterError, StoreNotFoundError
from dppca_dask.signs import flip_signs

__all__ = ["LoadedReport", "LowRankResult", "PCAResult", "json_safe", "load_lowrank", "load_result",
           "read_result_json", "write_result_json"]

#: Rows per chunk of a written low-rank left factor.
_LEFT_CHUNK_ROWS = 262_144


def frozen_array(array: Any) -> np.ndarray | None:
    """A read-only float64 copy of ``array`` (``None`` stays ``None``): results never share memory with callers."""
    if array is None:
        return None
    out = np.array(array, dtype=np.float64, copy=True)
    out.setflags(write=False)
    return out


def json_safe(value: Any) -> Any:
    """``value`` with numpy types as Python ones and non-finite floats as the strings ``"inf"``, ``"-inf"``,
    ``"nan"`` (the on-disk form of every result; ``--json`` output maps them to null)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.generic):
        return json_safe(value.item())
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    return value


def report_dict(privacy: Any) -> dict[str, Any]:
    """A privacy report (or its loaded form) as a dictionary."""
    return privacy.to_dict() if hasattr(privacy, "to_dict") else dict(privacy)


def write_result_json(directory: str | os.PathLike[str], data: Mapping[str, Any], *, name: str = "result.json",
                      indent: int | None = 2) -> str:
    """Write ``data`` (made JSON-safe) to ``directory/name`` atomically (complete or absent) and owner-only
    (``DPPCA_DASK_FILE_MODE=umask`` follows the umask), creating ``directory`` and its missing parents if needed
    (owner-only too; an existing directory keeps its mode); returns the path."""
    from dppca_dask.storage._files import FILE_MODE, make_directories, private_files

    directory = os.fspath(directory)
    make_directories(directory)
    path = os.path.join(directory, name)
    tmp = os.path.join(directory, f".{name}.partial")
    private = private_files()
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE if private else 0o666), "w",
              encoding="utf-8") as handle:
        if private:
            os.fchmod(handle.fileno(), FILE_MODE)  # a leftover temporary keeps its old mode through O_TRUNC
        json.dump(json_safe(data), handle, indent=indent, sort_keys=True)
        handle.write("\n")
    os.replace(tmp, path)
    return path


def read_result_json(directory: str | os.PathLike[str], *, writer: str, name: str = "result.json") -> dict[str, Any]:
    """The dictionary written by :func:`write_result_json`; ``writer`` names what writes it (for the error)."""
    path = os.path.join(os.fspath(directory), name)
    if not os.path.exists(path):
        raise StoreNotFoundError(f"no {name} in '{os.fspath(directory)}'; write one with {writer} or --out")
    with open(path, encoding="utf-8") as handle:
        return dict(json.load(handle))


@dataclass(frozen=True)
class LoadedReport:
    """A privacy report read back from a result's JSON (its dictionary form)."""

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
    diagnostics: Diagnostics | None = None
    """How far to trust the release (:class:`~dppca_dask.diagnostics.Diagnostics`: ``reliable`` and a
    ``noise_to_signal`` figure per component), computed from released values and public parameters only."""

    def __post_init__(self) -> None:
        if isinstance(self.diagnostics, Mapping):
            object.__setattr__(self, "diagnostics", Diagnostics.from_dict(self.diagnostics))
        object.__setattr__(self, "components", frozen_array(flip_signs(self.components)))
        object.__setattr__(self, "thresholds", frozen_array(self.thresholds))
        for name in ("mean", "explained_variance", "explained_variance_ratio", "singular_values"):
            object.__setattr__(self, name, frozen_array(getattr(self, name)))

    @property
    def private(self) -> bool:
        """Whether the result is differentially private (false for baselines and seeded runs)."""
        return bool(getattr(self.privacy, "private", False))

    @property
    def n_components(self) -> int:
        return int(self.components.shape[0])

    def _repr_facts(self) -> dict[str, Any]:
        extra = []
        if self.explained_variance_ratio is not None:
            shown = " ".join(f"{v:.3g}" for v in self.explained_variance_ratio[:8])
            extra.append(f"explained_variance_ratio: [{shown}{' ...' if self.n_components > 8 else ''}]")
        return {"shape": f"{self.components.shape[0]}x{self.components.shape[1]} components", "extra": tuple(extra)}

    def __repr__(self) -> str:
        return short_repr(self, **self._repr_facts())

    def _repr_html_(self) -> str:
        return short_repr_html(self, **self._repr_facts())

    @property
    def clipped_fraction(self) -> float | None:
        """The released fraction of rows the fixed ``row_norm_bound`` clipped (``extras["clipped_fraction"]``, a
        differentially private output); None when the run did not release it."""
        value = (self.extras or {}).get("clipped_fraction")
        return None if value is None else float(value)

    def to_dict(self, *, include_components: bool = True) -> dict[str, Any]:
        """A JSON-safe dictionary (infinite ε becomes the string ``"inf"``)."""
        report = report_dict(self.privacy)
        out: dict[str, Any] = {
            "mechanism": self.mechanism,
            "private": self.private,
            "privacy": report,
            "thresholds": None if self.thresholds is None else self.thresholds.tolist(),
            "provenance": dict(self.provenance),
            **({"timings": dict(self.timings)} if self.timings else {}),
            "extras": dict(self.extras),
            **({"diagnostics": self.diagnostics.to_dict()} if self.diagnostics is not None else {}),
        }
        for name in ("mean", "explained_variance", "explained_variance_ratio", "singular_values"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value.tolist()
        if include_components:
            out["components"] = self.components.tolist()
        return json_safe(out)  # type: ignore[no-any-return]

    def save(self, directory: str | os.PathLike[str]) -> str:
        """Write ``components.zarr`` (the vectors) and ``result.json`` (report, provenance) into ``directory``.

        Owner-only (``DPPCA_DASK_FILE_MODE=umask`` follows the umask): ``directory`` and its missing parents are
        created 0700 (an existing directory keeps its mode), the files 0600 and the directories of
        ``components.zarr`` 0700; an earlier ``components.zarr`` or ``result.json`` there is replaced."""
        from dppca_dask.storage._files import make_directories, private_replacement

        directory = os.fspath(directory)
        make_directories(directory)
        with private_replacement(os.path.join(directory, "components.zarr")) as path:
            zarr.save_array(path, cast(Any, np.asarray(self.components)), zarr_format=3)
        write_result_json(directory, self.to_dict(include_components=False))
        return directory


def load_result(directory: str | os.PathLike[str]) -> PCAResult:
    """Read a result written by :meth:`PCAResult.save`."""
    directory = os.fspath(directory)
    meta = read_result_json(directory, writer="PCAResult.save")
    components = np.asarray(zarr.open_array(os.path.join(directory, "components.zarr"), mode="r")[...])
    thresholds = meta.get("thresholds")
    return PCAResult(
        components=components,
        mechanism=meta["mechanism"],
        privacy=LoadedReport(meta["privacy"]),
        thresholds=None if thresholds is None else np.asarray(thresholds),
        provenance=meta.get("provenance", {}),
        timings=meta.get("timings", {}),
        extras=meta.get("extras", {}),
        diagnostics=None if meta.get("diagnostics") is None else Diagnostics.from_dict(meta["diagnostics"]),
        **{name: None if meta.get(name) is None else np.asarray(meta[name], dtype=np.float64)
           for name in ("mean", "explained_variance", "explained_variance_ratio", "singular_values")},
    )


@dataclass(frozen=True)
class LowRankResult:
    """A private low-rank approximation ``B = left @ right`` and its privacy report.

    Everything is safe to publish under ``privacy`` (when ``privacy.private`` is true) except ``timings``, empty
    unless asked for (operational metadata outside the guarantee, as for :class:`~dppca_dask.results.PCAResult`).
    """

    left: np.ndarray
    """n_rows×r factor (W of Hardt & Roth 2012; U_r for randomized response; the v_i or u for private power)."""
    right: np.ndarray
    """r×d factor (M = W'ᵀA + N; diag(s_r)·V_rᵀ; diag(σ̂)·V_kᵀ)."""
    mechanism: str
    privacy: Any
    """:class:`~dppca_dask.accounting.PrivacyReport`: (ε, δ), neighbouring relation, accountant."""
    provenance: Mapping[str, Any] = field(default_factory=dict)
    """Parameters, calibrated constants, input description, package versions, times."""
    timings: Mapping[str, Any] = field(default_factory=dict)
    extras: Mapping[str, Any] = field(default_factory=dict)
    """Released or public byproducts: α_i of the projection, σ̂_i, the coherence bound used, …"""
    diagnostics: Diagnostics | None = None
    """How far to trust the release, per component of ``left @ right`` (:class:`~dppca_dask.diagnostics.Diagnostics`),
    from released values and public parameters only."""

    def __post_init__(self) -> None:
        if isinstance(self.diagnostics, Mapping):
            object.__setattr__(self, "diagnostics", Diagnostics.from_dict(self.diagnostics))
        object.__setattr__(self, "left", frozen_array(self.left))
        object.__setattr__(self, "right", frozen_array(self.right))
        if self.left.ndim != 2 or self.right.ndim != 2 or self.left.shape[1] != self.right.shape[0]:
            raise InvalidParameterError(
                f"factors must be n×r and r×d; got {self.left.shape} and {self.right.shape}"
            )

    @property
    def rank(self) -> int:
        """r: the number of columns of ``left`` (the rank of B, at most)."""
        return int(self.left.shape[1])

    @property
    def shape(self) -> tuple[int, int]:
        """Shape of the approximated matrix, (n_rows, d)."""
        return (int(self.left.shape[0]), int(self.right.shape[1]))

    @property
    def private(self) -> bool:
        return bool(getattr(self.privacy, "private", False))

    def _repr_facts(self) -> dict[str, Any]:
        return {"shape": f"{self.shape[0]}x{self.shape[1]} of rank {self.rank}"}

    def __repr__(self) -> str:
        return short_repr(self, **self._repr_facts())

    def _repr_html_(self) -> str:
        return short_repr_html(self, **self._repr_facts())

    def to_dense(self, *, max_bytes: int = 2**30) -> np.ndarray:
        """``left @ right`` as a dense array (refuses more than ``max_bytes``)."""
        need = self.shape[0] * self.shape[1] * 8
        if need > max_bytes:
            raise InvalidParameterError(
                f"the dense {self.shape[0]}x{self.shape[1]} approximation needs {need / 2**30:.2f} GiB, more than "
                f"max_bytes={max_bytes}; keep it factored (left @ right) or raise max_bytes"
            )
        return self.left @ self.right

    def to_dict(self, *, include_factors: bool = False) -> dict[str, Any]:
        """JSON-safe public parts (factors only if asked)."""
        report = report_dict(self.privacy)
        out: dict[str, Any] = {
            "mechanism": self.mechanism,
            "rank": self.rank,
            "shape": list(self.shape),
            "private": self.private,
            "privacy": report,
            "provenance": dict(self.provenance),
            **({"timings": dict(self.timings)} if self.timings else {}),
            "extras": dict(self.extras),
            **({"diagnostics": self.diagnostics.to_dict()} if self.diagnostics is not None else {}),
        }
        if include_factors:
            out["left"] = self.left.tolist()
            out["right"] = self.right.tolist()
        return json_safe(out)  # type: ignore[no-any-return]

    def save(self, directory: str | os.PathLike[str]) -> str:
        """Write ``factors.zarr`` (arrays ``left`` and ``right``) and ``result.json`` into ``directory``.

        Owner-only (``DPPCA_DASK_FILE_MODE=umask`` follows the umask), as :meth:`PCAResult.save`: ``left`` has a
        row per person."""
        from dppca_dask.storage._files import make_directories, private_replacement

        directory = os.fspath(directory)
        make_directories(directory)
        with private_replacement(os.path.join(directory, "factors.zarr")) as path:
            group = zarr.open_group(path, mode="w", zarr_format=3)
            rows = max(1, min(self.shape[0], _LEFT_CHUNK_ROWS))
            left = group.create_array("left", shape=self.left.shape, chunks=(rows, max(1, self.rank)),
                                      dtype="float64")
            left[...] = self.left
            right = group.create_array("right", shape=self.right.shape, dtype="float64")
            right[...] = self.right
            group.attrs["description"] = "B = left @ right"
        write_result_json(directory, self.to_dict())
        return directory


def load_lowrank(directory: str | os.PathLike[str]) -> LowRankResult:
    """Read a result written by :meth:`LowRankResult.save`."""
    directory = os.fspath(directory)
    meta = read_result_json(directory, writer="LowRankResult.save")
    group = zarr.open_group(os.path.join(directory, "factors.zarr"), mode="r")
    return LowRankResult(
        left=np.asarray(cast(zarr.Array, group["left"])[...]),
        right=np.asarray(cast(zarr.Array, group["right"])[...]),
        mechanism=meta["mechanism"],
        privacy=LoadedReport(meta["privacy"]),
        provenance=meta.get("provenance", {}),
        timings=meta.get("timings", {}),
        extras=meta.get("extras", {}),
        diagnostics=None if meta.get("diagnostics") is None else Diagnostics.from_dict(meta["diagnostics"]),
    )
