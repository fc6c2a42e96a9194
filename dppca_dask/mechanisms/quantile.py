"""A private quantile of row norms on a public log grid (report noisy max), for ``row_norm_bound="auto"``.

The candidates are public: ``c_j = low·2^(j/per_octave)``. For a quantile ``q = a/100`` (whole percent), candidate
j has the integer utility ``u_j = −|100·F_j − a·n|``, where ``F_j`` is the number of rows of norm ≤ ``c_j`` and n
the number of rows: the closer the share of rows at or below ``c_j`` is to q, the higher. Adding or removing one row
moves ``100·F_j`` by 100 or 0 and ``a·n`` by a, in the same direction, so each utility moves by at most
``Δ = max(a, 100 − a)``. Report noisy max with ``Lap(2Δ/ε)`` noise on every utility is ε-DP (Dwork & Roth 2014,
Claim 3.9, for sensitivity-Δ utilities); the utilities are integers, so the hardened sampler's lattice noise
applies unchanged. Nothing else is released: the share of clipped rows is q by construction, up to the grid's
resolution and the mechanism's error (:func:`quantile_error_bound`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms._validation import positive_finite
from dppca_dask.mechanisms.noise import NoiseSource

__all__ = ["NormGrid", "private_quantile", "quantile_error_bound"]


@dataclass(frozen=True)
class NormGrid:
    """Public candidate bounds ``low·2^(j/per_octave)``, ``j = 0..n_points−1`` (ascending)."""

    low: float = 2.0**-10
    per_octave: int = 4
    n_points: int = 30 * 4 + 1

    def __post_init__(self) -> None:
        positive_finite("low", self.low)
        if self.per_octave < 1 or self.n_points < 2:
            raise InvalidParameterError(
                f"a norm grid needs per_octave >= 1 and n_points >= 2; got {self.per_octave}, {self.n_points}")

    @property
    def values(self) -> np.ndarray:
        return self.low * np.exp2(np.arange(self.n_points, dtype=np.float64) / self.per_octave)

    def to_json(self) -> dict[str, float | int]:
        return {"low": self.low, "per_octave": self.per_octave, "n_points": self.n_points}


def _percent(quantile: float) -> int:
    percent = round(float(quantile) * 100)
    if not 1 <= percent <= 99 or abs(percent - float(quantile) * 100) > 1e-9:
        raise InvalidParameterError(
            f"quantile must be a whole percent in [0.01, 0.99]; got {quantile!r}; e.g. 0.9")
    return percent


def private_quantile(
    counts: Any,
    count: int,
    *,
    grid: NormGrid,
    quantile: float,
    epsilon: float,
    noise: NoiseSource,
    release: str = "row-norm-quantile",
) -> tuple[float, Any]:
    """Release the candidate bound nearest the ``quantile`` of row norms (report noisy max).

    Parameters
    ----------
    counts
        Exact ``F_j`` per candidate (:func:`dppca_dask.kernels.block.norm_counts`, summed over partitions).
    count
        Exact number of rows.

    Returns
    -------
    bound, event
        The released candidate ``c_j`` and ``EpsilonDeltaDpEvent(epsilon, 0)``.

    Notes
    -----
    Privacy contract: add/remove one row; each utility has sensitivity Δ = max(a, 100 − a) for ``q = a/100``;
    the noisy argmax with ``Lap(2Δ/ε)`` is ε-DP. The audit hook sees the utilities with per-utility
    sensitivity Δ (the "svt" kind: each query's movement is checked).
    """
    from dppca_dask.accounting.events import EpsilonDeltaDpEvent

    percent = _percent(quantile)
    eps = positive_finite("epsilon", epsilon)
    values = np.asarray(counts, dtype=np.int64)
    if values.shape != (grid.n_points,):
        raise InvalidParameterError(f"counts must have one entry per candidate ({grid.n_points}); got {values.shape}")
    utilities = -np.abs(100 * values - percent * int(count)).astype(np.float64)
    sensitivity = float(max(percent, 100 - percent))
    scale = 2.0 * sensitivity / eps
    with noise.release(release):
        noise.audit(kind="svt", exact=utilities, sensitivity=sensitivity, scale=(scale, scale))
        drawn = noise.laplace(scale, size=grid.n_points)
    index = int(np.argmax(utilities + np.asarray(drawn)))
    return float(grid.values[index]), EpsilonDeltaDpEvent(eps, 0.0)


def quantile_error_bound(*, quantile: float, epsilon: float, n_points: int, beta: float) -> float:
    """With probability ≥ 1 − β, the released candidate's utility is within this many *rows* of the best one's.

    Report noisy max loses at most ``2·b·ln(J/β)`` in utility (each of J Laplace draws stays within
    ``b·ln(J/β)`` of zero w.p. ≥ 1 − β), ``b = 2Δ/ε``; the utility counts rows in units of 100.
    """
    percent = _percent(quantile)
    scale = 2.0 * max(percent, 100 - percent) / positive_finite("epsilon", epsilon)
    return 2.0 * scale * math.log(n_points / beta) / 100.0
