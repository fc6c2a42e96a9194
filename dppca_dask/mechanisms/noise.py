"""The source of all privacy noise, and the rule that each release draws its noise exactly once.

Two samplers, chosen per source (``sampler=``), by the ``dask`` config key ``dppca_dask.noise_sampler``, by the
environment variable ``DPPCA_NOISE_SAMPLER`` (for deployments), or else :data:`DEFAULT_SAMPLER`:

``"hardened"``
    Exact discrete Gaussian / discrete Laplace samples on a public ``2^k`` lattice, drawn by OpenDP from the
    operating system's cryptographically secure generator (:mod:`dppca_dask.mechanisms.hardened`). The Gaussian
    and Laplace mechanisms round the exact value to the same lattice and calibrate the noise to the sensitivity
    plus the rounding distance, so ``value + noise`` is the exact discrete mechanism rounded once to float64: the
    floating-point attack of Mironov 2012 does not apply. The SVT's threshold and query noise are discrete Laplace
    on a lattice containing the integers.
``"float"``
    numpy's textbook floating-point samplers (``Generator.laplace``, ``Generator.normal``) on a ``PCG64DXSM``
    generator seeded with 256 bits from the operating system (:mod:`secrets`). **Not** hardened: the low-order
    bits of a textbook sample can leak the value it was added to (Mironov 2012), and ``PCG64DXSM`` is not a
    cryptographic generator.

Not hardened under either sampler: the draws of :mod:`dppca_dask.mechanisms.secret`, i.e. the start vectors of
private power iteration and the secret sketching matrix Ω of the private range finder, come from the source's
``PCG64DXSM`` generator seeded from the operating system. They are not added to data values, but they are not
drawn from a cryptographic generator either. (Adaptive power's start vector is drawn with
:meth:`NoiseSource.gaussian` and so follows the sampler.) The SVT compares noisy counts in exact arithmetic
(:func:`dppca_dask.mechanisms.svt_first_below`).

A seeded source (:meth:`NoiseSource.from_seed`, not private) always uses the float sampler so that a seed
reproduces a run: OpenDP's samplers read the operating system's generator and cannot be seeded. Asking for
``sampler="hardened"`` with a seed is an error.
"""

from __future__ import annotations

import math
import os
import secrets
import threading
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError, ReleaseError, NotPrivateWarning
from dppca_dask.mechanisms.shapes import Shape, shape_of

__all__ = [
    "DEFAULT_SAMPLER",
    "SAMPLERS",
    "SAMPLER_CONFIG_KEY",
    "SAMPLER_ENV",
    "NoiseSource",
    "Shape",
    "default_sampler",
]

_ENTROPY_BITS = 256


#: The samplers a source can use (see the module docstring).
SAMPLERS = ("hardened", "float")

#: The sampler of :meth:`NoiseSource.from_entropy` when neither the config key nor the environment sets one.
#: ``"float"``: a whole ``pca`` run on a 200,000 × 20,000 store took 1.6–1.8 times as long with the hardened
#: samplers (``benchmarks/bench_noise.py``; OpenDP draws an exact sample in 20–50 µs, numpy in well under 1 µs,
#: and a run draws k·(T + 1) Gaussian vectors of d values), beyond the 20% the project accepts for a default. The
#: cost is fixed per release, so it weighs less on more rows. Deployments that face floating-point attacks set
#: ``DPPCA_NOISE_SAMPLER=hardened``.
DEFAULT_SAMPLER = "float"

#: ``dask`` config key that sets the default sampler (``dask.config.set({"dppca_dask.noise_sampler": "float"})``).
SAMPLER_CONFIG_KEY = "dppca_dask.noise_sampler"

#: Environment variable that sets the default sampler for a deployment (``DPPCA_NOISE_SAMPLER=float``).
SAMPLER_ENV = "DPPCA_NOISE_SAMPLER"


