"""Partitions of stores in object storage kept on this process's local disk for the rest of a run (opt-in).

Out of core, every step of a run re-reads every partition, and a worker reads the same partitions in every step
(:mod:`._read_ahead`). From a bucket each of those reads costs requests, and the client's CPU bounds them: about
0.3 core-seconds per 10⁷ entries through Python's S3 client, against under 0.1 from a local disk
(``benchmarks/bench_s3.py``). With the ``dppca_dask.storage.object-cache-partitions`` setting at ``N > 0`` a process
keeps the first ``N`` partitions of each store that it fetches from object storage, as fetched (the stored arrays'
bytes, before any conversion or check), in files of its own, and reads those files in the run's later steps.

What it keeps, and where:

- **Which partitions**: the first ``N`` this process starts to fetch, in the order it starts the fetches (their
  places are reserved then, synchronously, never when a fetch ends), which follows from the partition indices it
  was given and the partition table (:mod:`._read_ahead`), never from their sizes or values. A place is never given
  back within a run: a fetch that fails or is cancelled leaves it reserved, and the next fetch of the same partition
  writes it. A step's timings then differ between partitions by what the count makes public.
- **As sensitive as the data**: owner-only (a directory of mode 0700, files of mode 0600), in the Dask worker's own
  local directory (removed with the worker, as its spilled data is), or in the setting
  ``dppca_dask.storage.object-cache-directory``, or the system's temporary directory in a process that is no
  worker. The run's end removes them in every process that read (the coordinator's end-of-run call,
  :func:`~dppca_dask.storage.store.drop_read_ahead`), and so does the process's exit. (A task of a failed run that
  is still reading when the run ends may keep a partition again: its files go at the next run's end or the
  worker's exit.)
- **Read mapped**: a partition's files are mapped copy-on-write (the page cache's pages, no copy; a write to an
  array stays in its process), so a step from kept partitions costs about what a step from a local store does
  (0.94-1.14 times, ``benchmarks/bench_s3.py --nnz 1e7``). Read into fresh arrays instead, it took 1.56-1.57 times
  the local step.
- **Trusted as the bucket's bytes are**: a partition read from its files goes through the read path's checks, and
  the files carry the identities of the chunk objects (ETags) of the fetch that wrote them, so a re-read skips what
  a checked read of those objects skipped before (the canonical-form scan and the sums of squares, whose norms are
  kept). A change to a file of the same size by the worker's own user is therefore not detected, as a change to a
  local store's chunk file through a shared memory map is not (``docs/privacy.md``); the files are owner-only and
  live for one run. A file of the wrong size is removed and the partition fetched again.
- **A run keeps what it first read**: a partition kept on disk is not fetched again, so a store replaced during the
  run (``ingest --overwrite``) is noticed only by the partitions that are not kept.

A file that cannot be written (a full disk, a directory that is not one) stops the read with an error that names
the directory and the settings, not the partition (when a disk fills depends on the sizes of those kept before):
keeping fewer partitions instead would make which ones are kept depend on their sizes. A worker's disk needs the
stored size of the partitions it keeps: about ``N`` times the store's size on disk over its partition count.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError, LocalCacheError

__all__ = ["DISK_CACHE", "DiskCache", "LocalCacheError"]

#: What one fetch returns: array key -> (its elements, the identities of the chunk objects read, or None).
Fetched = Mapping[str, tuple[np.ndarray, list[Any] | None]]


class _Kept:
    """A partition's place: reserved by the first fetch that starts, written when a fetch of it ends, kept for the
    run (a fetch that fails, is cancelled or finds its files damaged leaves it reserved and unwritten: the next
    fetch of the same partition writes it)."""

    __slots__ = ("arrays", "busy", "written")

    def __init__(self) -> None:
        self.arrays: dict[str, tuple[str, str, int, list[Any] | None]] = {}
        """Array key -> (file, dtype, elements, identities)."""
        self.written = False
        self.busy = True
        """A fetch that will write it is under way."""


#: A place claimed for a partition: the cache's generation when claimed and the entry.
Claim = tuple[int, _Kept]


class DiskCache:
    """The local disk cache of one process (workers of a cluster each have their own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._directory: str | None = None
        self._stores: dict[Any, int] = {}
        """Store key -> its number here (files are named by numbers: no path or name of a store on disk)."""
        self._kept: dict[Any, dict[int, _Kept]] = {}
        """Store key -> partition index -> its place (reserved when its first fetch starts, never given back
        within a run: which partitions have places follows from the order fetches start in alone)."""
        self._generation = 0
        self.hits = 0
        """Partitions read from the files (for tests and benchmarks)."""

    @property
    def limit(self) -> int:
        """Partitions kept per store (the ``dppca_dask.storage.object-cache-partitions`` setting; 0: none)."""
        import dask

        setting = dask.config.get("dppca_dask.storage.object-cache-partitions", 0)
        if setting is None:
            return 0
        if isinstance(setting, bool) or not isinstance(setting, (int, str)) or not str(setting).isdigit():
            raise InvalidParameterError(
                f"dppca_dask.storage.object-cache-partitions must be an integer >= 0 (0: off); got {setting!r}")
        return int(setting)

    def kept(self, key: Any) -> list[int]:
        """The partitions of store ``key`` kept on disk, in index order."""
        with self._lock:
            return sorted(i for i, kept in self._kept.get(key, {}).items() if kept.written)

    def reserved(self, key: Any) -> list[int]:
        """The partitions of store ``key`` that have a place (kept or to be kept), in index order."""
        with self._lock:
            return sorted(self._kept.get(key, {}))

    def start(self, key: Any, index: int) -> tuple[dict[str, Any] | None, Claim | None]:
        """Called when a fetch of partition ``index`` of store ``key`` starts, in the order fetches start: where
        its files are (``kept``, to read with :meth:`read`), or the place this fetch is to write (``claim``: the
        partition's own reserved place, or a new one while fewer than :attr:`limit` are reserved), or neither."""
        limit = self.limit
        if limit == 0:
            return None, None
        with self._lock:
            places = self._kept.setdefault(key, {})
            found = places.get(index)
            if found is None:
                if len(places) >= limit:
                    return None, None
                found = places[index] = _Kept()
                return None, (self._generation, found)
            if found.written:
                return dict(found.arrays), None
            if found.busy:
                return None, None  # another fetch of it will write it
            found.busy = True
            return None, (self._generation, found)

    def read(self, key: Any, index: int, arrays: dict[str, Any]) -> dict[str, tuple[np.ndarray, list[Any] | None]] | None:
        """Partition ``index``'s arrays from the files :meth:`start` named, or ``None`` when they are damaged (then
        its place stays reserved, unwritten: the partition is fetched again and its files written anew)."""
        try:
            out = {name: (_load(file, dtype, count), identities)
                   for name, (file, dtype, count, identities) in arrays.items()}
        except OSError:
            with self._lock:
                found = self._kept.get(key, {}).get(index)
                if found is not None and found.arrays == arrays:
                    found.written, found.arrays = False, {}
            for file, *_ in arrays.values():
                _remove(file)
            return None
        with self._lock:
            self.hits += 1
        return out

    def put(self, key: Any, index: int, claim: Claim, fetched: Fetched) -> None:
        """Write a claimed partition's arrays (as fetched) to its files."""
        generation, token = claim
        with self._lock:
            if generation != self._generation or self._kept.get(key, {}).get(index) is not token:
                return  # dropped meanwhile (the run ended)
            directory = self._ensure_directory()
            number = self._stores.setdefault(key, len(self._stores))
        files: dict[str, tuple[str, str, int, list[Any] | None]] = {}
        try:
            for i, (name, (values, identities)) in enumerate(fetched.items()):
                file = os.path.join(directory, f"{number}-{index}-{i}.bin")
                _save(file, values)
                files[name] = (file, values.dtype.str, int(values.shape[0]), identities)
        except OSError as error:
            for file, *_ in files.values():
                _remove(file)
            with self._lock:
                token.busy = False  # reserved, unwritten
                if generation != self._generation:
                    return  # the directory was removed under the write (the run ended): nothing to keep
            # The partition's index is not named: when a disk fills depends on the sizes of those kept before
            raise LocalCacheError(
                f"could not keep a partition on the local disk in '{directory}' ({type(error).__name__}: "
                f"{error.strerror or error}); free space there, set dppca_dask.storage.object-cache-directory to "
                "another directory, or set dppca_dask.storage.object-cache-partitions to 0 to read every step from "
                "the bucket") from None
        with self._lock:
            if generation == self._generation and self._kept.get(key, {}).get(index) is token:
                token.arrays, token.written, token.busy = files, True, False
                return
        for file, *_ in files.values():  # dropped while written
            _remove(file)

    def release(self, claim: Claim) -> None:
        """A claimed place whose fetch failed or was cancelled: it stays reserved, unwritten (the next fetch of the
        same partition writes it), so that which partitions have places never depends on how long a fetch took."""
        with self._lock:
            claim[1].busy = False

    def clear(self) -> None:
        """Remove every kept partition and the directory (the end of a run)."""
        with self._lock:
            directory, self._directory = self._directory, None
            self._kept.clear()
            self._stores.clear()
            self._generation += 1
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)

    def _ensure_directory(self) -> str:
        if self._directory is None:
            base = _base_directory()
            try:
                self._directory = tempfile.mkdtemp(prefix="dppca-dask-cache-", dir=base)  # mode 0700
            except OSError as error:
                raise LocalCacheError(
                    f"could not create the local disk cache in '{base or tempfile.gettempdir()}' "
                    f"({type(error).__name__}: {error.strerror or error}); set "
                    "dppca_dask.storage.object-cache-directory to a directory, or "
                    "dppca_dask.storage.object-cache-partitions to 0") from None
        return self._directory


