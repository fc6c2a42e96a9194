"""The source of all privacy noise, and the rule that each release draws its noise exactly once.

Samplers are numpy's floating-point textbook samplers (``Generator.laplace``, ``Generator.normal``) driven by a
``PCG64DXSM`` generator seeded with 256 bits from the operating system (:mod:`secrets`). They are **not**
hardened against floating-point attacks: the low-order bits of a textbook Laplace or Gaussian sample can leak
information about the value it was added to (Mironov 2012, "On significance of the least significant bits for
differential privacy"). Nor is ``PCG64DXSM`` a cryptographic generator: its output is not meant to be
unpredictable to someone who observes many draws; the OS seed only ensures that noise cannot be reproduced from a
guessable seed. A deployment facing such adversaries needs snapping/discrete samplers (OpenDP, Canonne–Kamath–
Steinke 2020) in place of these.
"""

from __future__ import annotations

import math
import secrets
import threading
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError, ReleaseError, NotPrivateWarning

__all__ = ["NoiseSource", "Shape"]

#: ``size`` argument of the samplers: None for one float, an int or a tuple for an array.
Shape = int | tuple[int, ...] | None

_ENTROPY_BITS = 256


def _check_scale(name: str, value: float) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise InvalidParameterError(f"{name} must be finite and > 0; got {value}")
    return value


