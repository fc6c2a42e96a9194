"""Tensor decomposition (seed 002, Wang & Anandkumar 2016): the robust tensor power method, its online and private
versions, and a private topic model built on them (its entry point is :func:`dppca_dask.topics`).

Modules, in reading order:

1. :mod:`~dppca_dask.methods.tensor.power`: the robust tensor power method (Alg. 1) and its online version (Alg. 2),
   one engine for explicit tensors and for the implicit third moment of a store's rows;
2. :mod:`~dppca_dask.methods.tensor.private`: the private tensor power method (Alg. 3) for explicit tensors, and
   its calibration;
3. :mod:`~dppca_dask.methods.tensor.requests`: what the power method and the topic model ask of a store, each
   registered with the coordinator with its kernel task;
4. :mod:`~dppca_dask.methods.tensor.rows`: the row-level private power method on the third moment of a store's
   rows (beyond the paper);
5. :mod:`~dppca_dask.methods.tensor.topics`: the topic model's steps (calibration, whitening, the private tensor
   power method on the whitened moment, un-whitening), its result
   :class:`~dppca_dask.methods.tensor.topics.TopicResult` and its loader;
6. :mod:`~dppca_dask.methods.tensor.mechanism`: the registry entry of the topic model (validation and planned
   events);
7. :mod:`~dppca_dask.methods.tensor.job`: the ``topics`` entry kind, what a job naming the topic model runs,
   checks, plans and loads;
8. :mod:`~dppca_dask.methods.tensor.corpora`: synthetic corpora with planted topics, for tests and benchmarks.
"""

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
