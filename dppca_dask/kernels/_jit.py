"""Optional compiled loops: numba when it is installed (and not disabled), else nothing.

Every compiled loop in :mod:`dppca_dask.kernels` has a numpy/scipy counterpart that computes the same values; the
tests compare the two bit for bit. Set ``DPPCA_DASK_NUMBA=0`` to use the numpy/scipy code only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = ["HAVE_NUMBA", "jit"]

try:  # optional dependency
    import numba as _numba
except ImportError:  # pragma: no cover - depends on the environment
    _numba = None

#: Whether compiled loops are used.
HAVE_NUMBA = _numba is not None and os.environ.get("DPPCA_DASK_NUMBA", "1") != "0"


def jit(function: Callable[..., Any]) -> Callable[..., Any] | None:
    """``function`` compiled (cached on disk, releasing the GIL), or ``None`` without numba."""
    if _numba is None:
        return None
    return _numba.njit(cache=True, nogil=True, error_model="numpy")(function)
