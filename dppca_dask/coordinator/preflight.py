"""The preflight pass: every partition is read and checked once before the first noise draw and any reservation.

Bad input must fail before any budget is reserved and before any noise is drawn, with an error that names the
partition and row (DESIGN.md, privacy invariant 7). Metadata checks at open time cannot see inside chunks: a NaN
written into a data chunk, a decreasing row pointer, an index beyond the width, duplicate entries in a foreign store
or a row whose norm overflows float64 are found only by reading the values. :func:`preflight` reads every partition
with the same loader the algorithm's steps use (through Dask when given a cluster, so it scales like any other
step) and raises the loader's own error, which names the partition and the row and says how to fix it.

The pass returns nothing derived from the data: it succeeds, or it raises. Its cost is one read of the data (none
when the partitions are persisted on the workers, which loading already checked).
"""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.coordinator.driver import Coordinator, LocalExecutor
from dppca_dask.coordinator.guard import guarded, unwrap
from dppca_dask.coordinator.sources import PartitionData, PartitionSource, as_source
from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.storage.validate import check_csr_arrays

__all__ = ["check_partition", "check_width_fits", "preflight"]


def check_partition(item: Any) -> None:
    """Load one partition (a :class:`PartitionData` or a ``(loader, args)`` pair) and check it; runs on a worker.

    The loaders already refuse malformed structure, non-finite values and overflowing norms; this also checks
    what the kernels rely on, so a loader that forgot a check cannot let a bad block through: a canonical CSR
    block (sorted indices, no duplicates, every column index in range and row pointers in order: the compiled
    loops read with them unchecked), finite values, one finite, non-negative norm per row.
    """
    if isinstance(item, PartitionData):
        part = item
    else:
        loader, args = item
        part = loader(*args)
    block, norms = part.block, np.asarray(part.norms)
    where = f"partition {part.index}"
    if sp.issparse(block):
        if block.format != "csr" or not _in_range(block) or not block.has_canonical_format:
            raise InvalidInputError(
                f"{where} is not canonical CSR (unsorted, duplicate or out-of-range entries); this is a defect of "
                "its reader: report it, and ingest the data with `dppca-dask ingest` meanwhile",
                partition=part.index,
            )
        values = block.data
    else:
        values = np.asarray(block)
    if values.size and not np.isfinite(values).all():
        raise InvalidInputError(f"{where} holds a NaN or infinite value; remove or impute it and re-ingest",
                                partition=part.index)
    if norms.shape != (int(block.shape[0]),) or (norms.size and not (np.isfinite(norms).all() and norms.min() >= 0)):
        raise InvalidInputError(
            f"{where} has row norms that are not finite or do not match its rows; rescale the data and re-ingest",
            partition=part.index,
        )


def _in_range(block: Any) -> bool:
    """Row pointers from 0 to the number of entries, in order, and every column index in ``[0, d)`` (the readers'
    own check, :func:`~dppca_dask.storage.validate.check_csr_arrays`)."""
    try:
        check_csr_arrays(block.indptr, block.indices, block.data, n_rows=block.shape[0], n_cols=block.shape[1])
    except InvalidInputError:
        return False
    return True


#: Vectors of the matrix's width an analysis holds at once (iterates, partial products, their sums: as ingest's
#: limit counts them), at 8 bytes each.
VECTORS_PER_ANALYSIS = 8


def check_width_fits(n_cols: int, *, where: object, memory: int | None = None) -> None:
    """Refuse, before anything is read, a width whose working vectors do not fit in this machine's memory (a store
    whose width was edited to 10^12: the first step failed on a worker with an out-of-memory error). The width is
    public (declared), so the check is too."""
    import os

    if memory is None:
        try:
            memory = int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):  # pragma: no cover - a platform without sysconf
            return
    needed = VECTORS_PER_ANALYSIS * 8 * int(n_cols)
    if memory and needed > memory:
        raise InvalidInputError(
            f"{where} has {n_cols} columns: an analysis needs about {needed / 2**30:.1f} GiB of working memory, more "
            f"than this machine's {memory / 2**30:.1f} GiB; check the store's width (re-ingest it if its metadata "
            "was edited), or run where the memory is",
            source=str(where),
        )


def preflight(source: Any, executor_or_coordinator: Any = None) -> int:
    """Read and check every partition of ``source``; raise the first problem found, before anything is released.

    Parameters
    ----------
    source
        A :class:`~dppca_dask.coordinator.sources.PartitionSource`, or anything
        :func:`~dppca_dask.coordinator.sources.as_source` accepts (a store path, a ``MatrixStore``, in-memory data).
    executor_or_coordinator
        Where to run the checks: a :class:`~dppca_dask.coordinator.Coordinator` (one task per partition on its
        cluster, over the persisted partitions when there are some), a ``distributed.Client`` (one task per
        partition), a :class:`~dppca_dask.coordinator.LocalExecutor` (its loaded partitions), or ``None`` /
        ``"local"`` (in this process, one partition at a time, so memory stays bounded by one partition).

    Returns
    -------
    int
        The number of partitions checked (public: it is fixed by the partition table, not by values).

    Raises
    ------
    StoreCorruptError
        A damaged partition of a store (missing or altered chunk, malformed structure, non-finite value).
    InvalidInputError
        Invalid data (NaN, infinite values, overflowing row norms, bad indices), naming the partition and row.
    """
    if not isinstance(source, PartitionSource):
        source = as_source(source)
    check_width_fits(int(source.n_cols), where=f"store '{source.store.path}'" if source.store is not None
                     else "the input")
    target = executor_or_coordinator
    n = source.n_partitions
    if target is None or (isinstance(target, str) and target == "local"):
        for loader, args in source.loaders:
            check_partition((loader, args))  # one partition in memory at a time
        return n
    if isinstance(target, LocalExecutor):
        for part in target._parts:
            check_partition(part)
        return n
    places: list[dict[str, Any]] = [{} for _ in range(n)]
    if isinstance(target, Coordinator):
        client, items = target.client, target._items(range(n))
        retries = target.retries
        if target._parts is None:  # re-read partitions: checked on the worker that reads them at every step
            places = [target._restrictions(i) for i in range(n)]
    elif hasattr(target, "submit") and hasattr(target, "gather"):
        from dask.delayed import Delayed

        client, retries = target, 1
        items = [(loader, tuple(client.compute(a) if isinstance(a, Delayed) else a for a in args))
                 for loader, args in source.loaders]
    else:
        raise InvalidParameterError(
            f"executor_or_coordinator must be a Coordinator, a LocalExecutor, a distributed Client, None or 'local'; "
            f"got {type(target).__name__}"
        )
    token = uuid.uuid4().hex[:8]
    futures = [  # guarded: a failing check comes back as a value without data (no worker log of its arguments)
        client.submit(guarded(check_partition), item, key=f"dppca-preflight-{token}-{i}", retries=retries,
                      **places[i])
        for i, item in enumerate(items)
    ]
    try:
        for future in futures:  # in partition order: the first bad partition is the one reported
            unwrap(future.result())
    finally:
        for future in futures:
            future.release()
    return n
