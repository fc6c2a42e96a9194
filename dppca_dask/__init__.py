"""dppca_dask: differentially private PCA and low-rank analysis of very large sparse matrices, on Dask.

Start with :func:`~dppca_dask.pca` (or the :class:`DPPCA` estimator) on a store made by
:func:`~dppca_dask.ingest`; every result carries its privacy report.

The public names are imported on first use (module ``__getattr__``): ``import dppca_dask`` loads neither
dp-accounting, dask.distributed, zarr nor scipy, so that the command line starts quickly.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

from dppca_dask._version import __version__

#: Public name -> the module that exports it (imported when the name is first used; the entry points are those of
#: :mod:`dppca_dask.api`).
_LAZY: dict[str, str] = {
    "DEFAULT_N_ITER": "dppca_dask.api",
    "DPPCA": "dppca_dask.estimator",  # needs scikit-learn (the sklearn extra)
    "mechanisms": "dppca_dask.api",
    "pca": "dppca_dask.api",
    "ingest": "dppca_dask.ingest",
    "LowRankResult": "dppca_dask.results",
    "load_lowrank": "dppca_dask.results",
    "lowrank": "dppca_dask.api",
    "PCAResult": "dppca_dask.results",
    "load_result": "dppca_dask.results",
    "MatrixStore": "dppca_dask.storage",
    "append_partition": "dppca_dask.storage",
    "open_matrix": "dppca_dask.storage",
    "write_matrix": "dppca_dask.storage",
    "topics": "dppca_dask.api",
    "window": "dppca_dask.api",
    "WindowRelease": "dppca_dask.methods.window.release",
}

__all__ = [
    "DEFAULT_N_ITER",
    "DPPCA",
    "LowRankResult",
    "MatrixStore",
    "PCAResult",
    "WindowRelease",
    "__version__",
    "append_partition",
    "ingest",
    "load_lowrank",
    "load_result",
    "lowrank",
    "mechanisms",
    "open_matrix",
    "pca",
    "topics",
    "window",
    "write_matrix",
]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from dppca_dask.api import DEFAULT_N_ITER, lowrank, mechanisms, pca, topics, window
    from dppca_dask.estimator import DPPCA
    from dppca_dask.ingest import ingest
    from dppca_dask.methods.window.release import WindowRelease
    from dppca_dask.results import LowRankResult, PCAResult, load_lowrank, load_result
    from dppca_dask.storage import MatrixStore, append_partition, open_matrix, write_matrix


def __getattr__(name: str) -> Any:
    if name == "pp":  # the scanpy-style namespace (dppca_dask.pp.pca)
        return importlib.import_module("dppca_dask.pp")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dppca_dask' has no attribute '{name}'")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


class _Package(types.ModuleType):
    """``dppca_dask.ingest`` is the function, as it was when imported eagerly, even after the subpackage of the same
    name is imported (which would otherwise rebind the attribute to the subpackage)."""

    @property
    def ingest(self) -> Any:
        from dppca_dask.ingest import ingest

        return ingest

    @ingest.setter
    def ingest(self, value: Any) -> None:  # the import system binds the subpackage here: keep the function
        pass


sys.modules[__name__].__class__ = _Package


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
