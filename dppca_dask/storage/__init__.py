"""Row-partitioned matrix stores in zarr (AnnData's on-disk CSR encoding), read lazily by Dask tasks.

See :mod:`dppca_dask.storage._format` for the layout.
"""

from __future__ import annotations

from dppca_dask.storage import _sessions  # noqa: F401  (object storage sessions closed at exit)
from dppca_dask.storage._format import FORMAT_VERSION
from dppca_dask.storage.store import MatrixStore, Partition, open_matrix, row_norms_of
from dppca_dask.storage.validate import validate_csr_block, validate_dense_block
from dppca_dask.storage.writer import StoreWriter, append_partition, drop_tail_partitions, write_matrix

__all__ = [
    "FORMAT_VERSION",
    "MatrixStore",
    "Partition",
    "StoreWriter",
    "append_partition",
    "drop_tail_partitions",
    "open_matrix",
    "row_norms_of",
    "validate_csr_block",
    "validate_dense_block",
    "write_matrix",
]
