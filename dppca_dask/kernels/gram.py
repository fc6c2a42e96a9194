"""Per-partition exact Gram kernels of the sliding-window family (no Dask, no noise, no validation).

A window's Gram matrix is the sum of one dense ``d'×d'`` matrix per partition: ``Σ a'ᵀa'`` over the partition's
rows in the window, each row clipped to a public L2 bound. For regression the label is appended as a last column
and the concatenated row ``(x, y)`` is clipped as a whole (seed 001, erratum E13: the bound is on ``‖(x, y)‖``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.kernels.power import clip_factors

__all__ = ["window_gram"]


def window_gram(
    block: Any,
    norms: np.ndarray,
    *,
    rows: tuple[int, int] | None,
    row_norm_bound: float,
    labels: np.ndarray | None = None,
) -> np.ndarray:
    """Dense Gram matrix of the clipped rows ``rows = (lo, hi)`` of one partition (all rows for ``None``).

    Parameters
    ----------
    block
        The partition: a ``csr_array`` or a 2-D float64 array.
    norms
        The rows' L2 norms (of the values in ``block``).
    rows
        Local row range of the partition inside the window, or ``None`` for the whole partition.
    row_norm_bound
        Public clipping bound ``c``: each row (with its label) is scaled by ``min(1, c/‖row‖)``.
    labels
        The labels of the rows in ``rows`` (regression): a last column is appended before clipping.

    Returns
    -------
    numpy.ndarray
        ``(d, d)``, or ``(d+1, d+1)`` with labels: ``Σ_rows a'ᵀa'`` in float64.
    """
    if rows is not None:
        lo, hi = rows
        block = block[lo:hi]
        norms = norms[lo:hi]
    norms = np.asarray(norms, dtype=np.float64)
    if labels is not None:
        y = np.asarray(labels, dtype=np.float64)
        norms = np.sqrt(norms * norms + y * y)
        if sp.issparse(block):
            block = sp.hstack([sp.csr_array(block), sp.csr_array(y[:, None])], format="csr")
        else:
            block = np.hstack([np.asarray(block, dtype=np.float64), y[:, None]])
    factors = clip_factors(norms, row_norm_bound)
    if sp.issparse(block):
        scaled = sp.csr_array(block, dtype=np.float64, copy=True)
        scaled.data *= np.repeat(factors, np.diff(scaled.indptr))
        gram = np.asarray((scaled.T @ scaled).toarray(), dtype=np.float64)
    else:
        dense = np.asarray(block, dtype=np.float64) * factors[:, None]
        gram = dense.T @ dense
    return (gram + gram.T) / 2.0
