"""Where partitions come from: a zarr store (read by tasks on workers) or in-memory data.

A source describes how a worker obtains partition ``i`` as a :class:`PartitionData` (float64 block and row norms).
Sources are validated once, at the public boundary (:func:`as_source`), never inside kernels.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask._sizeof import register_fields
from dppca_dask.errors import InferredSchemaWarning, InvalidInputError, InvalidParameterError
from dppca_dask.storage import MatrixStore, open_matrix, row_norms_of, validate_csr_block, validate_dense_block

__all__ = ["INFERRED_SCHEMA_CAVEAT", "PartitionData", "PartitionSource", "as_source", "partition_rows",
           "scatter_inputs", "schema_caveats"]


def _in_memory_partitions() -> int:
    """How many partitions in-memory data is split into: the ``dppca_dask.in-memory-partitions`` setting, else
    ``dask.system.CPU_COUNT``. Public by construction: never the rows, entries or bytes of the data, which would
    show in the number of tasks of every step."""
    import dask
    import dask.system

    configured = dask.config.get("dppca_dask.in-memory-partitions", None)
    count = int(configured) if configured is not None else int(dask.system.CPU_COUNT or 1)
    if count < 1:
        raise InvalidParameterError(f"dppca_dask.in-memory-partitions must be >= 1; got {configured}")
    return count


@dataclass(frozen=True, slots=True)
class PartitionData:
    """One partition on a worker: rows as float64 (``csr_array`` or dense) and their L2 norms."""

    index: int
    block: Any
    norms: np.ndarray

    @property
    def nbytes(self) -> int:
        b = self.block
        if sp.issparse(b):
            return int(b.data.nbytes + b.indices.nbytes + b.indptr.nbytes + self.norms.nbytes)
        return int(np.asarray(b).nbytes + self.norms.nbytes)


register_fields(PartitionData)  # so that Dask's scheduler sees a persisted partition's real size


def load_store_partition(store: MatrixStore, index: int) -> PartitionData:
    """Read partition ``index`` of a store as float64 with its row norms (runs on a worker)."""
    # Checked and canonical; norms from the values multiplied, never the stored norms.
    block, norms = store.read_partition_with_norms(index, dtype=np.float64)
    return PartitionData(index, block, norms)


def make_partition(index: int, block: Any) -> PartitionData:
    """Wrap an in-memory block as float64 with its row norms (on a cluster the block is scattered to the worker
    once: :func:`scatter_inputs`)."""
    if sp.issparse(block):
        block = sp.csr_array(block, dtype=np.float64)
    else:
        block = np.ascontiguousarray(block, dtype=np.float64)
    return PartitionData(index, block, row_norms_of(block))


def partition_rows(item: Any) -> tuple[int, int]:
    """The index and row count of a partition (a :class:`PartitionData` or a ``(loader, args)`` pair), without
    reading its values where the item knows the count: a store's partition table, an in-memory block's shape.

    Runs on a worker. The count is the shape's, which the relations that release it treat as public; a store's
    table gives the same count as a read of the partition would (a read cuts the rows by the same table). Other
    loaders (a dask array's blocks, not persisted) load the partition.
    """
    if isinstance(item, PartitionData):
        return item.index, int(item.block.shape[0])
    loader, args = item
    if loader is load_store_partition:
        store, index = args
        return int(index), store.partitions[index].n_rows
    if loader is make_partition:
        index, block = args
        return int(index), int(block.shape[0])
    part = loader(*args)
    return part.index, int(part.block.shape[0])


@dataclass(frozen=True)
class PartitionSource:
    """The partitions of one matrix, and how a worker loads each of them."""

    n_rows: int
    n_cols: int
    n_partitions: int
    nbytes: int
    """Estimated memory of all partitions as float64 (private: it depends on the rows and entries; never used to
    decide what a run does)."""
    loaders: tuple[tuple[Callable[..., PartitionData], tuple[Any, ...]], ...]
    """For each partition, a function and its arguments returning the :class:`PartitionData`."""
    description: dict[str, Any]
    """Public description for provenance (store fingerprint, or the kind of in-memory input)."""
    store: MatrixStore | None = None
    always_persist: bool = False
    """In-memory inputs always live on the workers."""
    in_memory: bool = False
    """The loaders' arguments hold the blocks themselves (numpy or scipy input): :func:`scatter_inputs` sends
    each block to its worker once instead of inside a task."""


def _split_rows(n_rows: int) -> list[tuple[int, int]]:
    """Equal row ranges, as many as :func:`_in_memory_partitions` says (some empty when there are fewer rows)."""
    n_parts = _in_memory_partitions()
    bounds = np.linspace(0, n_rows, n_parts + 1).astype(int)
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def as_source(data: Any, storage_options: Any = None) -> PartitionSource:
    """Turn any supported input into a :class:`PartitionSource`, validating in-memory data.

    Supported: a store path or URL (``str``/``os.PathLike``; ``storage_options`` configure a URL's file system), a
    ``zarr.storage.FsspecStore``, an opened :class:`MatrixStore`, a ``dask.array.Array`` (rows chunked, one chunk
    across columns), a ``scipy.sparse`` matrix or array, a 2-D ``numpy`` array.
    """
    from zarr.storage import FsspecStore

    if isinstance(data, (str, os.PathLike, FsspecStore)):
        data = open_matrix(data, storage_options=storage_options)
    elif storage_options is not None:
        raise InvalidParameterError(
            f"storage_options apply to a store given by its URL; the input is a {type(data).__name__}: drop them")
    if isinstance(data, MatrixStore):
        store = data
        nbytes = store.nnz * 12 + store.n_rows * 16 if store.layout == "csr" else store.n_rows * store.n_cols * 8
        return PartitionSource(
            n_rows=store.n_rows,
            n_cols=store.n_cols,
            n_partitions=store.n_partitions,
            nbytes=int(nbytes),
            loaders=tuple((load_store_partition, (store, p.index)) for p in store.partitions),
            description={"kind": "store", "fingerprint": store.fingerprint, "format_version": store.format_version,
                         "schema": store.schema},
            store=store,
        )
    try:
        import dask.array as da
    except ImportError:  # pragma: no cover - dask is a dependency
        da = None  # type: ignore[assignment]
    if da is not None and isinstance(data, da.Array):
        return _dask_source(data)
    if sp.issparse(data):
        if data.ndim != 2:
            raise InvalidInputError(f"expected a 2-D matrix; got {data.ndim} dimensions")
        csr = validate_csr_block(data, n_cols=int(data.shape[1]), source="input matrix")
        bounds = _split_rows(csr.shape[0])
        blocks = [csr[a:b] for a, b in bounds]
        kind = "scipy.sparse"
    elif isinstance(data, np.ndarray) or hasattr(data, "__array__"):
        arr = np.asarray(data)
        if arr.ndim != 2:
            raise InvalidInputError(f"expected a 2-D matrix; got an array with {arr.ndim} dimensions")
        arr = validate_dense_block(arr, n_cols=int(arr.shape[1]), source="input array")
        bounds = _split_rows(arr.shape[0])
        blocks = [arr[a:b] for a, b in bounds]
        kind = "numpy"
    else:
        raise InvalidParameterError(
            f"unsupported input type {type(data).__name__}; pass a store path, a MatrixStore, a dask array, a "
            "scipy sparse matrix or a numpy array"
        )
    n_rows, n_cols = (int(s) for s in data.shape)
    if n_cols < 1:
        raise InvalidInputError(f"the matrix has no columns (shape {tuple(data.shape)}); nothing to analyse")
    nbytes = sum(_block_bytes(b) for b in blocks)
    return PartitionSource(
        n_rows=n_rows,
        n_cols=n_cols,
        n_partitions=len(blocks),
        nbytes=nbytes,
        loaders=tuple((make_partition, (i, b)) for i, b in enumerate(blocks)),
        description={"kind": kind},
        always_persist=True,
        in_memory=True,
    )


def scatter_inputs(source: PartitionSource, client: Any, placement: Sequence[str | None]) -> tuple[Any, ...]:
    """Send the blocks of an in-memory source to the workers once, partition ``i`` to ``placement[i]``.

    Returns the loaders with each block replaced by its future, for tasks that build the partitions where the
    blocks are (``client.scatter``: the block travels once, from the client to its worker, and never inside a task
    graph through the scheduler). Scattered data has no lineage: the client keeps the blocks (the source holds them),
    and :class:`~dppca_dask.coordinator.Coordinator` scatters them again if a worker holding one is lost.
    Other sources are returned unchanged. ``placement`` depends only on the public partition index.
    """
    if not source.in_memory:
        return source.loaders
    loaders = []
    for (loader, (index, block)), worker in zip(source.loaders, placement):
        future = client.scatter(block, workers=[worker] if worker else None, hash=False)
        loaders.append((loader, (index, future)))
    return tuple(loaders)


def _block_bytes(block: Any) -> int:
    if sp.issparse(block):
        return int(block.nnz * 12 + block.shape[0] * 16)
    return int(block.shape[0] * (block.shape[1] * 8 + 8))


def _dask_source(arr: Any) -> PartitionSource:
    if arr.ndim != 2:
        raise InvalidInputError(f"expected a 2-D dask array; got {arr.ndim} dimensions")
    if len(arr.chunks[1]) != 1:
        raise InvalidParameterError(
            f"the dask array must have one chunk across its {arr.shape[1]} columns; got column chunks "
            f"{arr.chunks[1]}; rechunk with arr.rechunk({{1: -1}})"
        )
    if any(math.isnan(c) for c in arr.chunks[0]):
        raise InvalidParameterError("the dask array has unknown chunk sizes; call arr.compute_chunk_sizes() first")
    delayed = arr.to_delayed().ravel().tolist()
    n_rows, n_cols = (int(s) for s in arr.shape)
    itemsize = 8
    nbytes = n_rows * (n_cols * itemsize + 8)
    return PartitionSource(
        n_rows=n_rows,
        n_cols=n_cols,
        n_partitions=len(delayed),
        nbytes=int(nbytes),
        loaders=tuple((_load_dask_block, (i, d, n_cols)) for i, d in enumerate(delayed)),
        description={"kind": "dask.array"},
        always_persist=True,
    )


def _load_dask_block(index: int, block: Any, n_cols: int) -> PartitionData:
    """Validate and wrap one computed block of a dask array (validation runs before any noise is drawn).

    On a Dask cluster the block arrives computed (the delayed block is a dependency of the task); in-process
    (:class:`~dppca_dask.coordinator.LocalExecutor`) it is computed here, with the synchronous scheduler.
    """
    import dask

    if dask.is_dask_collection(block):
        block = block.compute(scheduler="sync")
    if sp.issparse(block):
        block = validate_csr_block(block, n_cols=n_cols, partition=index, source="dask array")
    else:
        block = validate_dense_block(block, n_cols=n_cols, partition=index, source="dask array")
    return make_partition(index, block)


#: The report's caveat for a store whose shape was inferred from the data.
INFERRED_SCHEMA_CAVEAT = "shape inferred from the data: not covered"


def schema_caveats(source: PartitionSource) -> tuple[str, ...]:
    """Caveats of a release from ``source``: a store whose width was inferred from the data (not declared at
    ingest) reveals it through every output's length, which the guarantee does not cover (DESIGN.md, invariant 9).

    Warns with :class:`~dppca_dask.errors.InferredSchemaWarning` and returns the caveat for the privacy report;
    in-memory inputs are the caller's own arrays, whose shape the caller vouches for (no caveat).
    """
    if source.store is None or source.store.schema == "declared":
        return ()
    warnings.warn(
        "the store's number of columns was inferred from the data at ingest, and every release reveals it, which "
        "the privacy guarantee does not cover; re-ingest with `dppca-dask ingest SRC --out STORE --n-features D` "
        "(for Parquet, `--column-ids FILE`) to declare it as public input",
        InferredSchemaWarning,
        stacklevel=3,
    )
    return (INFERRED_SCHEMA_CAVEAT,)
