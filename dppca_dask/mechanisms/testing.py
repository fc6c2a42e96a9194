"""Noise sources for tests: no noise at all, or noise values chosen by the test.

Both keep the release discipline of :class:`~dppca_dask.mechanisms.NoiseSource` (draws only inside a release,
each key once), so tests that use them also check that invariant; both are ``private = False``, so any result
built with them says it is not private.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from dppca_dask.errors import ReleaseError
from dppca_dask.mechanisms.noise import NoiseSource, Shape, shape_of

__all__ = ["AuditRecord", "AuditingNoiseSource", "DrawRecord", "ScriptedNoiseSource", "ZeroNoiseSource"]


def _as_drawn(values: np.ndarray, size: Shape) -> Any:
    """Return like numpy's samplers: a Python float for ``size=None``, else a float64 array."""
    return float(values) if size is None else values


class ZeroNoiseSource(NoiseSource):
    """Draws exact zeros ("noise off"): mechanisms return their exact input, for comparisons with scipy/numpy.

    Not private (``private = False``); does not warn, since it exists only for tests.
    """

    def __init__(self) -> None:
        super().__init__(np.random.default_rng(0), private=False, description="zero-noise (test)")

    def _laplace(self, scale: float, size: Shape) -> Any:
        return _as_drawn(np.zeros(shape_of(size)), size)

    def _gaussian(self, std: float, size: Shape) -> Any:
        return _as_drawn(np.zeros(shape_of(size)), size)


class ScriptedNoiseSource(NoiseSource):
    """Returns pre-set noise values, in order, one entry of ``draws`` per sampler call.

    Parameters
    ----------
    draws
        Each item is the exact value one call returns (a number for ``size=None``, an array of the call's shape
        otherwise), whatever the sampler and its scale. E.g. for
        :func:`~dppca_dask.mechanisms.above_threshold`: ``[ρ, [ν_0, ν_1, ...]]``.

    Raises
    ------
    ReleaseError
        At a draw, when no scripted value is left or its shape does not match the call.
    """

    def __init__(self, draws: Iterable[ArrayLike]) -> None:
        super().__init__(np.random.default_rng(0), private=False, description="scripted noise (test)")
        self._draws: deque[np.ndarray] = deque(np.asarray(d, dtype=np.float64) for d in draws)

    @property
    def remaining(self) -> int:
        """Number of scripted values not yet drawn."""
        return len(self._draws)

    def _next(self, size: Shape) -> Any:
        if not self._draws:
            raise ReleaseError("the scripted noise source has no values left; script one value per draw")
        values = self._draws.popleft()
        if values.shape != shape_of(size):
            raise ReleaseError(
                f"scripted noise of shape {values.shape} does not match the draw of shape {shape_of(size)}; "
                "script values in the order and shapes the mechanism draws them"
            )
        return _as_drawn(values.copy(), size)

    def _laplace(self, scale: float, size: Shape) -> Any:
        return self._next(size)

    def _gaussian(self, std: float, size: Shape) -> Any:
        return self._next(size)



@dataclass(frozen=True)
class DrawRecord:
    """One call of the noise source's sampler: which release it was drawn in, at what scale, and the values."""

    release: str | None
    """The open release's key (``None``: drawn outside any release, which the source refuses before this)."""
    sampler: str
    """``"gaussian"`` or ``"laplace"``."""
    scale: float
    """The standard deviation (Gaussian) or scale b (Laplace) the sampler was asked for."""
    values: np.ndarray
    """What it returned (a copy, as a float64 array; shape ``()`` for one value)."""
    discrete: bool = False
    """Drawn by the hardened sampler, on a lattice (equal values in two draws are then expected)."""


@dataclass(frozen=True)
class AuditRecord:
    """One release as the mechanism saw it: the exact value before noise and the calibration it used."""

    release: str
    """The release key."""
    kind: str
    """``"gaussian"``, ``"laplace"``, ``"svt"``, ``"wishart"`` or ``"jl"``."""
    exact: np.ndarray
    """The value before noise (a copy), or the SVT's counts."""
    sensitivity: float
    """The sensitivity the noise was calibrated to (L2, L1, per count, or Frobenius for the matrix kinds)."""
    scale: Any
    """Gaussian std, Laplace scale, the SVT's ``(ρ scale, ν scale)``, Wishart degrees of freedom, or JL σ."""
    draws: list[DrawRecord] = field(default_factory=list, compare=False)
    """The sampler calls made in this release after the mechanism recorded it (filled as they happen)."""


class AuditingNoiseSource(NoiseSource):
    """A seeded source that records every release's exact value and calibration, and every draw (tests of privacy
    only).

    Two sources built with the same seed draw the same noise, so a mechanism run on neighbouring datasets with
    one each takes the same noisy decisions wherever the exact values allow; :attr:`records` then lets a test
    check that each pre-noise value moved by at most the sensitivity handed to the noise, and :attr:`draws` (also
    attached to the record of the release they were drawn in) that the noise drawn is the noise recorded. Not
    private.
    """

    def __init__(self, seed: int) -> None:
        super().__init__(np.random.default_rng(seed), private=False, description="auditing (test)")
        self.records: list[AuditRecord] = []
        self.draws: list[DrawRecord] = []

    def audit(self, *, kind: str, exact: Any, sensitivity: float, scale: Any) -> None:
        self.records.append(
            AuditRecord(
                release=str(self.current_release),
                kind=kind,
                exact=np.array(exact, dtype=np.float64, copy=True),
                sensitivity=float(sensitivity),
                scale=scale,
            )
        )

    def _sample_noise(self, sampler: str, scale: float, size: Shape, lattice: int | None) -> Any:
        """Every sampler call (whichever sampler, and whatever a subclass's ``_gaussian``/``_laplace`` return) is
        recorded with the scale the mechanism asked for and the values it got."""
        values = super()._sample_noise(sampler, scale, size, lattice)
        drawn = DrawRecord(self.current_release, sampler.lower(), float(scale),
                           np.array(values, dtype=np.float64, copy=True), self.sampler == "hardened")
        if not hasattr(self, "draws"):  # a subclass that set up its own state
            self.draws = []
        self.draws.append(drawn)
        if self.records and self.records[-1].release == drawn.release:
            self.records[-1].draws.append(drawn)
        return values
