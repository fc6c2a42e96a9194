"""Optional compiled loops: numba when it is installed and asked for (``DPPCA_DASK_NUMBA=1``), else nothing.

Every compiled loop in :mod:`dppca_dask.kernels` has a numpy/scipy counterpart that computes the same values; the
tests compare the two bit for bit. The private step's compiled loops (the rows' weights, scores and grid bins, and
``Aᵀw`` with the top rows' per-bin sums in one pass: :mod:`dppca_dask.kernels.power`) make its kernel 0.98x scipy's
plain ``Aᵀ(Ax)`` on one core against 1.14-1.24x on the numpy path (1.02-1.07x a plain step given the same compiled
``Aᵀw``), and the 10⁸-entry private step 1.06-1.14x the plain Dask step against 1.14-1.19x with the loops of the
release before (``benchmarks/bench_iteration.py``, three alternating pairs on a shared machine); on the in-process
executor (2 threads), where no scheduler shares the cores, 1.05-1.10x against 1.26-1.41x on the numpy path, and
0.114-0.153 s against 0.134-0.161 s per step. They are off by default: importing numba and loading the compiled
loops costs each worker about 0.35 s on its first step with numba's on-disk cache warm, and about 1.5 s the first
time they compile (measured in one process, idle machine); the kernel is 4-8 ms shorter than on the numpy path per
partition of 1.25·10⁷ entries, and a step at 10⁸ entries 0-20 ms (three runs alternating on a busy machine), which
repays a warm load after 20-40 steps; the saving grows with the data, and per partition is largest where the top
rows are a large share of it (3.8 against 8.3 ms for 1.25·10⁶ entries whose top rows are half the rows). Set
``DPPCA_DASK_NUMBA=1`` (on the workers too; ``pip install 'dppca-dask[numba]'``) for large stores and long runs, or
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
