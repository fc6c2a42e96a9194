"""Files of stores and their temporaries: owner-only permissions, safe replacement, and cleanup after a kill.

- **Permissions.** Stores and temporary (``.NAME.partial-*``) and spill (``.NAME.spill-*``) directories hold raw data:
  they are created owner-only (directories 0700, and the files of a committed store 0600) unless the environment
  variable ``DPPCA_DASK_FILE_MODE`` is ``umask`` (then the process umask decides, as for any other file). What an
  append writes into a store gets the same modes (:func:`private_writes`). Results use the same setting
  (:func:`make_directories`, :func:`private_replacement`); job outputs pass ``private=True`` (owner-only whatever
  the setting). Modes are set explicitly after creation, never by changing the process umask (which would also
  change it for every other thread). Directories that already exist keep their mode: they are the user's.
- **Replacement.** ``overwrite`` replaces only a dppca_dask store or an empty directory, never a file or another
  directory (a typo in an output path must not delete a source).
- **Cleanup.** Every temporary directory holds an owner marker (host and process id). A killed ingest (SIGKILL, power
  loss) leaves its temporaries behind; the next ingest to the same output removes those whose process is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import socket
import stat
import tempfile
import time
from collections.abc import Iterator

from dppca_dask.errors import InvalidParameterError
from dppca_dask.storage import _format

log = logging.getLogger(__name__)

__all__ = [
    "FILE_MODE_ENV",
    "check_replaceable",
    "finish_private_tree",
    "is_store",
    "make_directories",
    "make_private_directory",
    "make_tree_private",
    "mark_owner",
    "private_files",
    "private_replacement",
    "private_writes",
    "recover_interrupted_overwrite",
    "remove_stale_temporaries",
    "remove_tree",
]

#: Environment variable: ``private`` (default, owner-only files) or ``umask`` (follow the process umask).
FILE_MODE_ENV = "DPPCA_DASK_FILE_MODE"
#: Modes of owner-only files and directories.
FILE_MODE, DIR_MODE = 0o600, 0o700
#: Name of the owner marker inside a temporary directory.
OWNER_FILE = ".dppca-owner"
_TEMPORARY_KINDS = (".partial-", ".spill-")


def private_files() -> bool:
    """Whether new stores and temporaries are owner-only (the default) or follow the umask."""
    value = os.environ.get(FILE_MODE_ENV, "private").strip().lower()
    if value not in ("private", "umask"):
        raise InvalidParameterError(
            f"{FILE_MODE_ENV} must be 'private' (owner-only files, the default) or 'umask' (follow the process "
            f"umask); got {value!r}"
        )
    return value == "private"


def make_private_directory(path: str) -> str:
    """Create the directory ``path``, owner-only unless configured otherwise."""
    os.mkdir(path, DIR_MODE if private_files() else 0o777)
    return path


def mark_owner(path: str) -> None:
    """Write the owner marker (host and process id) into the temporary directory ``path``."""
    with open(os.path.join(path, OWNER_FILE), "w", encoding="utf-8") as handle:
        json.dump({"host": socket.gethostname(), "pid": os.getpid()}, handle)


def finish_private_tree(path: str) -> None:
    """Before a store is moved into place: drop the owner marker; make every file 0600 and directory 0700."""
    try:
        os.remove(os.path.join(path, OWNER_FILE))
    except FileNotFoundError:
        pass
    make_tree_private(path)


def make_tree_private(path: str, *, private: bool | None = None) -> None:
    """Make the file or directory tree ``path``, which the package has just written, owner-only: files 0600,
    directories 0700 (symbolic links are left alone). ``private`` defaults to :func:`private_files`; when false,
    nothing changes. Only for paths the package created: never a directory the user gave."""
    if not (private_files() if private is None else private):
        return
    if os.path.islink(path):
        return
    if not os.path.isdir(path):
        os.chmod(path, FILE_MODE)
        return
    for root, dirs, files in os.walk(path):
        os.chmod(root, DIR_MODE)
        for name in files:
            leaf = os.path.join(root, name)
            if not os.path.islink(leaf):
                os.chmod(leaf, FILE_MODE)


def make_directories(path: str | os.PathLike[str], *, private: bool | None = None) -> list[str]:
    """Create the directory ``path`` and its missing parents; return the directories created, outermost first.

    Those it creates are 0700 whatever the umask when ``private`` (default: :func:`private_files`), else they
    follow the umask. Directories that exist already, ``path`` included, keep their mode (they are the user's)."""
    private = private_files() if private is None else private
    missing = []
    head = os.path.abspath(os.fspath(path))
    while not os.path.isdir(head):
        missing.append(head)
        parent = os.path.dirname(head)
        if parent == head:
            break
        head = parent
    created = []
    for directory in reversed(missing):
        try:
            os.mkdir(directory, DIR_MODE if private else 0o777)
        except FileExistsError:
            if os.path.isdir(directory):
                continue  # made meanwhile by another process: not ours
            raise
        if private:
            os.chmod(directory, DIR_MODE)  # mkdir's mode passes through the umask
        created.append(directory)
    return created


@contextlib.contextmanager
def private_replacement(target: str | os.PathLike[str], *, private: bool | None = None) -> Iterator[str]:
    """Yield a path at which to write a file or directory tree (a zarr array or group, an ``.npy`` file) that then
    replaces ``target``.

    The path is inside a fresh temporary directory beside ``target`` (``.NAME.partial-*``, 0700), so nobody else
    can reach what is written while it is written; after the block, what was written is made owner-only (files
    0600, directories 0700; when ``private``, default :func:`private_files`) and moved to ``target``, replacing
    what was there. After an error the temporary is removed and ``target`` is left as it was. The parent directory
    of ``target`` must exist.
    """
    target = os.path.abspath(os.fspath(target))
    parent, name = os.path.split(target)
    remove_stale_temporaries(target)
    tmp = tempfile.mkdtemp(prefix=f".{name}.partial-", dir=parent)  # 0700 whatever the umask
    mark_owner(tmp)
    path = os.path.join(tmp, name)
    try:
        yield path
        make_tree_private(path, private=private)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target)
        elif os.path.lexists(target) and os.path.isdir(path):
            os.remove(target)  # a directory cannot replace a file or a link in one rename
        os.replace(path, target)
    except BaseException:
        remove_tree(tmp)  # also while zarr may still be writing into it after an interrupt
        raise
    shutil.rmtree(tmp, ignore_errors=True)  # only the owner marker is left


