"""Helpers of the Hardt–Roth mechanism tests: a noise source that records its draws, exact statistical bounds."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import stats

from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.noise import Shape

#: False-failure rate of each statistical assertion.
ALPHA = 1e-6


class RecordingNoiseSource(NoiseSource):
    """A seeded (not private) source that records every noise draw: ``(release key, kind, scale, values)``."""

    def __init__(self, seed: int) -> None:
        generator = np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(seed)))
        super().__init__(generator, private=False, description=f"recording seed={seed} (test)")
        self.draws: list[tuple[str, str, float, np.ndarray]] = []

    def _gaussian(self, std: float, size: Shape) -> Any:
        values = super()._gaussian(std, size)
        self.draws.append((str(self.current_release), "gaussian", float(std), np.asarray(values, dtype=float)))
        return values

    def _laplace(self, scale: float, size: Shape) -> Any:
        values = super()._laplace(scale, size)
        self.draws.append((str(self.current_release), "laplace", float(scale), np.asarray(values, dtype=float)))
        return values


def chi2_bounds(dof: int, alpha: float = ALPHA) -> tuple[float, float]:
    """Two-sided acceptance interval of a χ²(dof) statistic at false-failure rate ``alpha``."""
    return float(stats.chi2.ppf(alpha / 2, dof)), float(stats.chi2.isf(alpha / 2, dof))


def gamma_bounds(n: int, scale: float, alpha: float = ALPHA) -> tuple[float, float]:
    """Two-sided acceptance interval of ``Σ|z_i|`` for n i.i.d. Laplace(scale): Gamma(n, scale)."""
    return float(stats.gamma.ppf(alpha / 2, n, scale=scale)), float(stats.gamma.isf(alpha / 2, n, scale=scale))