def _base_directory() -> str | None:
    """The setting's directory, else the Dask worker's local directory, else ``None`` (the temporary directory)."""
    import dask

    configured = dask.config.get("dppca_dask.storage.object-cache-directory", None)
    if configured:
        return os.path.expanduser(str(configured))
    try:
        from distributed import get_worker

        return str(get_worker().local_directory)
    except (ImportError, ValueError):
        return None


def _save(file: str, values: np.ndarray) -> None:
    """The array's bytes in ``file`` (mode 0600), written under another name and renamed: never a torn file."""
    part = f"{file}.{threading.get_ident()}.part"  # (two fetches of one partition may write at once)
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(np.ascontiguousarray(values).data.cast("B"))
        os.replace(part, file)
    except BaseException:
        _remove(part)
        raise


def _load(file: str, dtype: str, count: int) -> np.ndarray:
    """``count`` elements of ``dtype`` from ``file``, which must hold exactly those bytes (else OSError): mapped
    copy-on-write (the page cache's pages, no copy; a write to the array stays in this process)."""
    import mmap

    kind = np.dtype(dtype)
    with open(file, "rb") as source:
        size = os.fstat(source.fileno()).st_size
        if size != count * kind.itemsize:
            raise OSError(f"'{file}' does not hold the {count} elements it was written with")
        if size == 0:
            return np.empty(0, dtype=kind)
        mapped = mmap.mmap(source.fileno(), size, access=mmap.ACCESS_COPY)
    return np.frombuffer(mapped, dtype=kind, count=count)


def _remove(file: str) -> None:
    try:
        os.unlink(file)
    except OSError:
        pass


#: The disk cache of this process.
DISK_CACHE = DiskCache()
atexit.register(DISK_CACHE.clear)
