"""Partitions are placed on the workers by their public index; in-memory inputs travel once, by scatter, and a lost
worker's scattered blocks are sent again."""

from __future__ import annotations

from typing import Any

import dask
import numpy as np
import scipy.sparse as sp

from dppca_dask.coordinator.requests import PlainGramTimes
from dppca_dask.coordinator import Coordinator, as_source


def _matrix(rng: np.random.Generator, n_rows: int) -> sp.csr_array:
    return sp.csr_array(sp.random(n_rows, 30, density=0.2, random_state=rng, format="csr"))


def test_partitions_go_round_robin_by_index(local_client: Any, rng: np.random.Generator,
                                            monkeypatch: Any) -> None:
    from dppca_dask.coordinator import sources

    monkeypatch.setitem(dask.config.config, "dppca_dask", {**dask.config.config.get("dppca_dask", {}), "in-memory-partitions": 6})
    matrix = _matrix(rng, 2_400)
    source = as_source(matrix)
    assert source.n_partitions >= 4
    workers = sorted(local_client.scheduler_info(n_workers=-1)["workers"])
    with Coordinator(local_client, source) as coordinator:
        from distributed import wait

        wait(coordinator._parts)
        who = local_client.who_has(coordinator._parts)  # where each partition was built (steps may copy them)
        assert [sorted(who[f.key]) for f in coordinator._parts] == [[workers[i % 2]] for i in range(len(who))]
        x = np.arange(30.0)
        dense = matrix.toarray()
        np.testing.assert_allclose(coordinator.execute(PlainGramTimes(x)), dense.T @ (dense @ x))


def test_in_memory_blocks_are_scattered_not_embedded(local_client: Any, rng: np.random.Generator,
                                                     monkeypatch: Any) -> None:
    from distributed import Future

    from dppca_dask.coordinator import sources

    monkeypatch.setitem(dask.config.config, "dppca_dask", {**dask.config.config.get("dppca_dask", {}), "in-memory-partitions": 6})
    source = as_source(_matrix(rng, 1_200))
    workers = sorted(local_client.scheduler_info(n_workers=-1)["workers"])
    placement = [workers[i % 2] for i in range(source.n_partitions)]
    loaders = sources.scatter_inputs(source, local_client, placement)
    blocks = [args[1] for _loader, args in loaders]
    assert all(isinstance(b, Future) for b in blocks)
    who = local_client.who_has(blocks)
    assert [sorted(who[b.key]) for b in blocks] == [[w] for w in placement]
    store_source = sources.PartitionSource(1, 1, 1, 8, ((len, ("x",)),), {"kind": "store"})
    assert sources.scatter_inputs(store_source, local_client, [None]) is store_source.loaders


def test_lost_scattered_blocks_are_sent_again(rng: np.random.Generator, monkeypatch: Any) -> None:
    from distributed import Client, LocalCluster

    from dppca_dask.coordinator import sources

    monkeypatch.setitem(dask.config.config, "dppca_dask", {**dask.config.config.get("dppca_dask", {}), "in-memory-partitions": 6})
    matrix = _matrix(rng, 1_600)
    dense = matrix.toarray()
    x = np.arange(30.0)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        with Coordinator(client, as_source(matrix)) as coordinator:
            np.testing.assert_allclose(coordinator.execute(PlainGramTimes(x)), dense.T @ (dense @ x))
            victim = sorted(client.scheduler_info(n_workers=-1)["workers"])[0]
            token = coordinator._token
            for worker in list(cluster.workers.values()):  # lost with its data (not retired, which moves it)
                if worker.address == victim:
                    client.sync(worker.close)
            np.testing.assert_allclose(coordinator.execute(PlainGramTimes(x)), dense.T @ (dense @ x))
            assert coordinator._token != token  # the partitions were built again from blocks scattered again


def _count_scheduler_gathers(dask_scheduler: Any) -> None:
    """Installed on the scheduler: count the gathers it serves (each sends data it first received from workers)."""
    handler = dask_scheduler.handlers["gather"]
    dask_scheduler.counted_gathers = 0
    dask_scheduler.uncounted_gather = handler

    async def counted(*args: Any, **kwargs: Any) -> Any:
        dask_scheduler.counted_gathers += 1
        return await handler(*args, **kwargs)

    dask_scheduler.handlers["gather"] = counted


def test_partials_come_straight_from_the_workers_of_a_local_cluster(local_client: Any, rng: np.random.Generator,
                                                                    monkeypatch: Any) -> None:
    """A client made for a LocalCluster reaches its workers: a step's partials are fetched from them, not through
    the scheduler; a client given a scheduler's address keeps Dask's route, and a client's own setting wins. The
    aggregate is the same bits either way."""
    from distributed import Client

    from dppca_dask.coordinator.driver import _direct_gathers

    def counted(dask_scheduler: Any) -> int:
        return int(dask_scheduler.counted_gathers)

    def restore(dask_scheduler: Any) -> None:
        dask_scheduler.handlers["gather"] = dask_scheduler.uncounted_gather

    matrix = _matrix(rng, 1_200)
    x = np.arange(30.0)
    local_client.run_on_scheduler(_count_scheduler_gathers)
    try:
        with Coordinator(local_client, as_source(matrix)) as coordinator:
            assert coordinator._direct is True
            straight = coordinator.execute(PlainGramTimes(x))
        assert local_client.run_on_scheduler(counted) == 0
        with Client(local_client.scheduler.address) as by_address:
            assert _direct_gathers(by_address) is None
            with Coordinator(by_address, as_source(matrix)) as coordinator:
                routed = coordinator.execute(PlainGramTimes(x))
        assert local_client.run_on_scheduler(counted) >= 1
    finally:
        local_client.run_on_scheduler(restore)
    assert np.array_equal(straight, routed)
    monkeypatch.setattr(local_client, "direct_to_workers", False)
    assert _direct_gathers(local_client) is False


def test_re_read_partitions_are_taken_in_index_order_on_their_workers(local_client: Any, rng: np.random.Generator,
                                                                      tmp_path: Any) -> None:
    """Out of core, partition ``i``'s map task goes to worker ``i mod W`` with priority ``-i``: each worker takes its
    partitions in index order, which its read-ahead of a store in object storage relies on; both follow from the
    public index alone."""
    from dppca_dask.ingest import ingest

    matrix = _matrix(rng, 600)
    store = ingest(matrix, str(tmp_path / "x.zarr"), rows_per_partition=100)
    submitted: list[tuple[str, Any, Any]] = []

    class Recording:
        def __getattr__(self, name: str) -> Any:
            return getattr(local_client, name)

        def submit(self, *args: Any, **kwargs: Any) -> Any:
            submitted.append((kwargs.get("key"), kwargs.get("priority"), kwargs.get("workers")))
            return local_client.submit(*args, **kwargs)

    workers = sorted(local_client.scheduler_info(n_workers=-1)["workers"])
    x = np.arange(30.0)
    dense = matrix.toarray()
    with Coordinator(Recording(), as_source(store), persist=False) as coordinator:
        np.testing.assert_allclose(coordinator.execute(PlainGramTimes(x)), dense.T @ (dense @ x))
    maps = [(key, priority, where) for key, priority, where in submitted if "-map-" in key]
    assert [(int(key.rsplit("-", 1)[1]), priority, where) for key, priority, where in maps] == [
        (i, -i, [workers[i % 2]]) for i in range(6)]