def _tree_state(root: str) -> dict[str, tuple[int, int, int, int]]:
    """Every path under ``root`` (``root`` included) with its device, inode, change time and mode."""
    state = {}
    for base, dirs, files in os.walk(root):
        for path in [base, *(os.path.join(base, name) for name in files)]:
            with contextlib.suppress(FileNotFoundError):
                info = os.lstat(path)
                state[path] = (info.st_dev, info.st_ino, info.st_ctime_ns, stat.S_IMODE(info.st_mode))
    return state


@contextlib.contextmanager
def private_writes(root: str | os.PathLike[str]) -> Iterator[None]:
    """Give what the block writes into the existing directory tree ``root`` (a store) the store's own modes: a file
    replaced by a new one (zarr writes every file through a temporary and a rename) or changed keeps the mode it had,
    a new file gets the mode of the store's root metadata (``zarr.json``; 0600 for a store ingested owner-only), a
    new directory the mode of the store's root directory (0700). Untouched paths keep theirs. Nothing is changed
    under ``DPPCA_DASK_FILE_MODE=umask``. Also after an error: what a failed write left is as private as the store.

    Costs two walks of the tree (a ``stat`` per file: tens of milliseconds for the ~10⁴ chunk files of a 10⁹-entry
    store on a local disk)."""
    if not private_files():
        yield
        return
    root = os.fspath(root)
    before = _tree_state(root)
    root_mode = before[root][3] if root in before else DIR_MODE
    meta = before.get(os.path.join(root, "zarr.json"))
    file_mode = meta[3] if meta is not None else FILE_MODE
    try:
        yield
    finally:
        for path, state in _tree_state(root).items():
            earlier = before.get(path)
            if earlier == state:
                continue
            with contextlib.suppress(FileNotFoundError):
                info = os.lstat(path)
                if stat.S_ISDIR(info.st_mode):
                    if earlier is None or earlier[:2] != state[:2]:  # new (a directory changes with its entries)
                        os.chmod(path, root_mode)
                elif stat.S_ISREG(info.st_mode):
                    os.chmod(path, earlier[3] if earlier is not None else file_mode)


def is_store(path: str) -> bool:
    """Whether ``path`` is a directory holding a dppca_dask store (its root metadata names the format)."""
    meta = os.path.join(path, "zarr.json")
    if not os.path.isdir(path) or os.path.islink(path) or not os.path.isfile(meta):
        return False
    try:
        with open(meta, encoding="utf-8") as handle:
            attributes = json.load(handle).get("attributes") or {}
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(attributes, dict) and _format.ATTR_KEY in attributes


