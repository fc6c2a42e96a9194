"""What a run does may depend on public values only (DESIGN.md, invariant 8): whether partitions are persisted, and
how in-memory data is partitioned, must not follow the data's size.

Before, a store was persisted when its estimated bytes fitted in 60% of the workers' memory (one row more could
flip it, changing the task names ``dppca-partition-*``, memory and timings), and numpy/scipy inputs were split into
32 MiB partitions (one row more could add a partition, changing every step's task count).
"""

from __future__ import annotations

from typing import Any

import dask
import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.coordinator import Coordinator, as_source
from dppca_dask.coordinator.sources import PartitionSource


def _store_like(nbytes: int) -> PartitionSource:
    """A store-backed source (not always persisted) whose private size estimate is ``nbytes``."""
    loaders = ((lambda: None, ()),)
    return PartitionSource(n_rows=1, n_cols=3, n_partitions=1, nbytes=nbytes, loaders=loaders,
                           description={"kind": "store"})


@pytest.mark.parametrize("setting", [None, True, False])
def test_persisting_does_not_follow_the_data_size(local_client: Any, setting: bool | None,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Neighbours far apart in size: a tiny one that fits any cluster and one larger than any memory.
    monkeypatch.setattr(Coordinator, "_persist", lambda self: [])  # the decision only, no loading
    decided = []
    for source in (_store_like(8), _store_like(2**62)):
        with dask.config.set({"dppca_dask.persist": bool(setting)} if setting is not None else {}):
            decided.append(Coordinator(local_client, source).persisted)
    assert decided[0] == decided[1] == bool(setting)


def test_in_memory_partitions_do_not_follow_the_rows(rng: np.random.Generator) -> None:
    # 32 MiB was the old partition size: one neighbour just below it, the other far above it.
    small = rng.standard_normal((10, 4))
    big = sp.random(600_000, 4, density=1.0, random_state=rng, format="csr")  # about 36 MiB as CSR
    with dask.config.set({"dppca_dask.in-memory-partitions": None}):
        counts = {as_source(small).n_partitions, as_source(big).n_partitions, as_source(small[:1]).n_partitions}
    assert counts == {int(dask.system.CPU_COUNT)}
    with dask.config.set({"dppca_dask.in-memory-partitions": 3}):
        source = as_source(small[:2])  # fewer rows than partitions: empty partitions, same count
    assert source.n_partitions == 3
    assert sum(args[1].shape[0] for _loader, args in source.loaders) == 2


def test_a_run_on_rows_fewer_than_partitions_is_exact(local_client: Any, rng: np.random.Generator) -> None:
    from dppca_dask.coordinator.requests import PlainGramTimes

    matrix = rng.standard_normal((2, 5))
    x = np.arange(5.0)
    with dask.config.set({"dppca_dask.in-memory-partitions": 4}), \
            Coordinator(local_client, as_source(matrix)) as coordinator:
        np.testing.assert_allclose(coordinator.execute(PlainGramTimes(x)), matrix.T @ (matrix @ x))
