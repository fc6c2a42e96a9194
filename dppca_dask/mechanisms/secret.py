"""Randomness of a mechanism that is not noise added to a value: start vectors and secret sketching matrices.

Private power iteration starts from a Gaussian vector (data-independent; its sign symmetry matters for the
analysis, Lemma 4.1 of Hardt & Roth 2013), and the private range finder multiplies the data by a Gaussian test
matrix Ω that must stay **secret**: its privacy proof bounds ``‖eᵀΩ‖`` only with high probability over Ω
(Hardt & Roth 2012, Lemma 4.1), so a published or guessable Ω voids the guarantee.

Both are drawn here, from the numpy generator of the run's :class:`~dppca_dask.mechanisms.NoiseSource`
(``PCG64DXSM`` seeded by the operating system, or by the caller's seed, which already marks the result as not
private), inside a release so each is drawn exactly once. They are not hardened: the source's ``"hardened"``
sampler (exact discrete noise from the operating system's secure generator) covers the noise the mechanisms add
to values, not these draws, and ``PCG64DXSM`` is not a cryptographic generator.

Test sources that replace noise (``ZeroNoiseSource``, ``ScriptedNoiseSource``) do not replace these draws: with
privacy noise switched off a mechanism must still equal its non-private algorithm, which needs a genuine Gaussian
Ω and start vector.
"""

from __future__ import annotations

import numpy as np

from dppca_dask.mechanisms.noise import NoiseSource, Shape

__all__ = ["secret_gaussian"]


def secret_gaussian(noise: NoiseSource, size: Shape, *, release: str) -> np.ndarray:
    """Standard Gaussian values of shape ``size`` from ``noise``'s generator, drawn once under ``release``.

    Parameters
    ----------
    noise
        The run's noise source.
    size
        Shape of the array.
    release
        Key of the draw (each key once per source).

    Returns
    -------
    numpy.ndarray
        float64 standard normal values; never written to results or logs by the library when secret (Ω).
    """
    with noise.release(release):
        generator = noise._rng  # noqa: SLF001 - the source's own generator, not its (replaceable) noise samplers
        return np.asarray(generator.standard_normal(size), dtype=np.float64)
