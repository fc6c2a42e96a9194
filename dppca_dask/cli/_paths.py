"""Store and input paths given on the command line: advice that works for an AnnData ``.h5ad`` file or a URL given
where a store is expected (the commands read stores from a local or mounted file system)."""

from __future__ import annotations

import os
import re

from dppca_dask.errors import InvalidParameterError

__all__ = ["check_input", "check_output", "check_result_dir", "check_store", "inside", "url_scheme"]

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def url_scheme(path: str) -> str | None:
    """The scheme of a URL (``s3``, ``gs``, ``memory``, ...), or ``None`` for a file system path."""
    match = _URL.match(path)
    return match.group(1).lower() if match else None


def check_store(path: str, *, anndata_ok: bool = False, urls_ok: bool = False) -> None:
    """Refuse, with a command that works, a store argument that is a URL (unless ``file://``, or the command reads
    stores through fsspec: ``urls_ok``, ``pca``), or an ``.h5ad`` file unless the command reads one directly
    (``anndata_ok``: ``pca``). A URL whose scheme needs a package that is missing is refused naming it."""
    scheme = url_scheme(path)
    if scheme == "file":
        return
    if scheme is not None and urls_ok:
        from dppca_dask._urls import filesystem

        filesystem(path)
        return
    if scheme is not None:
        raise InvalidParameterError(
            f"'{path}' is a {scheme}:// URL; the command line reads stores from a local or mounted file system "
            f"(the store writer needs atomic renames and file locks, which {scheme}:// does not offer): copy the "
            "store to a local directory (or mount the bucket) and give that path"
        )
    if path.lower().endswith(".h5ad") and not anndata_ok:
        raise InvalidParameterError(
            f"'{path}' is an AnnData .h5ad file, not a store; convert it once with `dppca-dask ingest {path} --out "
            f"{path[:-5]}.zarr --n-features D` (D: the public number of columns) and run on {path[:-5]}.zarr"
        )


def check_input(path: str) -> None:
    """An input file given as a URL: ``file://`` is a local path; other schemes are copied from through fsspec
    (refused, naming the package, when the scheme's package is missing)."""
    scheme = url_scheme(path)
    if scheme is not None and scheme != "file":
        from dppca_dask._urls import filesystem

        filesystem(path)


def check_output(path: str) -> None:
    """Refuse, with advice, an output store given as a URL other than ``file://`` (stores are written to a local
    file system)."""
    scheme = url_scheme(path)
    if scheme is not None and scheme != "file":
        raise InvalidParameterError(
            f"--out '{path}' is a {scheme}:// URL; stores are written to a local or mounted file system (atomic "
            "renames, file locks): write it to a local directory, then copy it (python: "
            "fsspec.filesystem(...).put(LOCAL, URL, recursive=True)) where a reader of zarr URLs needs it"
        )


def inside(path: str, container: str) -> bool:
    """Whether ``path`` is ``container`` or lies under it (real paths: a symbolic link to it counts)."""
    if url_scheme(path) not in (None, "file") or url_scheme(container) not in (None, "file"):
        return path.rstrip("/") == container.rstrip("/") or path.startswith(container.rstrip("/") + "/")
    here, there = os.path.realpath(_local(path)), os.path.realpath(_local(container))
    return here == there or here.startswith(there.rstrip(os.sep) + os.sep)


def _local(path: str) -> str:
    return path[len("file://"):] if path.startswith("file://") else path


def check_result_dir(out: str | None, *, stores: tuple[str, ...] = ()) -> None:
    """Refuse, before any data is read, an ``--out`` directory that a command's results cannot go to: inside (or
    at) one of its input ``stores`` (the results would damage the store they were computed from), an existing
    file, or a zarr group (a store: writing ``result.json`` and arrays into it corrupts it). A directory the
    results go into otherwise keeps whatever else it holds."""
    if out is None:
        return
    for store in stores:
        if inside(out, store):
            raise InvalidParameterError(
                f"--out '{out}' is inside the input store '{store}'; the results would be written into the store "
                "they were computed from (and damage it): give a directory outside it"
            )
    if url_scheme(out) not in (None, "file"):
        return
    local = _local(out)
    if os.path.lexists(local) and not os.path.isdir(local):
        raise InvalidParameterError(
            f"--out '{out}' is an existing file; results are written into a directory: give a directory path "
            "(a new one, or one of earlier results)"
        )
    if os.path.isfile(os.path.join(local, "zarr.json")) or os.path.isfile(os.path.join(local, ".zgroup")):
        raise InvalidParameterError(
            f"--out '{out}' is a zarr store; results are written into a directory of their own: give another path"
        )
