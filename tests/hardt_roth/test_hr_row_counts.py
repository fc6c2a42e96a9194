"""Private power iteration's row counts come from the partition table: the count pass reads no partition's values.

Out of core, every read of a partition is a read of the store: the run reads each partition once to check it
(the preflight pass, before anything is drawn) and once per product pass, and not again to count its rows.
Reads are counted with a wrapper around the real read on a real store, through an in-process cluster (its
workers share this process, so they call the wrapped method).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dppca_dask import lowrank, write_matrix
from dppca_dask.coordinator import Coordinator, LocalExecutor, as_source
from dppca_dask.coordinator.sources import PartitionData, load_store_partition, make_partition, partition_rows
from dppca_dask.datasets import gaussian_factor_matrix
from dppca_dask.methods.hardt_roth.requests import RowCounts
from dppca_dask.storage import MatrixStore, open_matrix


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The partition indices read through ``MatrixStore.read_partition_with_norms`` (the loaders' read)."""
    seen: list[int] = []
    real = MatrixStore.read_partition_with_norms

    def counting(self: MatrixStore, index: int, **kwargs: Any) -> Any:
        seen.append(index)
        return real(self, index, **kwargs)

    monkeypatch.setattr(MatrixStore, "read_partition_with_norms", counting)
    return seen


def _store(path: Path) -> MatrixStore:
    matrix = gaussian_factor_matrix(60, 12, 2, scale=0.05, seed=5).matrix
    return write_matrix(path / "a.zarr", matrix, rows_per_partition=16)  # rows 16, 16, 16, 12


def test_partition_rows_reads_the_table_or_the_block(tmp_path: Path, reads: list[int]) -> None:
    store = _store(tmp_path)
    assert [partition_rows((load_store_partition, (store, i))) for i in range(4)] == [(0, 16), (1, 16), (2, 16),
                                                                                       (3, 12)]
    assert reads == []
    part = load_store_partition(store, 3)
    assert partition_rows(part) == (3, 12) and isinstance(part, PartitionData)
    assert partition_rows((make_partition, (2, np.zeros((5, 12))))) == (2, 5)
    assert reads == [3]


@pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")
def test_the_count_pass_reads_no_partition_of_a_store(tmp_path: Path, reads: list[int], seed: int) -> None:
    from distributed import Client, LocalCluster

    store = _store(tmp_path)
    n_parts = store.n_partitions
    local = LocalExecutor(as_source(store.path)).execute(RowCounts())
    del reads[:]
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        with Coordinator(client, as_source(open_matrix(store.path)), persist=False) as coordinator:
            counts = coordinator.execute(RowCounts())
        assert reads == []  # out of core, and not one partition read
        assert {i: s.shape for i, s in counts.parts.items()} == {i: s.shape for i, s in local.parts.items()} \
            == {0: (16, 0), 1: (16, 0), 2: (16, 0), 3: (12, 0)}
        with warnings.catch_warnings():
            from dppca_dask.errors import NotPrivateWarning
            warnings.simplefilter("ignore", NotPrivateWarning)
            warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
            result = lowrank(store.path, rank=1, epsilon=1.0, delta=1e-6, mechanism="private-power",
                             c_doubling=True, n_iter=3, client=client, seed=seed)
    # n_passes counts the count pass (tasks over every partition, no read); the preflight reads every partition
    # once: one read of each per product pass plus the preflight, n_passes reads in all
    passes = result.extras["n_passes"]
    assert passes >= 4
    assert sorted(reads) == sorted(list(range(n_parts)) * passes)
