"""The row-norm bound c: released as a private quantile of the row norms (``row_norm_bound="auto"``,
:class:`AutoBound`), or, for a public bound, the released fraction of rows it clips.

Both are one pass of :class:`~dppca_dask.methods.adaptive_power.requests.NormCounts` followed by one release at
the coordinator (:func:`~dppca_dask.mechanisms.quantile.private_quantile`,
:func:`~dppca_dask.mechanisms.centred.private_clipped_fraction`); their public shares of the budget are here.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np

from dppca_dask.mechanisms import NoiseSource
from dppca_dask.methods.adaptive_power.requests import NormCounts

__all__ = [
    "CLIPPED_FRACTION_WARNING",
    "DEFAULT_CLIPPED_SHARE",
    "DEFAULT_NORM_QUANTILE",
    "DEFAULT_QUANTILE_SHARE",
    "AutoBound",
    "release_clipped_fraction",
    "release_row_norm_bound",
]

#: Public share of the user's (ε, δ) given to the release of the fraction of rows a fixed ``row_norm_bound`` clips.
DEFAULT_CLIPPED_SHARE = 0.02
#: A released clipped fraction above this warns (:class:`~dppca_dask.errors.ClippingWarning`): more than half of the
#: rows scaled down means the components are those of rescaled rows (docs/guide/clipping.md).
CLIPPED_FRACTION_WARNING = 0.5
#: Public share of the user's ε (no δ) given to the private row-norm quantile (``row_norm_bound="auto"``).
DEFAULT_QUANTILE_SHARE = 0.05
#: The quantile of row norms that ``row_norm_bound="auto"`` aims at: about 10% of the rows are clipped.
DEFAULT_NORM_QUANTILE = 0.9


@dataclass(frozen=True)
class AutoBound:
    """``row_norm_bound="auto"``: a private quantile of row norms on a public grid, from its own ε."""

    grid: Any
    """The public :class:`~dppca_dask.mechanisms.quantile.NormGrid`."""
    quantile: float
    epsilon: float


def release_row_norm_bound(auto: AutoBound, noise: NoiseSource) -> Generator[Any, Any, tuple[float, Any]]:
    """Release the bound c of ``row_norm_bound="auto"``: one pass of :class:`~dppca_dask.methods.adaptive_power.requests.NormCounts`, then
    :func:`~dppca_dask.mechanisms.quantile.private_quantile` (``EpsilonDeltaDpEvent(auto.epsilon, 0)``)."""
    from dppca_dask.mechanisms.quantile import private_quantile

    counted = yield NormCounts(candidates=auto.grid.values)
    return private_quantile(counted.counts, counted.count, grid=auto.grid, quantile=auto.quantile,
                            epsilon=auto.epsilon, noise=noise)


def release_clipped_fraction(row_norm_bound: float, *, clipped_multiplier: float,
                             noise: NoiseSource) -> Generator[Any, Any, tuple[float, Any]]:
    """Release the fraction of rows the public bound c clips: one pass of :class:`~dppca_dask.methods.adaptive_power.requests.NormCounts` at c, then
    :func:`~dppca_dask.mechanisms.centred.private_clipped_fraction` (``GaussianDpEvent(clipped_multiplier)``)."""
    from dppca_dask.mechanisms.centred import private_clipped_fraction

    counted = yield NormCounts(candidates=np.array([float(row_norm_bound)]))
    count = int(counted.count)
    return private_clipped_fraction(count - int(counted.counts[0]), count, noise_multiplier=clipped_multiplier,
                                    noise=noise)
