"""Mechanisms: the only code in dppca_dask that draws privacy noise.

Each mechanism returns its noisy value together with the DpEvent it emits; noise comes from a
:class:`NoiseSource`, which allows one draw per release key.

Two samplers, one switch (``NoiseSource.from_entropy(sampler=...)``, the ``dask`` config key
``dppca_dask.noise_sampler``, the environment variable ``DPPCA_NOISE_SAMPLER``; default ``"float"``):

- ``"hardened"``: the Gaussian and Laplace mechanisms round the value to a public ``2^k`` lattice, add exact
  discrete Gaussian / discrete Laplace noise drawn by OpenDP from the operating system's secure generator, and
  calibrate it to the sensitivity plus the rounding distance (:mod:`~dppca_dask.mechanisms.hardened`); the
  SVT's Laplace noise is discrete on a lattice holding the integers. Resists the floating-point attack of
  Mironov 2012.
- ``"float"``: numpy's textbook Laplace and normal samplers on ``PCG64DXSM`` seeded with 256 bits of
  operating-system entropy. **Not** hardened: the least significant bits of a noisy float can reveal
  information about the exact value.

Under both, the draws of :mod:`~dppca_dask.mechanisms.secret` (private power iteration's start vectors, the
private range finder's secret Ω) come from ``PCG64DXSM`` seeded from the operating system, not from a
cryptographic generator; adaptive power's start vector is drawn like noise and follows the sampler. A seed passed by
the caller makes every result not private (:class:`~dppca_dask.errors.NotPrivateWarning`) and always uses the
float sampler (the hardened one cannot be seeded).
"""

from __future__ import annotations

from dppca_dask.mechanisms.gaussian import gaussian_mechanism
from dppca_dask.mechanisms.laplace import laplace_mechanism
from dppca_dask.mechanisms.noise import NoiseSource, Shape, default_sampler
from dppca_dask.mechanisms.svt import (
    SvtResult,
    above_threshold,
    svt_cutoff,
    svt_event,
    svt_replace_one_epsilon,
    svt_first_below,
    svt_scales,
)

__all__ = [
    "NoiseSource",
    "Shape",
    "SvtResult",
    "above_threshold",
    "default_sampler",
    "gaussian_mechanism",
    "laplace_mechanism",
    "svt_cutoff",
    "svt_event",
    "svt_replace_one_epsilon",
    "svt_first_below",
    "svt_scales",
]
