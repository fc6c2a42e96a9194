"""Closing the HTTP sessions of this process's object-storage filesystems.

fsspec keeps one filesystem per set of options in a process (its instance cache), and zarr's stores in object
storage make their own, bound to zarr's event loop. Each holds an HTTP session (aiohttp's, through aiobotocore for
s3fs) that is closed only when asked: dropping the filesystem, as ``clear_instance_cache()`` does, leaves the
session to the garbage collector, which warns (``ResourceWarning: Unclosed client session``) and drops its
connections without closing them. :func:`close_filesystems` closes each session on the event loop it belongs to,
then forgets the filesystems and everything this process keeps that refers to them (opened arrays, chunk layouts,
partitions read ahead), so that the next read opens fresh ones. Called at the end of the process (``atexit``; in a
worker process of a cluster, which ends without it, by multiprocessing's finalizers) and by whoever wants a clean
slate (a test between two servers, a long-lived process whose credentials changed).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import multiprocessing.util
from typing import Any

import zarr.core.sync  # noqa: F401  (first: its exit handler stops zarr's event loop, so it must run after ours)

__all__ = ["close_filesystem", "close_filesystems"]

#: Seconds to wait for one session to close.
CLOSE_TIMEOUT = 5.0


def _classes() -> set[type]:
    """fsspec's filesystem implementations loaded in this process."""
    from fsspec.registry import registry

    return {cls for cls in registry.values() if isinstance(cls, type)}


def _cached_filesystems() -> list[Any]:
    """Every filesystem in the instance caches of fsspec's loaded implementations."""
    seen: dict[int, Any] = {}
    for cls in _classes():
        for fs in list(getattr(cls, "_cache", {}).values()):
            seen[id(fs)] = fs
    return list(seen.values())


def close_filesystem(fs: Any) -> None:
    """Close ``fs``'s HTTP session, on the event loop it was opened on, when it has one open (s3fs's, or fsspec's
    HTTP filesystem's); the instance opens a new one if used again."""
    creator = getattr(fs, "_s3creator", None)  # s3fs: the client's context manager
    session = getattr(fs, "_session", None)  # fsspec's HTTP filesystem: an aiohttp session
    if creator is not None and getattr(fs, "_s3", None) is not None:
        closing: Any = creator.__aexit__(None, None, None)
    elif session is not None and hasattr(session, "close") and not getattr(session, "closed", True):
        closing = session.close()
    else:
        return
    loop = getattr(fs, "_loop", None)
    if loop is None and getattr(fs, "asynchronous", False):  # zarr's stores: opened on zarr's event loop
        from zarr.core import sync as zarr_sync

        loop = zarr_sync.loop[0]
    try:
        if loop is not None and loop.is_running():
            asyncio.run_coroutine_threadsafe(closing, loop).result(CLOSE_TIMEOUT)
        elif loop is not None and not loop.is_closed():
            loop.run_until_complete(closing)
        else:
            closing.close()  # no loop left to run it on: the process is ending
            return
    except Exception:  # a session that cannot be closed cleanly (a server gone) is dropped all the same
        pass
    with contextlib.suppress(AttributeError):
        fs._s3 = None  # a later use of this instance opens a new session instead of the closed one
    if session is not None:
        with contextlib.suppress(AttributeError):
            fs._session = None


def close_filesystems() -> None:
    """Close the HTTP sessions of every object-storage filesystem this process keeps, and forget them.

    Reads after this open new filesystems (and sessions). Partitions fetched ahead are dropped, and arrays and chunk
    layouts opened through the old filesystems are forgotten.
    """
    from dppca_dask.storage import store

    store.READ_AHEAD.clear()
    for cache in (store._open, store._layout, store._remote_layout):
        cache.cache_clear()
    for fs in _cached_filesystems():
        close_filesystem(fs)
    for cls in _classes():
        clear = getattr(cls, "clear_instance_cache", None)
        if clear is not None:
            clear()


atexit.register(close_filesystems)
# A worker process of a cluster (a multiprocessing child) ends without running ``atexit``: its finalizers run.
multiprocessing.util.Finalize(None, close_filesystems, exitpriority=100)