def check_replaceable(path: str) -> None:
    """Refuse to replace ``path`` unless it is a dppca_dask store or an empty directory."""
    if is_store(path):
        return
    if os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path):
        return
    what = (
        "a symbolic link" if os.path.islink(path) else
        "a file" if not os.path.isdir(path) else "a directory that is not a dppca_dask store"
    )
    raise InvalidParameterError(
        f"'{path}' is {what}; overwrite (--overwrite) replaces only a dppca_dask store or an empty directory: "
        "check the output path, or move that away yourself"
    )


def _owner_gone(path: str) -> bool:
    try:
        with open(os.path.join(path, OWNER_FILE), encoding="utf-8") as handle:
            owner = json.load(handle)
        host, pid = str(owner["host"]), int(owner["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return False  # not ours, or not yet marked: leave it
    return process_gone(host, pid)


def process_gone(host: str, pid: int) -> bool:
    """Whether the process ``pid`` of machine ``host`` (an owner recorded in a lock or a marker) no longer runs: only
    a process of this machine, other than this one, can be told gone."""
    if host != socket.gethostname() or pid == os.getpid():
        return False  # another machine's process (cannot tell), or this one
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def recover_interrupted_overwrite(out: str) -> list[str]:
    """Finish an overwrite of ``out`` that was killed between its two renames (old store to ``.NAME.partial-*.old``,
    new store into place): with nothing at ``out``, the old store is renamed back (the overwrite did not happen);
    with a store at ``out``, the old one is removed (it did). A ``.old`` whose new store is still being written by a
    live process is left alone. Returns what was restored or removed."""
    parent, name = os.path.split(os.path.abspath(out))
    try:
        entries = sorted(os.listdir(parent or "."))
    except OSError:
        return []
    done: list[str] = []
    for entry in entries:
        if not (entry.startswith(f".{name}.partial-") and entry.endswith(".old")):
            continue
        old = os.path.join(parent, entry)
        new = old[: -len(".old")]
        if os.path.isdir(new) and not _owner_gone(new) and os.path.exists(os.path.join(new, OWNER_FILE)):
            continue  # its ingest still runs
        if not is_store(old):
            continue
        if not os.path.lexists(out):
            os.replace(old, out)
            log.warning("store %s: restored the store an interrupted overwrite had moved aside", out)
        else:
            remove_tree(old)
        done.append(old)
    return done


def remove_stale_temporaries(out: str) -> list[str]:
    """Remove the temporaries of earlier ingests to ``out`` whose process no longer runs; return their paths. An
    overwrite interrupted between its renames is finished first (:func:`recover_interrupted_overwrite`)."""
    recover_interrupted_overwrite(out)
    parent, name = os.path.split(os.path.abspath(out))
    prefix = f".{name}"
    removed: list[str] = []
    try:
        entries = os.listdir(parent or ".")
    except OSError:
        return removed
    for entry in entries:
        rest = entry[len(prefix):]
        if not entry.startswith(prefix) or not rest.startswith(_TEMPORARY_KINDS):
            continue
        path = os.path.join(parent, entry)
        if os.path.isdir(path) and not os.path.islink(path) and _owner_gone(path):
            remove_tree(path)
            removed.append(path)
    return removed


def _drain_zarr(timeout: float = 10.0) -> None:
    """Wait for zarr's pending asynchronous writes (after an interruption they go on in zarr's IO thread)."""
    try:
        from zarr.core.sync import _get_loop
    except ImportError:  # pragma: no cover - a zarr without the sync loop
        return

    async def settle() -> None:
        current = asyncio.current_task()
        pending = [t for t in asyncio.all_tasks() if t is not current]
        if pending:
            await asyncio.wait(pending, timeout=timeout)

    try:
        loop = _get_loop()
        if loop.is_running():
            asyncio.run_coroutine_threadsafe(settle(), loop).result(timeout + 1.0)
    except Exception:  # nothing pending, or the loop is gone: nothing to wait for
        pass


def remove_tree(path: str) -> None:
    """Remove a temporary directory for good, also while zarr may still be writing into it after an interrupt."""
    _drain_zarr()
    for _ in range(20):
        shutil.rmtree(path, ignore_errors=True, onerror=None)
        if not os.path.lexists(path):
            time.sleep(0.01)
            if not os.path.lexists(path):
                return
        time.sleep(0.05)
    shutil.rmtree(path, ignore_errors=True)


def _mode(path: str) -> int:  # for tests and diagnostics
    return stat.S_IMODE(os.lstat(path).st_mode)
