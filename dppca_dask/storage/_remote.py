"""Stores in object storage (``s3://``, ``gs://``, ... read and written through fsspec): how they are opened, created,
appended to and locked, where a local store uses directories, renames and file locks.

- **Opening.** :func:`zarr_location` gives zarr a path (local) or an ``FsspecStore`` configured with the caller's
  storage options (``endpoint_url``, ``key``, ``secret``, ...); with none, the scheme's package reads the environment
  and configuration files as it always does (s3fs/botocore: ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE``, ``~/.aws/config``). Storage options travel with a
  :class:`~dppca_dask.storage.MatrixStore` to the workers that read it (a task's small arguments), and are never shown:
  reprs, logs, provenance and results name the URL only.
- **Creating.** Object stores have no rename. A new store is written as a local store first (every check and
  temporary of a local ingest), then uploaded with its root metadata (``zarr.json``, which holds the partition table:
  the commit point) last (:func:`upload_store`): before that one PUT a reader finds no store, after it the whole one.
  Replacing a store (``overwrite``) deletes the old root metadata first, then the old objects, then uploads the
  new store, root metadata last: a reader opening the store finds the old store, no store, or the new one. A reader
  that opened the old store and reads a partition while it is replaced could get chunks of both; so every
  partition read from object storage ends by asking whether the root metadata still names the store that was
  opened (:func:`root_holds`: a HEAD, and a GET only when the root changed): if it does, the root had not been
  deleted when the read ended, hence no chunk had been replaced before (S3's reads are strongly consistent), and
  the partition is the old store's; if it does not, the read is refused as damaged (run again).
- **State beside a store.** A window's Gram cache, spectral histogram and tree keep their state beside a store in
  object storage as objects of the same bucket (``.NAME.window-*/...``), read and written with the store's storage
  options (the same access as the data): each object is written whole by one PUT (:func:`write_object`), and a
  state of several objects writes its parts under new keys and the object naming them last.
- **Appending.** As on a local disk: new chunks beyond the committed extents, the root metadata last (one PUT,
  atomic on S3). Appends take turns through a lock object beside the store (``.NAME.append.lock``), created with a
  conditional PUT (``If-None-Match: *``), which fails when the object exists.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator, Mapping
from typing import Any

from dppca_dask._urls import filesystem, is_url, probe_bucket, storage_error
from dppca_dask.errors import InvalidParameterError, StoreNotFoundError

__all__ = ["LOCK_TIMEOUT", "check_bucket", "lock_url", "object_exists", "open_group", "options_key",
           "read_object", "remote_lock", "remove_object", "remove_remote_store", "root_holds", "scratch_store_path",
           "try_lock_object", "upload_store", "write_object", "zarr_location"]

#: Seconds an append waits for another append's lock object before giving up.
LOCK_TIMEOUT = 120.0
ROOT = "zarr.json"


def options_key(options: Mapping[str, Any] | None) -> str:
    """A hashable text of ``options`` (for per-process caches; it stays in memory, never shown)."""
    return json.dumps(dict(options or {}), sort_keys=True, default=str)


def zarr_location(path: str, storage_options: Mapping[str, Any] | None = None, *, read_only: bool = True) -> Any:
    """What to give zarr for ``path``: the path itself (local), or an ``FsspecStore`` of the URL configured with
    ``storage_options`` (an unreachable endpoint, missing credentials or package named)."""
    if not is_url(path):
        if storage_options:
            raise InvalidParameterError(
                f"storage options apply to URLs (s3://, gs://, ...); '{path}' is a local path: drop them")
        return path
    from zarr.storage import FsspecStore

    filesystem(path, storage_options)  # a missing package or a bad option is named here
    return FsspecStore.from_url(path, storage_options=dict(storage_options or {}), read_only=read_only)


def open_group(path: str, storage_options: Mapping[str, Any] | None = None, *, mode: str = "r") -> Any:
    """``zarr.open_group`` of a local path or a URL (see :func:`zarr_location`)."""
    import zarr

    location = zarr_location(path, storage_options, read_only=mode == "r")
    try:
        return zarr.open_group(location, mode=mode)  # type: ignore[arg-type]
    except Exception as exc:
        error = storage_error(exc, path)
        if error is exc:
            raise
        raise error from None


def _key(url: str) -> str:
    return url.rstrip("/")


def upload_store(local: str, url: str, storage_options: Mapping[str, Any] | None, *, overwrite: bool) -> None:
    """Copy the committed local store ``local`` to ``url``, its root metadata last (the commit point); with
    ``overwrite``, an existing store there is removed first, root metadata first."""
    fs, inner = filesystem(url, storage_options)
    inner = inner.rstrip("/")
    try:
        fs.invalidate_cache(inner)
        if fs.exists(f"{inner}/{ROOT}"):
            if not overwrite:
                raise InvalidParameterError(
                    f"'{url}' already exists; choose another output URL or pass overwrite=True (--overwrite)")
            remove_remote_store(url, storage_options)
        elif fs.exists(inner):
            if not overwrite:
                raise InvalidParameterError(
                    f"'{url}' holds objects but no store (an ingest that did not finish, or other data); check the "
                    "URL, or pass overwrite=True (--overwrite) to replace them")
            remove_remote_store(url, storage_options)
        files = []
        for root, _dirs, names in os.walk(local):
            for name in names:
                full = os.path.join(root, name)
                rel = os.path.relpath(full, local).replace(os.sep, "/")
                if rel != ROOT:
                    files.append((full, f"{inner}/{rel}"))
        if files:
            fs.put([f for f, _ in files], [k for _, k in files])
        fs.put_file(os.path.join(local, ROOT), f"{inner}/{ROOT}")  # the commit point: the store appears whole
        fs.invalidate_cache(inner)
    except InvalidParameterError:
        raise
    except Exception as exc:
        error = storage_error(exc, url)
        if error is exc:
            raise
        raise error from None


def remove_remote_store(url: str, storage_options: Mapping[str, Any] | None) -> None:
    """Remove the store at ``url``: its root metadata first (a reader then finds no store), then everything else."""
    fs, inner = filesystem(url, storage_options)
    inner = inner.rstrip("/")
    with contextlib.suppress(FileNotFoundError):
        fs.rm_file(f"{inner}/{ROOT}")
    with contextlib.suppress(FileNotFoundError):
        fs.rm(inner, recursive=True)
    fs.invalidate_cache(inner)


def check_bucket(url: str, storage_options: Mapping[str, Any] | None) -> None:
    """Refuse, naming it, a bucket (or container) that does not exist or cannot be reached, before anything is
    written."""
    fs, inner = filesystem(url, storage_options)
    bucket = inner.split("/", 1)[0]
    try:
        probe_bucket(fs, inner)
        exists = fs.exists(bucket)
    except Exception as exc:
        raise storage_error(exc, url) from None
    if not exists:
        raise StoreNotFoundError(f"bucket '{bucket}' of '{url}' does not exist; create it first (aws s3 mb "
                                 f"s3://{bucket}) or check the URL")


def _holder_gone(fs: Any, lock: str) -> bool:
    """Whether the lock object ``lock`` was written by a process of this machine that no longer runs."""
    try:
        owner = json.loads(fs.cat_file(lock))
        host, pid = str(owner["host"]), int(owner["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False  # gone meanwhile, or not ours: wait for it
    from dppca_dask.storage._files import process_gone

    return process_gone(host, pid)


def scratch_store_path(path: str) -> str:
    """Where to build a private temporary store on the way to ``path``: beside a local store (``.NAME.append-*``,
    the same file system), in the temporary directory (``TMPDIR``) for a store in object storage."""
    import tempfile
    import uuid

    tag = uuid.uuid4().hex[:12]
    if is_url(path):
        name = _key(path).rpartition("/")[2]
        return os.path.join(tempfile.gettempdir(), f".{name}.append-{tag}")
    parent, name = os.path.split(path)
    return os.path.join(parent, f".{name}.append-{tag}")


def lock_url(url: str) -> str:
    """The append lock object of the store at ``url``: beside it, ``.NAME.append.lock``."""
    parent, _, name = _key(url).rpartition("/")
    return f"{parent}/.{name}.append.lock"


@contextlib.contextmanager
def remote_lock(url: str, storage_options: Mapping[str, Any] | None, *,
                timeout: float = LOCK_TIMEOUT) -> Iterator[None]:
    """Hold the append lock object of the store at ``url`` (created with a conditional PUT; removed on exit)."""
    fs, _ = filesystem(url, storage_options)
    lock = lock_url(url)
    _, lock_inner = filesystem(lock, storage_options)
    owner = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}).encode()
    deadline = time.monotonic() + timeout
    while True:
        try:
            fs.pipe_file(lock_inner, owner, mode="create")
            break
        except FileExistsError:
            if _holder_gone(fs, lock_inner):  # a killed append of this machine: its lock is taken over
                with contextlib.suppress(FileNotFoundError):
                    fs.rm_file(lock_inner)
                continue
            if time.monotonic() > deadline:
                raise InvalidParameterError(
                    f"another append holds the lock of '{url}' ({lock}) for more than {timeout:.0f} s; if no append "
                    f"runs (one was killed), delete the lock object (aws s3 rm {lock}) and append again") from None
            time.sleep(0.2)
        except Exception as exc:
            error = storage_error(exc, url)
            if error is exc:
                raise
            raise error from None
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            fs.rm_file(lock_inner)


def _translated(exc: Exception, url: str) -> Exception:
    error = storage_error(exc, url)
    return exc if error is exc else error


def object_exists(url: str, storage_options: Mapping[str, Any] | None) -> bool:
    """Whether the object ``url`` exists (asked of the server, not of a listing cache)."""
    fs, inner = filesystem(url, storage_options)
    try:
        fs.invalidate_cache(inner.rpartition("/")[0])
        return bool(fs.isfile(inner))
    except Exception as exc:
        raise _translated(exc, url) from None


def read_object(url: str, storage_options: Mapping[str, Any] | None) -> bytes:
    """The bytes of the object ``url`` (``FileNotFoundError`` when there is none)."""
    fs, inner = filesystem(url, storage_options)
    try:
        return bytes(fs.cat_file(inner))
    except FileNotFoundError:
        raise
    except Exception as exc:
        raise _translated(exc, url) from None


def write_object(url: str, data: bytes, storage_options: Mapping[str, Any] | None) -> None:
    """Write the object ``url`` whole, by one PUT: a reader sees the old object or the new one, never a part."""
    fs, inner = filesystem(url, storage_options)
    try:
        fs.pipe_file(inner, bytes(data))
        fs.invalidate_cache(inner.rpartition("/")[0])
    except Exception as exc:
        raise _translated(exc, url) from None


def remove_object(url: str, storage_options: Mapping[str, Any] | None) -> None:
    """Remove the object ``url`` (nothing when there is none)."""
    fs, inner = filesystem(url, storage_options)
    try:
        fs.rm_file(inner)
    except FileNotFoundError:
        pass
    except Exception as exc:
        raise _translated(exc, url) from None
    fs.invalidate_cache(inner.rpartition("/")[0])


def try_lock_object(url: str, storage_options: Mapping[str, Any] | None) -> bool:
    """Create the lock object ``url`` by a conditional PUT (``If-None-Match: *``); ``False`` when another process
    holds it (a lock left by a killed process of this machine is taken over)."""
    fs, inner = filesystem(url, storage_options)
    owner = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "time": time.time()}).encode()
    for _attempt in range(2):
        try:
            fs.pipe_file(inner, owner, mode="create")
            return True
        except FileExistsError:
            if not _holder_gone(fs, inner):
                return False
            with contextlib.suppress(FileNotFoundError):
                fs.rm_file(inner)
        except Exception as exc:
            raise _translated(exc, url) from None
    return False


#: ``(URL, store id)`` → root metadata versions (ETags) seen to name that store, per process.
_ROOT_TAGS: dict[tuple[str, str], set[str]] = {}


def root_holds(url: str, storage_options: Mapping[str, Any] | None, store_id: str) -> bool:
    """Whether the root metadata of the store at ``url`` exists now and names ``store_id`` (a HEAD; the object is
    read only when its version was not seen before, after an append or a replacement)."""
    fs, inner = filesystem(url, storage_options)
    root = f"{inner.rstrip('/')}/{ROOT}"
    try:
        fs.invalidate_cache(inner.rstrip("/"))  # asked of the server, not of a listing cache
        info = fs.info(root)
        tag = str(info.get("ETag") or info.get("etag") or "")
        seen = _ROOT_TAGS.setdefault((_key(url), store_id), set())
        if tag and tag in seen:
            return True
        meta = json.loads(fs.cat_file(root))
    except FileNotFoundError:
        return False
    except ValueError:
        return False  # a root being written is not ours to trust
    except Exception as exc:
        raise _translated(exc, url) from None
    held = ((meta.get("attributes") or {}).get("dppca_dask") or {}).get("store_id") if isinstance(meta, dict) else None
    if held != store_id:
        return False
    if tag:
        seen.add(tag)
    return True

