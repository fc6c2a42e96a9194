"""Noise sources for tests: no noise at all, or noise values chosen by the test.

Both keep the release discipline of :class:`~dppca_dask.mechanisms.NoiseSource` (draws only inside a release,
each key once), so tests that use them also check that invariant; both are ``private = False``, so any result
built with them says it is not private.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from dppca_dask.errors import ReleaseError
from dppca_dask.mechanisms.noise import NoiseSource, Shape, shape_of

__all__ = ["AuditRecord", "AuditingNoiseSource", "ScriptedNoiseSource", "ZeroNoiseSource"]


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
class AuditRecord:
    """One release as the mechanism saw it: the exact value before noise and the calibration it used."""

    release: str
    """The release key."""
    kind: str
    """``"gaussian"``, ``"laplace"`` or ``"svt"``."""
    exact: np.ndarray
    """The value before noise (a copy), or the SVT's counts."""
    sensitivity: float
    """The sensitivity the noise was calibrated to (L2, L1, or per count)."""
    scale: Any
    """Gaussian std, Laplace scale, or the SVT's ``(ρ scale, ν scale)``."""


class AuditingNoiseSource(NoiseSource):
    """A seeded source that records every release's exact value and calibration (tests of privacy only).

    Two sources built with the same seed draw the same noise, so a mechanism run on neighbouring datasets with
    one each takes the same noisy decisions wherever the exact values allow; :attr:`records` then lets a test
    check that each pre-noise value moved by at most the sensitivity handed to the noise. Not private.
    """

    def __init__(self, seed: int) -> None:
        super().__init__(np.random.default_rng(seed), private=False, description="auditing (test)")
        self.records: list[AuditRecord] = []

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
