"""URLs of stores and input files: ``file://`` is a local path; other schemes (``memory://``, ``s3://``, ``gs://``,
...) are read through fsspec, which needs the scheme's own package (s3fs, gcsfs, ...).

Used at the public boundaries (:func:`dppca_dask.pca`, :func:`dppca_dask.ingest.ingest`, ``open_matrix``, the
command line) so that a missing package is reported with the package to install, before anything runs.
"""

from __future__ import annotations

import os
import re
from typing import Any

from dppca_dask.errors import InvalidParameterError

__all__ = ["filesystem", "is_url", "local_output", "local_path", "url_exists", "url_scheme"]

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")


def url_scheme(path: Any) -> str | None:
    """The scheme of a URL (``s3``, ``memory``, ``file``, ...), or ``None`` for a file system path."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    match = _URL.match(os.fspath(path))
    return match.group(1).lower() if match else None


def is_url(path: Any) -> bool:
    """Whether ``path`` is a URL other than ``file://`` (read through fsspec)."""
    scheme = url_scheme(path)
    return scheme is not None and scheme != "file"


def local_path(path: Any) -> Any:
    """``path`` with a ``file://`` URL turned into the local path it names (anything else as it is)."""
    if url_scheme(path) == "file":
        from urllib.parse import unquote, urlparse

        parsed = urlparse(os.fspath(path))
        if parsed.netloc not in ("", "localhost"):
            raise InvalidParameterError(f"'{os.fspath(path)}' names another host; a file:// URL reads this "
                                        "machine's files: file:///absolute/path")
        return unquote(parsed.path)
    return path


def filesystem(url: str) -> tuple[Any, str]:
    """The fsspec file system of ``url`` and the path inside it; a scheme whose package is not installed raises
    :class:`~dppca_dask.errors.InvalidParameterError` naming the package to install."""
    scheme = url_scheme(url) or "file"
    try:
        from fsspec.core import url_to_fs
    except ImportError:  # pragma: no cover - zarr depends on fsspec
        raise InvalidParameterError(f"reading {scheme}:// URLs needs fsspec: pip install fsspec") from None
    try:
        return url_to_fs(url)
    except ImportError as exc:
        from fsspec.registry import known_implementations

        known = known_implementations.get(scheme, {})
        module = str(known.get("class", "")).split(".", 1)[0] or "the package of this scheme"
        hint = str(known.get("err", "")) or str(exc)
        raise InvalidParameterError(
            f"reading {scheme}:// URLs needs the {module} package, which is not installed ({hint}): "
            f"pip install {module}" if known else
            f"reading {scheme}:// URLs needs a package that is not installed ({exc}); install fsspec's "
            f"implementation for {scheme}://"
        ) from None
    except ValueError as exc:
        raise InvalidParameterError(f"'{url}' is not a URL fsspec can read ({exc}); give a local path or a "
                                    "memory://, s3://, gs://, ... URL") from None


def url_exists(url: str) -> bool:
    """Whether something exists at ``url`` (see :func:`filesystem` for a missing package)."""
    fs, inner = filesystem(url)
    return bool(fs.exists(inner))


def local_output(path: Any, what: str = "out") -> str:
    """The local path a store is written to: ``path`` itself, or the path of a ``file://`` URL. Any other URL is
    refused (``os.path.abspath("memory://x")`` would name a local directory ``memory:``)."""
    text = os.fspath(local_path(path))
    if is_url(text):
        raise InvalidParameterError(
            f"{what} '{text}' is a {url_scheme(text)}:// URL; stores are written to a local or mounted file system "
            "(atomic renames, file locks): write it to a local directory, then copy it where a reader of zarr URLs "
            "needs it (fsspec.filesystem(...).put(LOCAL, URL, recursive=True))"
        )
    return text