def _check_sampler(value: object, source: str) -> str:
    if not isinstance(value, str) or value.strip().lower() not in SAMPLERS:
        raise InvalidParameterError(
            f"{source} must be one of {', '.join(repr(s) for s in SAMPLERS)}; got {value!r}; "
            "'hardened' draws exact discrete noise from the OS (private runs), 'float' numpy's float samplers"
        )
    return value.strip().lower()


def default_sampler() -> str:
    """The sampler of a private source when none is given.

    In order: the ``dask`` config key :data:`SAMPLER_CONFIG_KEY` (set in code or in a dask YAML file), the
    environment variable :data:`SAMPLER_ENV`, then :data:`DEFAULT_SAMPLER`.

    Raises
    ------
    InvalidParameterError
        If the config key or the environment variable holds another value than ``"hardened"`` or ``"float"``.
    """
    import dask.config

    configured = dask.config.get(SAMPLER_CONFIG_KEY, None)
    if configured is not None:
        return _check_sampler(configured, f"the dask config key {SAMPLER_CONFIG_KEY!r}")
    environment = os.environ.get(SAMPLER_ENV)
    if environment is not None and environment.strip():
        return _check_sampler(environment, f"the environment variable {SAMPLER_ENV}")
    return DEFAULT_SAMPLER


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
    sampler
        ``"float"`` (numpy's samplers on ``generator``) or ``"hardened"`` (exact discrete samplers on a lattice
        from the OS CSPRNG; ``generator`` then only serves :mod:`~dppca_dask.mechanisms.secret`); see the module
        docstring.

    Notes
    -----
    Only the ``"hardened"`` sampler resists floating-point attacks (Mironov 2012); see the module docstring. A
    source cannot be copied or pickled: a copy would replay its noise. A key
    is consumed when its release *begins*: a release that fails halfway
    cannot be retried under the same key, because some noise may already have been drawn and used.
    """

    def __init__(
        self, generator: np.random.Generator, *, private: bool, description: str = "", sampler: str = "float"
    ) -> None:
        if not isinstance(generator, np.random.Generator):
            raise InvalidParameterError(
                f"generator must be a numpy.random.Generator; got {type(generator).__name__}; "
                "use NoiseSource.from_entropy() or NoiseSource.from_seed(seed)"
            )
        self._sampler = _check_sampler(sampler, "sampler")
        self._rng = generator
        self._private = bool(private)
        self._description = description
        self._released: set[str] = set()
        self._independent: set[str] = set()
        self._current: str | None = None
        self._lock = threading.Lock()

    # -- construction -------------------------------------------------------------------------------------

    @classmethod
    def from_entropy(cls, sampler: str | None = None) -> NoiseSource:
        """A private source seeded from the operating system.

        Parameters
        ----------
        sampler
            ``"hardened"`` or ``"float"``; None takes :func:`default_sampler` (config key, environment variable,
            then :data:`DEFAULT_SAMPLER`). The draws of :mod:`~dppca_dask.mechanisms.secret` come from
            ``PCG64DXSM`` seeded with 256 bits from :mod:`secrets` under both.
        """
        sampler = default_sampler() if sampler is None else _check_sampler(sampler, "sampler")
        if sampler == "hardened":
            from dppca_dask.mechanisms.hardened import _import_opendp

            _import_opendp()  # fail here, before any budget is used, if OpenDP cannot be loaded
        seed = np.random.SeedSequence(secrets.randbits(_ENTROPY_BITS))
        description = "os-entropy" if sampler == "float" else "os-entropy, hardened (OpenDP discrete samplers)"
        return cls(
            np.random.Generator(np.random.PCG64DXSM(seed)), private=True, description=description, sampler=sampler
        )

    @classmethod
    def from_seed(cls, seed: int, sampler: str | None = None) -> NoiseSource:
        """A reproducible source for tests and benchmarks; results it produces are **not** private.

        Always the float sampler, whatever the configured default: the hardened samplers draw from the operating
        system and cannot be seeded. Warns :class:`~dppca_dask.errors.NotPrivateWarning`: anyone who knows the
        seed can subtract the noise.

        Raises
        ------
        InvalidParameterError
            For a seed that is not an integer >= 0, or ``sampler="hardened"`` (which cannot be seeded).
        """
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise InvalidParameterError(f"seed must be an integer >= 0; got {seed!r}")
        if sampler is not None and _check_sampler(sampler, "sampler") == "hardened":
            raise InvalidParameterError(
                "sampler='hardened' cannot be seeded: its noise comes from the operating system's secure generator; "
                "drop the seed for a private run (NoiseSource.from_entropy('hardened')), or use sampler='float'"
            )
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
    def sampler(self) -> str:
        """``"hardened"`` (exact discrete noise on a lattice, OS CSPRNG) or ``"float"`` (numpy's samplers)."""
        return self._sampler

    def lattice_exponent(self, scale: float) -> int | None:
        """The exponent k of the lattice ``2^k·Z`` this source draws noise of ``scale`` on; None for ``"float"``.

        A mechanism rounds its value to this lattice and inflates its sensitivity by the rounding distance
        (:mod:`dppca_dask.mechanisms.hardened`) before drawing with ``lattice=k``.
        """
        if self._sampler != "hardened":
            return None
        from dppca_dask.mechanisms.hardened import lattice_exponent

        return lattice_exponent(scale)

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
        return (
            f"{type(self).__name__}(private={self._private}, sampler={self._sampler!r}, "
            f"description={self._description!r})"
        )

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

    def _lattice(self, scale: float, lattice: int | None) -> int:
        if lattice is None:
            return self.lattice_exponent(scale)  # type: ignore[return-value]
        if isinstance(lattice, bool) or not isinstance(lattice, (int, np.integer)) or not -1074 <= lattice <= 1023:
            raise InvalidParameterError(
                f"lattice must be an integer exponent k in [-1074, 1023] (noise on 2^k·Z); got {lattice!r}; "
                "use noise.lattice_exponent(scale)"
            )
        return int(lattice)

    def laplace(self, scale: float, size: Shape = None, *, lattice: int | None = None) -> Any:
        """Laplace noise of scale ``b`` (density ``exp(-|x|/b)/(2b)``), float64; only inside a release.

        Under the ``"hardened"`` sampler: exact discrete Laplace on ``2^k·Z`` (``P(x) ∝ exp(-|x|/b)``), k =
        ``lattice`` or else :meth:`lattice_exponent` ``(b)``, which contains the integers for b < 2^41.

        Parameters
        ----------
        scale
            b > 0.
        size
            None for one float, else the shape of the array.
        lattice
            Exponent k of the hardened sampler's lattice (ignored by the float sampler).
        """
        return self._sample_noise("Laplace", _check_scale("scale", scale), size, lattice)

    def gaussian(self, std: float, size: Shape = None, *, lattice: int | None = None) -> Any:
        """Gaussian noise ``N(0, std²)``, float64; only inside a release.

        Under the ``"hardened"`` sampler: exact discrete Gaussian on ``2^k·Z`` (``P(x) ∝ exp(-x²/(2·std²))``), k
        = ``lattice`` or else :meth:`lattice_exponent` ``(std)``.

        Parameters
        ----------
        std
            Standard deviation > 0.
        size
            None for one float, else the shape of the array.
        lattice
            Exponent k of the hardened sampler's lattice (ignored by the float sampler).
        """
        return self._sample_noise("Gaussian", _check_scale("std", std), size, lattice)

    def _sample_noise(self, sampler: str, scale: float, size: Shape, lattice: int | None) -> Any:
        """One draw of ``sampler`` (``"Laplace"`` or ``"Gaussian"``) at a checked scale: the hardened sampler's
        exact discrete noise on its lattice, else the float sampler's; only inside a release."""
        k = self._lattice(scale, lattice) if self._sampler == "hardened" else None
        self._require_release(sampler)
        if k is not None:
            from dppca_dask.mechanisms import hardened

            discrete = hardened.discrete_laplace if sampler == "Laplace" else hardened.discrete_gaussian
            return discrete(scale, size, k)
        return self._laplace(scale, size) if sampler == "Laplace" else self._gaussian(scale, size)

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
