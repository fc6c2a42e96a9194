"""Optional compiled loops: numba when it is installed and asked for (``DPPCA_DASK_NUMBA=1``), else nothing.

Every compiled loop in :mod:`dppca_dask.kernels` has a numpy/scipy counterpart that computes the same values; the
tests compare the two bit for bit. The compiled loops are off by default: on an idle machine a 10⁸-entry private
step is 1.29x the plain step with them and 1.27-1.28x without (``benchmarks/bench_scale.py``), while importing numba
and loading the compiled loops costs each worker about 0.45 s on its first step with numba's on-disk cache warm,
and one to two seconds per loop the first time they compile. Set ``DPPCA_DASK_NUMBA=1`` (on the workers too) only
where a measurement on the target machine shows a gain.

numba itself is imported, and a loop compiled (or loaded from numba's on-disk cache), on the loop's first call,
so that importing the package stays light (numba takes seconds to import).
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["HAVE_NUMBA", "NUMBA_INSTALLED", "jit"]

#: Whether numba is installed (the compiled loops exist and are tested).
NUMBA_INSTALLED = importlib.util.find_spec("numba") is not None
#: Whether compiled loops are used: numba installed and asked for by ``DPPCA_DASK_NUMBA=1``.
HAVE_NUMBA = NUMBA_INSTALLED and os.environ.get("DPPCA_DASK_NUMBA", "0") == "1"


class _Lazy:
    """``function`` compiled by numba on first call (cached on disk, releasing the GIL)."""

    __slots__ = ("compiled", "function", "lock")

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.compiled: Callable[..., Any] | None = None
        self.lock = threading.Lock()

    def __call__(self, *args: Any) -> Any:
        if self.compiled is None:
            with self.lock:
                if self.compiled is None:
                    import numba

                    self.compiled = numba.njit(cache=True, nogil=True, error_model="numpy")(self.function)
        return self.compiled(*args)


def jit(function: Callable[..., Any]) -> Callable[..., Any] | None:
    """``function`` compiled on first call, or ``None`` without numba."""
    return _Lazy(function) if NUMBA_INSTALLED else None
