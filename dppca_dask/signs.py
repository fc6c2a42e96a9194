"""The sign convention of released components: the largest-magnitude coordinate of each one is positive.

For a factored low-rank release ``B = left @ right`` the same convention holds for the rows of ``right`` (the
directions in feature space), and each column of ``left`` takes the sign of its row, so ``B`` is unchanged.

A singular vector is defined up to its sign; two runs (or a private run and scikit-learn) are comparable only under
one convention. This is scikit-learn's ``svd_flip`` applied to the rows of ``V`` (``u_based_decision=False``): the
coordinate of largest absolute value is made positive (the first such coordinate on an exact tie). It is a public
function of released vectors (post-processing).
"""

from __future__ import annotations

import numpy as np

__all__ = ["flip_factor_signs", "flip_signs"]


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


def flip_factor_signs(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Copies of the factors of ``B = left @ right`` (n×r, r×d) with each row of ``right`` flipped so that its
    largest-magnitude entry is positive (:func:`flip_signs`) and the matching column of ``left`` flipped with it:
    ``left @ right`` is exactly unchanged (negation is exact)."""
    rows = np.asarray(right, dtype=np.float64)
    cols = np.asarray(left, dtype=np.float64)
    if rows.size == 0:
        return cols.copy(), rows.copy()
    peaks = np.argmax(np.abs(rows), axis=1)
    signs = np.sign(rows[np.arange(rows.shape[0]), peaks])
    signs[signs == 0] = 1.0  # an all-zero row keeps its sign
    return cols * signs[None, :], rows * signs[:, None]
