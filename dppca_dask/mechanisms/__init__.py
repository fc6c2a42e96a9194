"""Mechanisms: the only code in dppca_dask that draws privacy noise.

Each mechanism returns its noisy value together with the DpEvent it emits; noise comes from a
:class:`NoiseSource`, which allows one draw per release key.

Samplers are floating-point textbook samplers (numpy's Laplace and normal) driven by a ``PCG64DXSM`` generator
seeded with 256 bits of operating-system entropy. They are **not** hardened against floating-point attacks
(Mironov 2012): the least significant bits of a noisy float can reveal information about the exact value. A
seed passed by the caller makes every result not private (:class:`~dppca_dask.errors.NotPrivateWarning`).
"""

from __future__ import annotations

from dppca_dask.mechanisms.gaussian import gaussian_mechanism
from dppca_dask.mechanisms.laplace import laplace_mechanism
from dppca_dask.mechanisms.noise import NoiseSource, Shape
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
    "gaussian_mechanism",
    "laplace_mechanism",
    "svt_cutoff",
    "svt_event",
    "svt_replace_one_epsilon",
    "svt_first_below",
    "svt_scales",
]
