"""Store and input paths given on the command line: advice that works for an AnnData ``.h5ad`` file given where a
store is expected, the package a URL's scheme needs, and ``--storage-option KEY=VALUE`` (fsspec options of a store
URL's file system)."""

from __future__ import annotations

import argparse
import json
import os
import re
from typing import Any

from dppca_dask.errors import InvalidParameterError

__all__ = ["add_storage_option", "check_input", "check_output", "check_result_dir", "check_store", "inside",
           "storage_options", "url_scheme"]

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def url_scheme(path: str) -> str | None:
    """The scheme of a URL (``s3``, ``gs``, ``memory``, ...), or ``None`` for a file system path."""
    match = _URL.match(path)
    return match.group(1).lower() if match else None


def add_storage_option(parser: argparse.ArgumentParser) -> None:
    """``--storage-option KEY=VALUE`` (repeatable): fsspec options of a store URL's file system."""
    parser.add_argument(
        "--storage-option", action="append", default=[], metavar="KEY=VALUE", dest="storage_option",
        help="an option of the store URL's file system (fsspec), repeatable: endpoint_url=http://HOST:PORT, "
        "anon=true, client_kwargs.region_name=eu-west-1 (VALUE: JSON, else text; a dotted KEY nests). By default "
        "the environment and configuration files: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
        "AWS_PROFILE, ~/.aws/. Prefer the environment for secrets: options given here show in the process list")


def storage_options(args: argparse.Namespace) -> dict[str, Any] | None:
    """The ``--storage-option`` values of ``args`` as fsspec options (``None`` when none was given)."""
    given = list(getattr(args, "storage_option", None) or [])
    if not given:
        return None
    options: dict[str, Any] = {}
    for item in given:
        key, sep, text = item.partition("=")
        if not sep or not key or any(not part for part in key.split(".")):
            raise InvalidParameterError(
                f"--storage-option must be KEY=VALUE (e.g. endpoint_url=http://127.0.0.1:9000); got "
                f"{key if sep else item!r}")
        try:
            value: Any = json.loads(text)
        except ValueError:
            value = text
        target = options
        *parents, leaf = key.split(".")
        for part in parents:
            nested = target.setdefault(part, {})
            if not isinstance(nested, dict):
                raise InvalidParameterError(f"--storage-option {key}: '{part}' is given a value and options")
            target = nested
        target[leaf] = value
    return options


def check_store(path: str, *, anndata_ok: bool = False, urls_ok: bool = True, options: Any = None) -> None:
    """Refuse, with a command that works, an ``.h5ad`` file unless the command reads one directly (``anndata_ok``:
    ``pca``). A URL whose scheme needs a package that is missing is refused naming it."""
    scheme = url_scheme(path)
    if scheme == "file":
        return
    if scheme is not None:
        from dppca_dask._urls import filesystem

        filesystem(path, options)
        return
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


def check_output(path: str, options: Any = None) -> None:
    """An output store given as a URL: refused, naming it, when the scheme's package is missing."""
    scheme = url_scheme(path)
    if scheme is not None and scheme != "file":
        from dppca_dask._urls import filesystem

        filesystem(path, options)


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
