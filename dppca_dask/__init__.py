"""dppca_dask: differentially private PCA and low-rank analysis of very large sparse matrices, on Dask."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
