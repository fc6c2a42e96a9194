"""What Dask's scheduler sees as the size of the objects this package hands it.

Without these, ``dask.sizeof`` reports about 56 bytes for a ``scipy.sparse`` array (``csr_array``; Dask knows only
the older ``spmatrix`` classes) and for a persisted partition, so the scheduler believes gigabytes of persisted
partitions weigh a kilobyte: it steals tasks across workers as if moving a partition were free, and it cannot
balance memory. Registered here, for the partitions (:class:`~dppca_dask.coordinator.sources.PartitionData`,
through :func:`register_fields`), sparse arrays and the per-partition aggregates of the kernels. Importing this
module registers them; the modules that create these objects on workers import it.

The scheduler shows these sizes (per key on the dashboard, as ``nbytes`` in the task stream and performance
reports), so a size is a value that leaves the coordinator. A kernel's aggregate reports a size computed from its
public shapes only (:func:`register_public_shapes`): its dense arrays (grid, d, k), the row pointers of its sparse
fields and the number of partitions it merges, never the stored entries of the top rows' contributions (the
columns the highest-scoring rows touch) or the value of an integer (a row count). Those are small next to the
dense arrays, so the scheduler's estimate stays close. A partition's size is its memory, which the worker's
memory use shows whatever is reported; it is reported as it is (the worker needs it to spill) and, like timings,
is not covered by the privacy guarantee.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import scipy.sparse as sp
from dask.sizeof import sizeof

__all__ = ["register_fields", "register_public_shapes"]

#: Python object overhead counted per registered object (a few hundred bytes at most; small next to the arrays).
_OVERHEAD = 128


def _sparse_size(array: Any) -> int:
    # The arrays a sparse array holds (data, indices, indptr or coords), as Dask counts spmatrix: its attributes.
    return _OVERHEAD + sum(sizeof(v) for v in vars(array).values())


def _fields_size(obj: Any) -> int:
    return _OVERHEAD + sum(sizeof(getattr(obj, f.name)) for f in dataclasses.fields(obj))


def register_fields(*types: type) -> None:
    """Report the size of instances of these dataclasses as the sum of their fields' sizes."""
    for kind in types:
        sizeof.register(kind)(_fields_size)


def _public_size(value: Any) -> int:
    """Bytes of ``value`` from what is public about it: an array's shape and type, a sparse array's row pointers
    (its shape), a mapping's length; a fixed size for a number."""
    if isinstance(value, np.ndarray):
        return int(value.size) * value.dtype.itemsize
    if sp.issparse(value):
        return 8 * (int(value.shape[0]) + 1)  # the row pointers; its stored entries depend on the data
    if isinstance(value, dict):
        return 64 + 16 * len(value)
    if isinstance(value, tuple):  # sparse pieces side by side (a gathered aggregate): one per gathered partial
        return sum(_public_size(v) for v in value)
    return 8


def _public_fields_size(obj: Any) -> int:
    return _OVERHEAD + sum(_public_size(getattr(obj, f.name)) for f in dataclasses.fields(obj))


def register_public_shapes(*types: type) -> None:
    """Report the size of instances of these dataclasses from their fields' public shapes only (see the module
    docstring): for aggregates whose exact size would tell something about the data."""
    for kind in types:
        sizeof.register(kind)(_public_fields_size)


sizeof.register(sp.sparray)(_sparse_size)


def _register_kernel_types() -> None:
    from dppca_dask.kernels.block import BlockPartial, MeanPartial, NormCountsPartial, VariancePartial
    from dppca_dask.kernels.power import PowerPartial

    register_public_shapes(PowerPartial, BlockPartial, MeanPartial, NormCountsPartial, VariancePartial)


_register_kernel_types()
