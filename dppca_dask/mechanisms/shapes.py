"""The ``size`` argument of the noise samplers and the array shape it asks for.

Shared by :mod:`dppca_dask.mechanisms.noise` and :mod:`dppca_dask.mechanisms.hardened`, which both draw arrays of
that shape; kept apart so that neither imports the other to read it.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Shape", "shape_of"]

#: ``size`` argument of the samplers: None for one float, an int or a tuple for an array.
Shape = int | tuple[int, ...] | None


def shape_of(size: Shape) -> tuple[int, ...]:
    """The array shape a sampler's ``size`` argument asks for (``()`` for one float)."""
    if size is None:
        return ()
    if isinstance(size, (int, np.integer)):
        return (int(size),)
    return tuple(int(s) for s in size)
