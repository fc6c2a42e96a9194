"""The sign convention of released components: the largest-magnitude coordinate of each one is positive.

A singular vector is defined up to its sign; two runs (or a private run and scikit-learn) are comparable only under
one convention. This is scikit-learn's ``svd_flip`` applied to the rows of ``V`` (``u_based_decision=False``): the
coordinate of largest absolute value is made positive (the first such coordinate on an exact tie). It is a public
function of released vectors (post-processing).
"""

from __future__ import annotations

import numpy as np

__all__ = ["flip_signs"]


def flip_signs(components: np.ndarray) -> np.ndarray:
    """A copy of ``components`` (k×d, or one vector of length d) with each row's largest-magnitude entry positive."""
    array = np.asarray(components, dtype=np.float64)
    if array.size == 0:
        return array.copy()
    rows = np.atleast_2d(array)
    peaks = np.argmax(np.abs(rows), axis=1)
    signs = np.sign(rows[np.arange(rows.shape[0]), peaks])
    signs[signs == 0] = 1.0  # an all-zero row (never released) keeps its sign
    out = rows * signs[:, None]
    return out.reshape(array.shape)
