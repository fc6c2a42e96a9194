"""What :func:`~dppca_dask.pca` and :func:`~dppca_dask.lowrank` record about a run beside its release: provenance
(public values only: parameters, calibration, the input's public description, where it ran) and, when asked for,
wall-clock timings (which depend on the data and are labelled as not covered by the guarantee)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

from dppca_dask._execution import versions as _versions
from dppca_dask._version import __version__

__all__ = ["TIMINGS_NOTE", "run_provenance", "run_timings"]

#: The label of every result's ``timings``.
TIMINGS_NOTE = "wall-clock seconds; they depend on the data and are NOT covered by the privacy guarantee"


def run_provenance(*, mechanism: str, private: bool, parameters: Mapping[str, Any], calibration: Mapping[str, Any],
                   source: Any, seeded: bool, executor: str, noise: Any, started: _dt.datetime,
                   timings: bool) -> dict[str, Any]:
    """A run's ``provenance``: the mechanism, its public parameters and calibration, the input's public description,
    the executor, the noise sampler, the package versions and the start (with the finish only when ``timings``)."""
    provenance = {
        "mechanism": mechanism,
        "private": private,
        "parameters": parameters,
        "calibration": calibration,
        "input": dict(source.description),
        "seeded": seeded,
        "executor": executor,
        "noise_sampler": noise.sampler if noise is not None else None,
        "package": {"dppca_dask": __version__, **_versions()},
        "started": started.isoformat(timespec="seconds"),
    }
    if timings:  # with the start, the duration: data-dependent, so only when timings are asked for
        provenance["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    return provenance


def run_timings(timings: bool, **seconds: Any) -> dict[str, Any]:
    """A result's ``timings``: ``seconds`` and their label when ``timings`` was asked for, else empty."""
    return {**seconds, "note": TIMINGS_NOTE} if timings else {}
