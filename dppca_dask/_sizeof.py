"""What Dask's scheduler sees as the size of the objects this package hands it.

Without these, ``dask.sizeof`` reports about 56 bytes for a ``scipy.sparse`` array (``csr_array``; Dask knows only
the older ``spmatrix`` classes) and for a persisted partition, so the scheduler believes gigabytes of persisted
partitions weigh a kilobyte: it steals tasks across workers as if moving a partition were free, and it cannot
balance memory. Registered here, for the partitions (:class:`~dppca_dask.coordinator.sources.PartitionData`,
through :func:`register_fields`), sparse arrays and the per-partition aggregates of the kernels. Importing this
module registers them; the modules that create these objects on workers import it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import scipy.sparse as sp
from dask.sizeof import sizeof

__all__ = ["register_fields"]

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


sizeof.register(sp.sparray)(_sparse_size)


def _register_kernel_types() -> None:
    from dppca_dask.kernels.block import BlockPartial, MeanPartial, NormCountsPartial, VariancePartial
    from dppca_dask.kernels.power import PowerPartial

    register_fields(PowerPartial, BlockPartial, MeanPartial, NormCountsPartial, VariancePartial)


_register_kernel_types()
