"""The plan of a ``pca`` run with centring or an automatic row-norm bound, whichever family runs it.

Above the block run (:mod:`dppca_dask.methods.adaptive_power.block`), the centred Analyze Gauss run
(:mod:`dppca_dask.methods.analyze_gauss.centred`) and the accounted choice between them
(:mod:`dppca_dask.methods.adaptive_power.auto`), which all build on the block run's releases.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError
from dppca_dask.methods.adaptive_power.auto import plan_auto
from dppca_dask.methods.adaptive_power.block_plan import plan_block_power
from dppca_dask.methods.adaptive_power.centring import CentringOptions
from dppca_dask.methods.analyze_gauss.centred import plan_centred_gauss

__all__ = ["plan_with_centring"]


def plan_with_centring(params: Any, n_cols: int, options: CentringOptions) -> Any:
    """The plan of a ``pca`` run with centring or an automatic bound: the block run for adaptive power (any k), the
    centred Analyze Gauss run for Analyze Gauss; both release the explained variance."""
    if isinstance(options.center, np.ndarray) and options.center.shape != (n_cols,):
        raise InvalidParameterError(
            f"a given center must have one entry per column ({n_cols}); got shape {options.center.shape}")
    if params.mechanism == "analyze-gauss":
        return plan_centred_gauss(params, n_cols, center=options.center, auto_bound=options.auto_bound)
    if params.mechanism == "auto":
        return plan_auto(params, n_cols, center=options.center, auto_bound=options.auto_bound)
    return plan_block_power(params, n_cols, center=options.center, auto_bound=options.auto_bound)