class NoiseSource:
    """A generator of privacy noise that enforces one draw per release.

    Every noisy release is named by a key (``"component-0/iter-3/svt"``). Noise can be drawn only inside
    :meth:`release` (or between :meth:`begin_release` and :meth:`end_release`), and a key can be released only
    once per source: a second release under the same key raises, before any noise is drawn. A retried task or a
    resumed job must therefore reuse the released value rather than draw again (DESIGN.md, invariant 2).

    Build it with :meth:`from_entropy` (private) or :meth:`from_seed` (reproducible, not private).

    Parameters
    ----------
    generator
        The numpy generator noise is drawn from.
    private
        Whether the generator's seed is secret (from the OS); False marks every result as not private.
    description
        Public text for reports and logs (never the seed).

    Notes
    -----
    Samplers are floating-point textbook samplers and not hardened against floating-point attacks (Mironov
    2012); see the module docstring. A source cannot be copied or pickled: a copy would replay its noise. A key
    is consumed when its release *begins*: a release that fails halfway
    cannot be retried under the same key, because some noise may already have been drawn and used.
    """

    def __init__(self, generator: np.random.Generator, *, private: bool, description: str = "") -> None:
        if not isinstance(generator, np.random.Generator):
            raise InvalidParameterError(
                f"generator must be a numpy.random.Generator; got {type(generator).__name__}; "
                "use NoiseSource.from_entropy() or NoiseSource.from_seed(seed)"
            )
        self._rng = generator
        self._private = bool(private)
        self._description = description
        self._released: set[str] = set()
        self._independent: set[str] = set()
        self._current: str | None = None
        self._lock = threading.Lock()

    # -- construction -------------------------------------------------------------------------------------

    @classmethod
    def from_entropy(cls) -> NoiseSource:
        """A private source: ``PCG64DXSM`` seeded with 256 bits from the operating system (:mod:`secrets`)."""
        seed = np.random.SeedSequence(secrets.randbits(_ENTROPY_BITS))
        return cls(np.random.Generator(np.random.PCG64DXSM(seed)), private=True, description="os-entropy")

    @classmethod
    def from_seed(cls, seed: int) -> NoiseSource:
        """A reproducible source for tests and benchmarks; results it produces are **not** private.

        Warns :class:`~dppca_dask.errors.NotPrivateWarning`: anyone who knows the seed can subtract the noise.
        """
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise InvalidParameterError(f"seed must be an integer >= 0; got {seed!r}")
        warnings.warn(
            f"noise seeded with seed={int(seed)} is reproducible: results are NOT differentially private",
            NotPrivateWarning,
            stacklevel=2,
        )
        generator = np.random.Generator(np.random.PCG64DXSM(np.random.SeedSequence(int(seed))))
        return cls(generator, private=False, description=f"seed={int(seed)}")

    # -- state ----------------------------------------------------------------------------------------------

    @property
    def private(self) -> bool:
        """Whether noise from this source makes a release private (False for seeded and test sources)."""
        return self._private

    @property
    def description(self) -> str:
        """Public description (``"os-entropy"``, ``"seed=3"``, ...)."""
        return self._description

    @property
    def released_keys(self) -> frozenset[str]:
        """Keys of every release begun so far (including those marked with :meth:`mark_released`)."""
        with self._lock:
            return frozenset(self._released)

    @property
    def data_dependent_keys(self) -> frozenset[str]:
        """Keys of the releases begun so far whose values may depend on the data (all but ``data_independent``).

        A job that fails while this is empty has released nothing about its data, so its reserved budget can be
        returned; once it is not empty, the budget stays spent (DESIGN.md, invariant 6).
        """
        with self._lock:
            return frozenset(self._released - self._independent)

    @property
    def current_release(self) -> str | None:
        """The key of the open release, or None."""
        return self._current

    def __repr__(self) -> str:
        return f"{type(self).__name__}(private={self._private}, description={self._description!r})"

    def __reduce_ex__(self, protocol: object) -> Any:
        # A copy (pickle, copy.copy, deepcopy) would carry the generator's state and the set of released keys:
        # two copies would draw the same noise, or one key twice. Noise sources stay where they were created.
        raise ReleaseError(
            f"a {type(self).__name__} cannot be copied or pickled (copies would repeat its noise); "
            "keep it at the coordinator and pass released values instead"
        )

    # -- releases -------------------------------------------------------------------------------------------

    def mark_released(self, keys: Iterable[str]) -> None:
        """Record keys released earlier (e.g. by the interrupted job being resumed) so they can never be drawn."""
        keys = list(keys)
        for key in keys:
            self._check_key(key)
        with self._lock:
            self._released.update(keys)

    @staticmethod
    def _check_key(key: object) -> None:
        if not isinstance(key, str) or not key:
            raise InvalidParameterError(
                f"a release key must be a non-empty string; got {key!r}; e.g. 'component-0/iter-3/svt'"
            )

    def begin_release(self, key: str, *, data_independent: bool = False) -> None:
        """Open the release ``key``; noise can be drawn until :meth:`end_release`.

        ``data_independent=True`` declares that the value released under ``key`` is pure noise that does not
        depend on the data in any way (e.g. a random starting vector); it is still drawn at most once, but it
        does not count in :attr:`data_dependent_keys`.

        Raises
        ------
        ReleaseError
            If ``key`` was released before by this source, or another release is open.
        """
        self._check_key(key)
        with self._lock:
            if self._current is not None:
                raise ReleaseError(
                    f"release {key!r} cannot begin inside the open release {self._current!r}; "
                    "end the open release first"
                )
            if key in self._released:
                raise ReleaseError(
                    f"release {key!r} was already drawn from this noise source; noise is drawn exactly once per "
                    "release: reuse the released value instead of releasing it again"
                )
            self._released.add(key)
            if data_independent:
                self._independent.add(key)
            self._current = key

    def end_release(self) -> None:
        """Close the open release.

        Raises
        ------
        ReleaseError
            If no release is open.
        """
        with self._lock:
            if self._current is None:
                raise ReleaseError("end_release called with no open release; call begin_release first")
            self._current = None

    @contextmanager
    def release(self, key: str, *, data_independent: bool = False) -> Iterator[None]:
        """Context manager: ``with noise.release(key): noisy = value + noise.gaussian(std, size=...)``."""
        self.begin_release(key, data_independent=data_independent)
        try:
            yield
        finally:
            self.end_release()

    # -- samplers -------------------------------------------------------------------------------------------

    def _require_release(self, sampler: str) -> None:
        if self._current is None:
            raise ReleaseError(
                f"{sampler} noise can be drawn only inside a release; wrap the draw in "
                "'with noise.release(key):' (each key once)"
            )

    def laplace(self, scale: float, size: Shape = None) -> Any:
        """Laplace noise of scale ``b`` (density ``exp(-|x|/b)/(2b)``), float64; only inside a release.

        Parameters
        ----------
        scale
            b > 0.
        size
            None for one float, else the shape of the array.
        """
        scale = _check_scale("scale", scale)
        self._require_release("Laplace")
        return self._laplace(scale, size)

    def gaussian(self, std: float, size: Shape = None) -> Any:
        """Gaussian noise ``N(0, std²)``, float64; only inside a release.

        Parameters
        ----------
        std
            Standard deviation > 0.
        size
            None for one float, else the shape of the array.
        """
        std = _check_scale("std", std)
        self._require_release("Gaussian")
        return self._gaussian(std, size)

    # -- audit ----------------------------------------------------------------------------------------------

    def audit(self, *, kind: str, exact: Any, sensitivity: float, scale: Any) -> None:
        """Called by every mechanism inside its open release, with the exact value it is about to noise.

        A no-op here: the exact value never leaves the mechanism. The test source
        :class:`~dppca_dask.mechanisms.testing.AuditingNoiseSource` (never private) records it, so that the
        neighbouring-datasets tests can check that pre-noise values move by at most the sensitivity passed.

        Parameters
        ----------
        kind
            ``"gaussian"`` (L2 sensitivity), ``"laplace"`` (L1 sensitivity) or ``"svt"`` (per-count sensitivity).
        exact
            The value before noise (the SVT's counts).
        sensitivity
            The sensitivity the mechanism calibrates its noise to.
        scale
            The noise's standard deviation (Gaussian), Laplace scale, or ``(ρ scale, ν scale)`` (SVT).
        """

    # Overridden by the test sources in :mod:`dppca_dask.mechanisms.testing`.
    def _laplace(self, scale: float, size: Shape) -> Any:
        return self._rng.laplace(0.0, scale, size)

    def _gaussian(self, std: float, size: Shape) -> Any:
        return self._rng.normal(0.0, std, size)
