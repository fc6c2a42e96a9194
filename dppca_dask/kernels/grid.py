"""The public threshold grid of adaptive private power iteration (seed 004 spec §3.1).

With rows clipped to ``‖a‖ ≤ c`` and a unit iterate x, every score ``‖a‖·|⟨a, x⟩|`` lies in ``[0, c²]``. The grid
runs downward from ``c²``: ``θ_j = c²·2^(-j/g)`` for ``j = 0..J`` (``g`` points per octave). It depends only on
public parameters, never on the data.

A row's *bin* is the first grid index at which it is filtered: ``bin(s) = min{j : s > θ_j}``, or ``J + 1`` when
``s ≤ θ_J`` (never filtered). The number of rows filtered at ``θ_j`` is then ``F_j = #{rows : bin ≤ j}``, a
cumulative sum of the bin histogram.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from dppca_dask.errors import InvalidParameterError
from dppca_dask.kernels import _jit
from dppca_dask.kernels._jit import jit

__all__ = ["ThresholdGrid"]


@dataclass(frozen=True, slots=True)
class ThresholdGrid:
    """Grid ``θ_j = top·2^(-j/per_octave)``, ``j = 0..n_points-1`` (descending)."""

    top: float
    """``c²``, the largest possible score for rows clipped to norm ``c`` and a unit iterate."""
    per_octave: int = 4
    """Grid points per factor of two (finer grids cost no privacy)."""
    n_points: int = 97
    """Number of grid points ``J + 1``; the smallest is ``top·2^(-(n_points-1)/per_octave)``."""
    thetas: np.ndarray = field(init=False, repr=False, compare=False)
    """The grid values, descending (``thetas[0] == top``)."""
    _ascending: np.ndarray = field(init=False, repr=False, compare=False)
    _bounds: np.ndarray = field(init=False, repr=False, compare=False)
    """``+inf``, the grid values, ``-inf``: ``_bounds[b]`` is ``θ_{b-1}`` (see :meth:`bins_by_logs`)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "top", float(self.top))  # (numpy scalars too: the kernels clamp scores to it)
        if not (math.isfinite(self.top) and self.top > 0):
            raise InvalidParameterError(f"grid top must be finite and > 0; got {self.top}")
        if self.per_octave < 1:
            raise InvalidParameterError(f"per_octave must be >= 1; got {self.per_octave}")
        if self.n_points < 1:
            raise InvalidParameterError(f"n_points must be >= 1; got {self.n_points}")
        thetas = self.top * np.exp2(-np.arange(self.n_points, dtype=np.float64) / self.per_octave)
        thetas.setflags(write=False)
        asc = thetas[::-1].copy()
        asc.setflags(write=False)
        object.__setattr__(self, "thetas", thetas)
        object.__setattr__(self, "_ascending", asc)
        bounds = np.concatenate(([np.inf], thetas, [-np.inf]))
        bounds.setflags(write=False)
        object.__setattr__(self, "_bounds", bounds)

    @classmethod
    def for_bound(cls, row_norm_bound: float, *, per_octave: int = 4, octaves: int = 24) -> ThresholdGrid:
        """The grid for rows clipped to ``row_norm_bound``, spanning ``octaves`` factors of two below ``c²``."""
        if not (math.isfinite(row_norm_bound) and row_norm_bound > 0):
            raise InvalidParameterError(f"row_norm_bound must be finite and > 0; got {row_norm_bound}")
        if octaves < 1:
            raise InvalidParameterError(f"octaves must be >= 1; got {octaves}")
        return cls(top=float(row_norm_bound) ** 2, per_octave=per_octave, n_points=per_octave * octaves + 1)

    @property
    def n_bins(self) -> int:
        """Histogram length: one bin per grid index plus the "never filtered" bin ``J + 1``."""
        return self.n_points + 1

    @property
    def ascending(self) -> np.ndarray:
        """The grid values in ascending order (read-only)."""
        return self._ascending

    def bins(self, scores: np.ndarray) -> np.ndarray:
        """``bin(s) = min{j : s > θ_j}`` for each score (``n_points`` when no grid value is below ``s``)."""
        scores = np.asarray(scores, dtype=np.float64)
        if _jit.HAVE_NUMBA and scores.ndim == 1:
            return self.bins_and_histogram(scores)[0]
        return self.bins_by_logs(scores)

    def bins_by_logs(self, scores: np.ndarray) -> np.ndarray:
        """:meth:`bins` from the grid's closed form (numpy only), the same values as :meth:`bins_searchsorted`.

        ``θ_j = top·2^(-j/g)`` gives ``bin(s) = ⌊g·log2(top/s)⌋ + 1`` (clipped to ``0..n_points``) in exact
        arithmetic. For grid values in the normal range the rounding of the logarithm and of the grid values moves
        that guess by at most one, and one exact comparison with each neighbouring grid value (``s > θ_{b-1}``: one
        lower; ``s ≤ θ_b``: one higher) puts it right; grid values rounded to subnormals (or to zero) can be off by
        more, so the comparisons repeat until no bin moves (one more pass, which moves nothing, on an ordinary
        grid). A binary search costs a mispredicted branch per step: 1.9-2.0 ms against 0.9 ms for the 54,348
        scores of a benchmark partition (one core, idle machine). Scores below zero (never a kernel's) are searched.
        """
        scores = np.asarray(scores, dtype=np.float64)
        if scores.ndim == 0:
            return self.bins_by_logs(scores.reshape(1))[0]
        if (scores < 0).any():  # never a kernel's score (a NaN is placed below, where the search places it)
            return self.bins_searchsorted(scores)
        with np.errstate(divide="ignore", invalid="ignore"):
            guess = np.log2(scores)  # -inf for a zero score, NaN for NaN
        guess -= math.log2(self.top)
        guess *= -float(self.per_octave)
        np.floor(guess, out=guess)
        guess += 1
        np.fmax(guess, 0, out=guess)  # fmax/fmin: a NaN score gets bin 0, where the binary search puts it
        np.fmin(guess, self.n_points, out=guess)
        bins = guess.astype(np.int64)
        bounds = self._bounds
        while True:
            lower = scores > bounds[bins]  # s > θ_{b-1}: one lower (θ_{-1} = +inf)
            bins -= lower
            higher = scores <= bounds[bins + 1]  # s ≤ θ_b: one higher (θ_{n_points} = -inf)
            bins += higher
            if not (lower.any() or higher.any()):
                return bins

    def bins_searchsorted(self, scores: np.ndarray) -> np.ndarray:
        """:meth:`bins` by binary search (numpy only)."""
        below = np.searchsorted(self._ascending, scores, side="left")  # number of grid values < s
        return (self.n_points - below).astype(np.int64)

    def bins_and_histogram(self, scores: np.ndarray, *, out: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`bins` of a 1-D array of scores and their histogram (length :attr:`n_bins`).

        With numba, a guess from ``θ_j = top·2^(-j/g)`` (``j ≈ g·log2(top/s)``) corrected by exact comparisons
        against the grid values, so the result is the definition's whatever the rounding of the logarithm. ``out``:
        an int64 array of the scores' length to hold the bins (returned), instead of a new one.
        """
        scores = np.asarray(scores, dtype=np.float64)
        if out is not None and (out.shape != scores.shape or out.dtype != np.int64 or not out.flags.writeable):
            raise ValueError(f"out must be a writeable int64 array of shape {scores.shape}")
        if not _jit.HAVE_NUMBA or _bins_jit is None:
            bins = self.bins_by_logs(scores)
            if out is not None:
                out[...] = bins
                bins = out
            return bins, np.bincount(bins, minlength=self.n_bins).astype(np.int64)
        bins = np.empty(scores.shape[0], dtype=np.int64) if out is None else out
        histogram = np.zeros(self.n_bins, dtype=np.int64)
        _bins_jit(scores, self.thetas, math.log2(self.top), float(self.per_octave), bins, histogram)
        return bins, histogram

    def to_json(self) -> dict[str, float | int]:
        return {"top": self.top, "per_octave": self.per_octave, "n_points": self.n_points}


def _bins_loop(scores, thetas, log_top, per_octave, bins, histogram):  # type: ignore[no-untyped-def]  # noqa: ANN001
    """``bins[i] = min{j : scores[i] > thetas[j]}`` (``n_points`` if none) and their histogram."""
    n_points = thetas.shape[0]
    for i in range(scores.shape[0]):
        score = scores[i]
        # log2 of a score, -inf for zero (and below: placed by the comparisons), NaN for NaN
        log = math.log2(score) if score > 0.0 else (-math.inf if score <= 0.0 else score)
        guess = per_octave * (log_top - log)  # +inf for a zero score; NaN never reaches a kernel
        if guess >= n_points:
            b = n_points
        elif guess < 0 or guess != guess:  # (NaN: bin 0, as the binary search places it)
            b = 0
        else:
            b = min(int(guess) + 1, n_points)
        # The guess may be off by rounding: step to the exact bin (θ strictly descending, so it is unique).
        while b > 0 and score > thetas[b - 1]:
            b -= 1
        while b < n_points and score <= thetas[b]:
            b += 1
        bins[i] = b
        histogram[b] += 1


_bins_jit = jit(_bins_loop)
