"""Tensor decomposition (seed 002, Wang & Anandkumar 2016): the robust tensor power method, its online and private
versions, and a private topic model built on them."""

from __future__ import annotations

from dppca_dask.methods.tensor.power import (
    TensorPowerResult,
    moment_power_method,
    online_power_method,
    tensor_power_method,
)

__all__ = ["TensorPowerResult", "moment_power_method", "online_power_method", "tensor_power_method"]
