"""Checks shared by the mechanisms (public parameters only; data values never appear in messages)."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from dppca_dask.errors import InvalidInputError, InvalidParameterError

__all__ = ["as_release_value", "positive_finite"]


def positive_finite(name: str, value: float) -> float:
    """``float(value)`` if it is finite and > 0, else :class:`InvalidParameterError`."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InvalidParameterError(f"{name} must be a finite number > 0; got {value!r}") from None
    if not (math.isfinite(out) and out > 0):
        raise InvalidParameterError(f"{name} must be finite and > 0; got {out}")
    return out


def as_release_value(value: ArrayLike, release: str) -> np.ndarray:
    """The value to release as a float64 array (a copy), checked finite.

    The message names the release and the shape, never the offending entries: the value is not yet private.
    """
    array = np.array(value, dtype=np.float64)
    if not np.all(np.isfinite(array)):
        raise InvalidInputError(
            f"the value of release {release!r} (shape {array.shape}) has NaN or infinite entries; "
            "validate the input data before any release"
        )
    return array
