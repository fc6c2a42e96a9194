"""dppca_dask: differentially private PCA and low-rank analysis of very large sparse matrices, on Dask.

Start with :func:`pca` (or the :class:`DPPCA` estimator) on a store made by :func:`ingest`; every result carries
its privacy report.
"""

from __future__ import annotations

__version__ = "0.1.0"

from dppca_dask.api import DEFAULT_N_ITER, mechanisms, pca  # noqa: E402
from dppca_dask.ingest import ingest  # noqa: E402
from dppca_dask.lowrank import LowRankResult, load_lowrank, lowrank  # noqa: E402
from dppca_dask.methods.tensor.topics import topics  # noqa: E402
from dppca_dask.methods.window import WindowRelease, window  # noqa: E402
from dppca_dask.results import PCAResult, load_result  # noqa: E402
from dppca_dask.storage import MatrixStore, append_partition, open_matrix, write_matrix  # noqa: E402

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


def __getattr__(name: str) -> object:
    # DPPCA needs scikit-learn (the ``sklearn`` extra): imported on first use, so ``import dppca_dask`` does not.
    if name == "DPPCA":
        from dppca_dask.estimator import DPPCA

        return DPPCA
    if name == "pp":
        import importlib

        return importlib.import_module("dppca_dask.pp")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
