"""The Laplace mechanism."""

from __future__ import annotations

from typing import Any

from dp_accounting import LaplaceDpEvent
from numpy.typing import ArrayLike

from dppca_dask.mechanisms._validation import as_release_value, positive_finite
from dppca_dask.mechanisms.hardened import on_lattice
from dppca_dask.mechanisms.noise import NoiseSource

__all__ = ["laplace_mechanism"]


def laplace_mechanism(
    value: ArrayLike,
    *,
    l1_sensitivity: float,
    epsilon: float,
    noise: NoiseSource,
    release: str,
) -> tuple[Any, LaplaceDpEvent]:
    """Release ``value + Lap(b)`` per coordinate with ``b = l1_sensitivity / epsilon``.

    Under a source with the ``"hardened"`` sampler: the value rounded to the lattice ``2^k·Z`` (``k =
    noise.lattice_exponent(l1_sensitivity / epsilon)``) plus exact discrete Laplace noise on it
    (``P(x) ∝ exp(-|x|/b)``), with ``b = Δ'/epsilon`` and ``Δ' = l1_sensitivity + 2^k·n`` (n entries).

    Parameters
    ----------
    value
        The exact value (scalar or array); it must be finite.
    l1_sensitivity
        Largest L1 distance between ``value`` on neighbouring datasets, under the relation the caller reports.
    epsilon
        ε of the release.
    noise
        Where the noise comes from.
    release
        Key of this release (each key once per noise source).

    Returns
    -------
    noisy_value : numpy.float64 or numpy.ndarray
        float64, the shape of ``value``.
    event : LaplaceDpEvent
        ``LaplaceDpEvent(1/epsilon)`` (noise scale over L1 sensitivity).

    Raises
    ------
    InvalidParameterError
        If ``l1_sensitivity`` or ``epsilon`` is not finite and > 0.
    InvalidInputError
        If ``value`` has NaN or infinite entries (nothing is drawn, the key stays unused).
    ReleaseError
        If ``release`` was already drawn from ``noise``.

    Notes
    -----
    Privacy contract: for neighbours under which ``value`` moves by at most ``l1_sensitivity`` in L1 norm, the
    release is ε-DP (Dwork–McSherry–Nissim–Smith 2006); it emits ``LaplaceDpEvent(1/ε)``. Noise is drawn once,
    inside ``noise.release(release)``.

    Floating point: with the ``"float"`` sampler, a textbook sampler that is not hardened against floating-point
    attacks (Mironov 2012). With ``"hardened"``, the rounded value moves by at most ``Δ' = l1_sensitivity +
    2^k·n`` in L1 norm between neighbours (each coordinate by at most ``2^(k-1)`` more per side), ``b = Δ'/ε``,
    and the discrete Laplace's probability ratio under a lattice shift s is at most ``exp(‖s‖₁/b)``, so the
    release is ε-DP with the same event. The audit hook receives the rounded value and ``Δ'``.
    """
    sensitivity = positive_finite("l1_sensitivity", l1_sensitivity)
    epsilon = positive_finite("epsilon", epsilon)
    exact = as_release_value(value, release)
    lattice = noise.lattice_exponent(sensitivity / epsilon)
    exact, sensitivity = on_lattice(exact, sensitivity, lattice, norm="l1")
    with noise.release(release):
        noise.audit(kind="laplace", exact=exact, sensitivity=sensitivity, scale=sensitivity / epsilon)
        drawn = noise.laplace(sensitivity / epsilon, size=exact.shape if exact.ndim else None, lattice=lattice)
    noisy = exact + drawn
    return noisy, LaplaceDpEvent(1.0 / epsilon)
