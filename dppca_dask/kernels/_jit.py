"""Compiled loops: numba's (a dependency), used unless ``DPPCA_DASK_NUMBA=0`` turns them off.

Every compiled loop in :mod:`dppca_dask.kernels` has a numpy/scipy counterpart that computes the same values; the
tests compare the two bit for bit (on x86-64), so whether a process has them changes its speed, not a value. The
private step's compiled loops (``A x``, the rows' weights and scores and ``Aᵀw`` in one pass over blocks of rows, then
the top rows' per-bin sums: :mod:`dppca_dask.kernels.power`) make its kernel 0.97-1.02x scipy's plain ``Aᵀ(Ax)`` on
one core against 1.14-1.24x on the numpy path, and the 10⁸-entry private step 0.91-1.06x the plain step on the
in-process executor and 1.01-1.11x on a 2-worker LocalCluster (median 1.04, 14 runs), against 1.22-1.30x and
1.14-1.22x on the numpy path (``benchmarks/bench_iteration.py``). The numpy path cannot close that gap with scipy's
loops: they read the partition from memory twice (``A x``, then ``Aᵀw``), the top rows' per-bin sums need the rows
read once more, and reading a subset of rows in place (scipy's ``csc_matvec`` given each row's bounds, no copy) skips
the rows between them only in descending row order, which took 2.7x the ascending pass (the hardware's prefetch runs
forward); one pass with a column per bin (``csc_matvecs``) took 2.3x at 6 columns.

Their cost is paid once per process: importing numba and its first compiled call take about 0.3 s with numba's
on-disk cache warm (about 0.25 s more the first time the loops compile), after which each further loop loads in a
few milliseconds. A step at 10⁸ entries is 18-22 ms shorter in process (three alternating pairs: 0.055-0.058 s
against 0.073-0.079 s), so they repay after 14-17 such steps. On a small store the fixed cost shows: ``pca`` of the
w8a sample (49,749 × 300) on the in-process executor, in a fresh process (CPU seconds of the call, three runs each)
took 1.00-1.04 s with them against 0.69-0.75 s without, and 1.22-1.30 s with an empty numba cache (the loops
compiled once, then cached on disk with ``cache=True``: beside the package, or in the user's cache directory when
the package's directory is read-only); a second run in the same process is as fast either way. Whether they repay
depends on the data's size, which is private, so the choice is not made from the data: numba is a dependency and the
loops are the default; ``DPPCA_DASK_NUMBA=0`` (or ``false``, ``no``, ``off``; in the environment of every process
that runs tasks: an embedded cluster's workers inherit this process's) leaves them off. An installation without
numba (installed with ``--no-deps``) runs the numpy path.

numba itself is imported, and a loop compiled (or loaded from numba's on-disk cache), on the loop's first call,
so that importing the package stays light (numba takes a fifth of a second or more to import).
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
#: Values of ``DPPCA_DASK_NUMBA`` that turn the compiled loops off (any case; anything else leaves them on).
OFF = ("0", "false", "no", "off")
#: Whether compiled loops are used: numba installed, and not turned off by ``DPPCA_DASK_NUMBA=0``.
HAVE_NUMBA = NUMBA_INSTALLED and os.environ.get("DPPCA_DASK_NUMBA", "1").strip().lower() not in OFF


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
