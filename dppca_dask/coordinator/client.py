"""Obtaining a Dask client: an embedded ``LocalCluster`` by default, or a running cluster by address."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

from distributed import Client, LocalCluster

from dppca_dask.errors import InvalidParameterError

__all__ = ["connect"]

log = logging.getLogger(__name__)


@contextlib.contextmanager
def connect(
    client: Client | str | None = None,
    *,
    n_workers: int | None = None,
    memory_limit: str | None = None,
    security: Any | None = None,
) -> Iterator[Client]:
    """Yield a ``distributed.Client``.

    Parameters
    ----------
    client
        ``None`` starts an embedded ``LocalCluster`` (one single-threaded worker process per core, closed on exit);
        a string is a scheduler address (``tcp://host:8786``, ``tls://...``) or a scheduler file (``*.json``);
        an existing ``Client`` is used as is and left open.
    n_workers, memory_limit
        For the embedded cluster only.
    security
        A ``distributed.security.Security`` for TLS connections to an address.
    """
    if isinstance(client, Client):
        yield client
        return
    if isinstance(client, str):
        if not client:
            raise InvalidParameterError("scheduler address is empty; give tcp://HOST:PORT or omit it")
        kwargs: dict[str, Any] = {"security": security} if security is not None else {}
        if client.endswith(".json") and os.path.exists(client):
            kwargs["scheduler_file"] = client
            target: str | None = None
        else:
            target = client
        log.info("connecting to the Dask scheduler at %s", client)
        try:
            remote = Client(target, timeout="30s", **kwargs)
        except OSError as exc:
            raise InvalidParameterError(
                f"cannot reach the Dask scheduler at '{client}': {exc}; check the address, that the scheduler "
                "is running, and the TLS settings"
            ) from exc
        with remote:
            yield remote
        return
    if client is not None:
        raise InvalidParameterError(
            f"client must be None, a scheduler address or a distributed.Client; got {type(client).__name__}"
        )
    workers = n_workers or max(os.cpu_count() or 1, 1)
    log.info("starting an embedded LocalCluster with %d single-threaded workers", workers)
    with LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        memory_limit=memory_limit or "auto",
    ) as cluster, Client(cluster) as local:
        yield local
