"""How an entry point runs its algorithm: the noise source, where the run executes and on which executor, and the
installed versions stamped on its result.

Shared by every entry point (:func:`dppca_dask.pca`, :func:`dppca_dask.lowrank`, :func:`dppca_dask.topics`,
:func:`dppca_dask.window`) and below all of them, so that none imports another to run.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dppca_dask._urls import url_scheme
from dppca_dask.coordinator import Coordinator, LocalExecutor, run_algorithm
from dppca_dask.coordinator.sources import PartitionSource
from dppca_dask.errors import InvalidParameterError

__all__ = ["execute", "executor_choice", "noise_source", "versions"]


def noise_source(seed: int | None) -> Any:
    from dppca_dask.mechanisms import NoiseSource

    if seed is None:
        return NoiseSource.from_entropy()
    return NoiseSource.from_seed(seed)


def executor_choice(source: PartitionSource, client: Any, executor: str) -> Any:
    """Where the run executes, from public values only: the declared width, the partition count, the
    configuration and what the caller gave (:func:`~dppca_dask.coordinator.client.choose_executor`)."""
    from dppca_dask.coordinator.client import ExecutorChoice, choose_executor

    if isinstance(client, str) and client == "local":  # the reference executor, kernels called directly
        if executor == "cluster":
            raise InvalidParameterError("client='local' runs in this process; it cannot use executor='cluster'")
        return ExecutorChoice("in-process", "client='local' was given")
    # A store's partitions were fixed at ingest and are public; the blocks of other inputs (an AnnData file's
    # blocks, and the partitions of an AnnData store opened directly, are sized by its stored entries) are not, so
    # only the width counts for them.
    ingested = source.store is not None and source.store.format_version is not None
    public_partitions = source.n_partitions if ingested else None
    choice = choose_executor(client, executor, n_cols=source.n_cols, n_partitions=public_partitions)
    location = str(getattr(source.store, "path", "") or "") if source.store is not None else ""
    if choice.executor == "cluster" and url_scheme(location) == "memory":
        raise InvalidParameterError(
            f"'{location}' is a memory:// store: it lives in this process, and a cluster's workers (other processes) "
            f"cannot read it (the run would go to the cluster: {choice.reason}); run in this process "
            "(executor='local', --executor local), or write the store where the workers can read it"
        )
    return choice


def execute(source: PartitionSource, client: Any, persist: bool | None, run: Any, choice: Any = None,
            on_pass: Any = None) -> Any:
    """Run on ``choice``'s executor (``None``: on Dask, as the other entry points that call this do)."""
    from dppca_dask.coordinator.client import ExecutorChoice, executor_client

    if choice is None:
        choice = ExecutorChoice("cluster", "the caller runs on Dask")

    if isinstance(client, str) and client == "local":
        local = LocalExecutor(source)
        try:
            return run_algorithm(local, run, on_pass)
        finally:
            local.close()
    with executor_client(choice, client) as tasks, Coordinator(tasks, source, persist=persist) as coordinator:
        return run_algorithm(coordinator, run, on_pass)


def versions() -> dict[str, str]:
    """Installed versions, read from the packages' metadata (importing distributed only for its version would
    cost an in-process run most of its start-up)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:  # pragma: no cover - always installed
            return "unknown"

    return {"dask": installed("dask"), "distributed": installed("distributed"), "zarr": installed("zarr"),
            "numpy": np.__version__, "dp-accounting": installed("dp-accounting")}
