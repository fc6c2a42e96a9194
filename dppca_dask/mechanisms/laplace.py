"""The Laplace mechanism."""

from __future__ import annotations

from typing import Any

from dp_accounting import LaplaceDpEvent
from numpy.typing import ArrayLike

from dppca_dask.mechanisms._validation import as_release_value, positive_finite
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
    inside ``noise.release(release)``, from a floating-point textbook sampler that is not hardened against
    floating-point attacks (Mironov 2012).
    """
    sensitivity = positive_finite("l1_sensitivity", l1_sensitivity)
    epsilon = positive_finite("epsilon", epsilon)
    exact = as_release_value(value, release)
    with noise.release(release):
        noise.audit(kind="laplace", exact=exact, sensitivity=sensitivity, scale=sensitivity / epsilon)
        drawn = noise.laplace(sensitivity / epsilon, size=exact.shape if exact.ndim else None)
    noisy = exact + drawn
    return noisy, LaplaceDpEvent(1.0 / epsilon)
