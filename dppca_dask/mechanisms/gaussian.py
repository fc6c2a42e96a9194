"""The Gaussian mechanism."""

from __future__ import annotations

from typing import Any

from dp_accounting import GaussianDpEvent
from numpy.typing import ArrayLike

from dppca_dask.mechanisms._validation import as_release_value, positive_finite
from dppca_dask.mechanisms.hardened import on_lattice
from dppca_dask.mechanisms.noise import NoiseSource

__all__ = ["gaussian_mechanism"]


def gaussian_mechanism(
    value: ArrayLike,
    *,
    l2_sensitivity: float,
    noise_multiplier: float,
    noise: NoiseSource,
    release: str,
) -> tuple[Any, GaussianDpEvent]:
    """Release ``value + N(0, σ²·I)`` with ``σ = noise_multiplier × l2_sensitivity``.

    Under a source with the ``"hardened"`` sampler: ``round(value) + N_{2^k Z}(0, σ²·I)``, the value rounded to
    the lattice ``2^k·Z`` (``k = noise.lattice_exponent(noise_multiplier × l2_sensitivity)``) plus exact discrete
    Gaussian noise on it, with ``σ = noise_multiplier × Δ'`` and ``Δ' = l2_sensitivity + 2^k·√n`` (n entries).

    Parameters
    ----------
    value
        The exact value (scalar or array); it must be finite.
    l2_sensitivity
        Largest L2 distance between ``value`` on neighbouring datasets, under the relation the caller reports.
    noise_multiplier
        σ / L2-sensitivity (dp-accounting's definition).
    noise
        Where the noise comes from.
    release
        Key of this release (each key once per noise source).

    Returns
    -------
    noisy_value : numpy.float64 or numpy.ndarray
        float64, the shape of ``value`` (a ``numpy.float64`` for a scalar).
    event : GaussianDpEvent
        ``GaussianDpEvent(noise_multiplier)``.

    Raises
    ------
    InvalidParameterError
        If ``l2_sensitivity`` or ``noise_multiplier`` is not finite and > 0.
    InvalidInputError
        If ``value`` has NaN or infinite entries (nothing is drawn, the key stays unused).
    ReleaseError
        If ``release`` was already drawn from ``noise``.

    Notes
    -----
    Privacy contract: for neighbours under which ``value`` moves by at most ``l2_sensitivity`` in L2 norm, the
    release is the Gaussian mechanism with multiplier m, which is exactly ``1/(2m²)``-zCDP and whose exact
    (ε, δ) profile is Balle–Wang's; the event ``GaussianDpEvent(m)`` lets the accountant compose it. Noise is
    drawn once, inside ``noise.release(release)``.

    Floating point: with the ``"float"`` sampler, a textbook sampler that is not hardened against floating-point
    attacks (Mironov 2012). With ``"hardened"``, the rounded value moves by at most ``Δ' = l2_sensitivity +
    2^k·√n`` between neighbours (each coordinate by at most ``2^(k-1)`` more per side), σ is ``m × Δ'`` so the
    event is still ``GaussianDpEvent(m)``, and the discrete Gaussian is ``Δ'²/(2σ²) = 1/(2m²)``-zCDP like the
    continuous one (Canonne–Kamath–Steinke 2020; :mod:`~dppca_dask.mechanisms.hardened` says how (ε, δ) is
    accounted). The audit hook receives the rounded value and ``Δ'``.
    """
    sensitivity = positive_finite("l2_sensitivity", l2_sensitivity)
    multiplier = positive_finite("noise_multiplier", noise_multiplier)
    exact = as_release_value(value, release)
    lattice = noise.lattice_exponent(multiplier * sensitivity)
    exact, sensitivity = on_lattice(exact, sensitivity, lattice, norm="l2")
    std = multiplier * sensitivity
    with noise.release(release):
        noise.audit(kind="gaussian", exact=exact, sensitivity=sensitivity, scale=std)
        drawn = noise.gaussian(std, size=exact.shape if exact.ndim else None, lattice=lattice)
    noisy = exact + drawn
    return noisy, GaussianDpEvent(multiplier)
