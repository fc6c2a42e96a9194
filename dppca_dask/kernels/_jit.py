"""Optional compiled loops: numba when it is installed and asked for (``DPPCA_DASK_NUMBA=1``), else nothing.

Every compiled loop in :mod:`dppca_dask.kernels` has a numpy/scipy counterpart that computes the same values; the
tests compare the two bit for bit. The private step's compiled loops (the rows' weights, scores and grid bins, and
the top rows' per-bin sums read in place: :mod:`dppca_dask.kernels.power`) make its kernel 1.09x scipy's plain
``Aᵀ(Ax)`` on one core against 1.16-1.17x, and the 10⁸-entry private step 1.11-1.17x the plain Dask step against
1.18-1.24x without them (``benchmarks/bench_iteration.py``, six alternating runs each). They are off by default:
importing numba and loading the compiled loops costs each worker 0.4-0.5 s on its first step with numba's on-disk
cache warm, and 1-3.5 s the first time they compile (the benchmark's first step 4.8 s when they compiled, then
1.3-2.4 s, against 0.84-1.22 s without them). At 10⁸ entries a step is 10-20 ms shorter (0.226-0.240 s against
0.240-0.252 s), which repays a warm load after 25-50 steps; the saving grows with the data. Set
``DPPCA_DASK_NUMBA=1`` (on the workers too) for large stores and long runs, or where a measurement on the target
machine shows a gain.

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
