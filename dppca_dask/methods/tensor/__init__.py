"""Tensor decomposition (seed 002, Wang & Anandkumar 2016): the robust tensor power method, its online and private
versions, and a private topic model built on them (its entry point is :func:`dppca_dask.topics`)."""

from __future__ import annotations

from dppca_dask.methods.tensor.power import (
    TensorPowerResult,
    moment_power_method,
    online_power_method,
    tensor_power_method,
)

from dppca_dask.methods.tensor.private import private_tensor_power_method
from dppca_dask.methods.tensor.topics import TopicResult

__all__ = [
    "TensorPowerResult",
    "TopicResult",
    "moment_power_method",
    "online_power_method",
    "private_tensor_power_method",
    "tensor_power_method",
]
