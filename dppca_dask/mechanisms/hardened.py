"""Hardened noise: exact discrete Gaussian and discrete Laplace samples on a 2^k lattice, from OpenDP.

Textbook floating-point samplers leak through the low-order bits of ``value + noise`` (Mironov 2012, "On
significance of the least significant bits for differential privacy"). The hardened path avoids floating-point
noise altogether:

1. **Lattice.** Each release fixes a public lattice ``2^k·Z`` from its noise scale only:
   ``k = max(-1074, ⌊log2(scale)⌋ - 40)`` (:func:`lattice_exponent`), so the noise scale is between 2^40 and
   2^41 lattice steps. The exact value is rounded to the nearest lattice point, coordinate by coordinate
   (:func:`round_to_lattice`, exact in float64: halves go to the even point).
2. **Sensitivity.** Rounding moves each coordinate by at most ``2^(k-1)``, so on neighbouring datasets the rounded
   values differ by at most one lattice step more per coordinate than the exact ones:
   ``Δ₂' = Δ₂ + 2^k·√n`` in L2 norm and ``Δ₁' = Δ₁ + 2^k·n`` in L1 norm, n the number of coordinates
   (:func:`inflated_sensitivity`; the same bound OpenDP's ``make_gaussian``/``make_laplace`` apply to floats). The
   mechanisms calibrate the noise to ``Δ'``, keep their noise multiplier (Gaussian) or ε (Laplace), and so emit the
   same DpEvent as before with a scale larger by the factor ``Δ'/Δ`` (``1 + m·√n·2^-40`` at most for the Gaussian).
3. **Sampling.** OpenDP 0.16 (``make_gaussian`` / ``make_laplace`` with granularity ``k``) draws exact discrete
   Gaussian ``N_{2^k Z}(0, σ²)`` (``P(x) ∝ exp(-x²/2σ²)``) and discrete Laplace (``P(x) ∝ exp(-|x|/b)``) samples
   (Canonne–Kamath–Steinke 2020, Algorithms 1–3) with rational arithmetic and bits from the operating system's
   cryptographically secure generator. Each sample is a multiple of ``2^k`` below ``2^(53+k)`` in magnitude (it
   would take more than 4096 scales to leave that range), so it is an exact float64.
4. **Output.** ``rounded value + noise`` is then the exact discrete mechanism's output rounded once to the nearest
   float64 (IEEE addition is correctly rounded): a post-processing of the exact release, which leaks nothing more.

Accounting. Discrete Laplace with scale b on ``2^k·Z`` is ε-DP for L1 shifts ``Δ₁' ≤ ε·b`` (the density ratio
under a lattice shift s is at most ``exp(|s|/b)``), exactly like the continuous Laplace: ``LaplaceDpEvent(1/ε)``.
Discrete Gaussian with std σ on ``2^k·Z^n`` satisfies ``Δ₂'²/(2σ²)``-zCDP for shifts on the lattice of L2 norm
at most ``Δ₂'``: the same ρ as the continuous Gaussian at the same sensitivity (Canonne–Kamath–Steinke 2020,
"The Discrete Gaussian for Differential Privacy": concentrated DP of the discrete Gaussian, in one and in several
dimensions). The mechanisms emit ``GaussianDpEvent(m)`` with ``m = σ/Δ₂'`` and the accountants treat it as the
Gaussian mechanism with that multiplier: exact for ρ (zCDP accounting); for (ε, δ) the PLD accountant uses the
continuous Gaussian's exact profile. That profile is not a proven upper bound for the discrete mechanism; the two
differ by lattice sums against integrals on a grid of ``2^-40`` noise scales, which Canonne–Kamath–Steinke find
numerically indistinguishable already at grids of about one scale. Where a proven (ε, δ) is required, convert the
ρ above with the zCDP conversion (``accounting.zcdp``).

What is not hardened: the draws of :mod:`dppca_dask.mechanisms.secret` (private power iteration's start vectors,
the private range finder's secret Ω) still come from numpy's ``PCG64DXSM`` seeded from the operating system; they
are not added to a data value. The SVT (:mod:`dppca_dask.mechanisms.svt`) draws discrete Laplace noise here and
decides ``F_j + ν_j ≤ c + ρ`` in exact arithmetic (:func:`~dppca_dask.mechanisms.svt_first_below`).
"""

from __future__ import annotations

import math
import threading
from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError, MissingExtraError
from dppca_dask.mechanisms.shapes import shape_of

__all__ = [
    "LATTICE_BITS",
    "discrete_gaussian",
    "discrete_laplace",
    "inflated_sensitivity",
    "lattice_exponent",
    "on_lattice",
    "round_to_lattice",
]

#: The noise scale spans between 2^LATTICE_BITS and 2^(LATTICE_BITS+1) lattice steps.
LATTICE_BITS = 40

#: The smallest lattice exponent: 2^-1074 is the smallest positive float64.
MIN_EXPONENT = -1074

_opendp_lock = threading.Lock()
_opendp: Any = None


def lattice_exponent(scale: float) -> int:
    """The exponent k of the lattice ``2^k·Z`` for a noise scale: ``max(-1074, ⌊log2(scale)⌋ - 40)``.

    Depends on the (public) scale only. For scales below 2^41 (every SVT scale with ε > 2^-38), ``k ≤ 0`` and the
    lattice contains the integers, so integer counts shifted by whole counts stay on it.
    """
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise InvalidParameterError(f"scale must be finite and > 0; got {scale}")
    _, exponent = math.frexp(scale)  # scale = f·2^exponent, f in [0.5, 1): ⌊log2 scale⌋ = exponent - 1, exactly
    return max(MIN_EXPONENT, exponent - 1 - LATTICE_BITS)


def round_to_lattice(values: np.ndarray, k: int) -> np.ndarray:
    """Each entry rounded to the nearest multiple of ``2^k`` (ties to even), computed exactly in float64.

    Entries of magnitude at least ``2^(k+52)`` are multiples of ``2^k`` already and are returned unchanged.
    """
    array = np.asarray(values, dtype=np.float64)
    large = np.abs(array) >= math.ldexp(1.0, k + 52)
    scaled = np.ldexp(np.where(large, 0.0, array), -k)  # |scaled| < 2^52: exact, no overflow
    rounded = np.ldexp(np.rint(scaled), k)  # an integer below 2^52 times 2^k: exact
    return np.where(large, array, rounded)


def inflated_sensitivity(sensitivity: float, k: int, n_coordinates: int, *, norm: str) -> float:
    """The sensitivity of the rounded value: ``Δ₂ + 2^k·√n`` (``norm="l2"``) or ``Δ₁ + 2^k·n`` (``norm="l1"``).

    Each of the two neighbouring values moves by at most half a step, ``2^(k-1)``, per coordinate when rounded. The
    float result is rounded upward, so it is never below the exact bound.
    """
    if norm == "l2":
        extra = math.ldexp(math.sqrt(n_coordinates), k)
    elif norm == "l1":
        extra = math.ldexp(float(n_coordinates), k)
    else:
        raise InvalidParameterError(f"norm must be 'l1' or 'l2'; got {norm!r}")
    # Two steps up cover the rounding of the square root and of the sum.
    return math.nextafter(math.nextafter(float(sensitivity) + extra, math.inf), math.inf)


def on_lattice(exact: np.ndarray, sensitivity: float, k: int | None, *, norm: str) -> tuple[np.ndarray, float]:
    """The value a mechanism noises and the sensitivity it calibrates to: ``exact`` rounded to ``2^k·Z``
    (:func:`round_to_lattice`) with the sensitivity of the rounded value (:func:`inflated_sensitivity`), or both
    unchanged for ``k=None`` (the float sampler, which has no lattice)."""
    if k is None:
        return exact, sensitivity
    return round_to_lattice(exact, k), inflated_sensitivity(sensitivity, k, exact.size, norm=norm)


def _import_opendp() -> Any:
    global _opendp
    with _opendp_lock:
        if _opendp is None:
            try:
                import opendp.prelude as dp
            except ImportError as error:  # a broken install: opendp is a required dependency
                raise MissingExtraError(
                    "hardened sampling needs the 'opendp' package (0.16); install it with "
                    "`pip install 'opendp>=0.16,<0.17'` or use the float sampler (sampler='float')"
                ) from error
            dp.enable_features("contrib")  # OpenDP's measurements (make_gaussian, make_laplace) need it
            _opendp = dp
        return _opendp


def _draw(kind: str, scale: float, size: Any, k: int) -> Any:
    dp = _import_opendp()
    shape = shape_of(size)
    n = math.prod(shape)
    if n == 0:
        return np.zeros(shape)
    if kind == "gaussian":
        measurement = dp.m.make_gaussian(
            dp.vector_domain(dp.atom_domain(T=float, nan=False), size=n), dp.l2_distance(T=float), scale=scale, k=k
        )
    else:
        measurement = dp.m.make_laplace(
            dp.vector_domain(dp.atom_domain(T=float, nan=False), size=n), dp.l1_distance(T=float), scale=scale, k=k
        )
    drawn = np.asarray(measurement(np.zeros(n)), dtype=np.float64).reshape(shape)
    return float(drawn) if size is None else drawn


def discrete_gaussian(std: float, size: Any, k: int) -> Any:
    """Exact discrete Gaussian samples on ``2^k·Z`` with ``P(x) ∝ exp(-x²/(2·std²))`` (OpenDP, OS CSPRNG).

    A Python float for ``size=None``, else a float64 array of that shape; every value is a multiple of ``2^k``.
    """
    return _draw("gaussian", std, size, k)


def discrete_laplace(scale: float, size: Any, k: int) -> Any:
    """Exact discrete Laplace samples on ``2^k·Z`` with ``P(x) ∝ exp(-|x|/scale)`` (OpenDP, OS CSPRNG).

    A Python float for ``size=None``, else a float64 array of that shape; every value is a multiple of ``2^k``.
    """
    return _draw("laplace", scale, size, k)
