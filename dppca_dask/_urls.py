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

__all__ = [
    "check_storage_options",
    "filesystem",
    "is_url",
    "local_output",
    "local_path",
    "probe_bucket",
    "scheme_package",
    "storage_error",
    "url_exists",
    "url_scheme",
]

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


#: The package to install for a scheme, where it is not the first part of the fsspec class's module (``http://`` is
#: fsspec's own class, which needs aiohttp).
_PACKAGES = {"http": "aiohttp", "https": "aiohttp", "s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs",
             "az": "adlfs", "abfs": "adlfs", "abfss": "adlfs", "adl": "adlfs"}


def scheme_package(scheme: str) -> str | None:
    """The package that reads ``scheme://`` URLs through fsspec (``s3`` -> ``s3fs``), or None when unknown."""
    if scheme in _PACKAGES:
        return _PACKAGES[scheme]
    try:
        from fsspec.registry import known_implementations
    except ImportError:  # pragma: no cover - zarr depends on fsspec
        return None
    known = known_implementations.get(scheme)
    return str(known.get("class", "")).split(".", 1)[0] or None if known else None


def check_storage_options(options: Any, *, what: str = "storage_options") -> dict[str, Any] | None:
    """``options`` as a plain dict (``None`` stays ``None``): a mapping with string keys, as fsspec takes it
    (``{"endpoint_url": ..., "key": ..., "secret": ...}`` for s3://). Anything else raises
    :class:`~dppca_dask.errors.InvalidParameterError` (the message names the keys, never the values: they may be
    secrets)."""
    if options is None:
        return None
    from collections.abc import Mapping

    if not isinstance(options, Mapping) or not all(isinstance(k, str) and k for k in options):
        raise InvalidParameterError(
            f"{what} must be a mapping of option names to values (e.g. {{'endpoint_url': 'http://HOST:PORT'}}); "
            f"got a {type(options).__name__}")
    return dict(options)


def filesystem(url: str, storage_options: Any = None) -> tuple[Any, str]:
    """The fsspec file system of ``url`` (configured with ``storage_options``) and the path inside it; a scheme
    whose package is not installed raises :class:`~dppca_dask.errors.InvalidParameterError` naming the package to
    install."""
    scheme = url_scheme(url) or "file"
    options = check_storage_options(storage_options) or {}
    try:
        from fsspec.core import url_to_fs
    except ImportError:  # pragma: no cover - zarr depends on fsspec
        raise InvalidParameterError(f"reading {scheme}:// URLs needs fsspec: pip install fsspec") from None
    try:
        return url_to_fs(url, **options)
    except ImportError as exc:
        from fsspec.registry import known_implementations

        module = scheme_package(scheme)
        missing = getattr(exc, "name", None)
        if missing:  # the module that failed to import names the package better than the registry
            module = str(missing).split(".", 1)[0]
        raise InvalidParameterError(
            f"reading {scheme}:// URLs needs the {module} package, which is not installed: pip install {module}"
            if module else
            f"reading {scheme}:// URLs needs a package that is not installed ({exc}); install fsspec's "
            f"implementation for {scheme}://"
        ) from None
    except TypeError as exc:
        raise InvalidParameterError(
            f"a storage option is not one that {scheme}:// takes ({exc}); check the names given with "
            "storage_options= (--storage-option KEY=VALUE)") from None
    except ValueError as exc:
        raise InvalidParameterError(f"'{url}' is not a URL fsspec can read ({exc}); give a local path or a "
                                    "memory://, s3://, gs://, ... URL") from None


def url_exists(url: str, storage_options: Any = None) -> bool:
    """Whether something exists at ``url`` (see :func:`filesystem` for a missing package; an unreachable endpoint,
    missing credentials or bucket raise :class:`~dppca_dask.errors.InvalidParameterError` naming what is missing)."""
    fs, inner = filesystem(url, storage_options)
    try:
        fs.invalidate_cache(inner)
        if fs.exists(inner):
            return True
        probe_bucket(fs, inner)  # exists() says False also for an endpoint it cannot reach: say which
        return False
    except Exception as exc:
        raise storage_error(exc, url) from None


def probe_bucket(fs: Any, inner: str) -> None:
    """List the bucket (container) of ``inner``: raises what the object store says when it cannot be listed
    (unreachable endpoint, no credentials, no such bucket); nothing for other file systems."""
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    if protocol not in ("s3", "s3a"):
        return
    fs.ls(inner.split("/", 1)[0], detail=False)


#: Errors of a transfer that had begun (the endpoint was reached): a body cut short, a read that timed out.
_TRANSFER_ERRORS = frozenset({"ClientPayloadError", "ResponseStreamingError", "IncompleteRead", "ReadTimeoutError",
                              "ReadTimeout", "ServerTimeoutError", "ContentLengthError", "TransferEncodingError"})


#: Errors of a connection closed or refused: before a store was opened, an endpoint that is not there; once a store
#: was opened (its metadata read over the same endpoint), a connection that failed (:data:`_TRANSFER_ERRORS`).
_CONNECTION_ERRORS = frozenset({"EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError",
                                "ClientConnectorError", "ServerDisconnectedError", "ClientOSError"})


def storage_error(exc: BaseException, url: str, *, partition: int | None = None) -> Exception:
    """The error to raise for ``exc``, raised by object storage while reaching ``url``: what is missing (endpoint,
    credentials, bucket, permission) and how to give it, as :class:`~dppca_dask.errors.InvalidParameterError` (or
    :class:`~dppca_dask.errors.StoreNotFoundError` for a missing bucket); a transfer that failed after the client's
    retries as :class:`~dppca_dask.errors.StorageConnectionError` (not damage); anything else as it is.
    ``partition``: the error ended a read of that partition of an opened store (whose endpoint answered), where a
    connection that closes or is refused is such a failure too, not a missing endpoint."""
    from dppca_dask.errors import StoreNotFoundError

    name = type(exc).__name__
    text = str(exc)
    scheme = url_scheme(url) or "file"
    if scheme not in ("s3", "s3a"):
        return exc if isinstance(exc, Exception) else RuntimeError(text)
    bucket = os.fspath(url).split("://", 1)[1].split("/", 1)[0]
    if name in _TRANSFER_ERRORS or (partition is not None and (name in _CONNECTION_ERRORS
                                                               or "Could not connect to the endpoint" in text)):
        from dppca_dask.errors import StorageConnectionError

        # The class only: the message may quote sizes of the objects read.
        where = f"partition {partition} of " if partition is not None else ""
        return StorageConnectionError(
            f"the connection to the object store failed while reading {where}'{url}' ({name}), after the client's "
            "retries; the store is not damaged: run again (a network that drops connections, or a service under "
            "load; storage option config_kwargs={'read_timeout': SECONDS} waits longer for a slow one)")
    if name in _CONNECTION_ERRORS or "Could not connect to the endpoint" in text:
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        return InvalidParameterError(
            f"cannot reach the object store of '{url}' ({name}: endpoint "
            f"{endpoint or 'not set: the AWS default'}); set the endpoint of your S3 service with the environment "
            "variable AWS_ENDPOINT_URL=http(s)://HOST:PORT (or storage option endpoint_url, --storage-option "
            "endpoint_url=...), and check that it runs")
    if name in ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError"):
        return InvalidParameterError(
            f"no credentials for '{url}' ({name}); set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile: "
            "AWS_PROFILE, ~/.aws/credentials; or storage options key= and secret=), or anon=true for a public bucket")
    if name in ("NoSuchBucket",) or "NoSuchBucket" in text or "bucket does not exist" in text.lower():
        return StoreNotFoundError(f"bucket '{bucket}' of '{url}' does not exist; create it first (aws s3 mb "
                                  f"s3://{bucket}) or check the URL")
    codes = [code for code in ("InvalidAccessKeyId", "AccessDenied", "SignatureDoesNotMatch", "Forbidden")
             if code in text]
    if isinstance(exc, PermissionError) or codes:
        # The service's code only: its message may quote parts of the request.
        return InvalidParameterError(
            f"the object store refused access to '{url}' ({codes[0] if codes else name}); check the credentials "
            "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE) and the bucket's permissions")
    return exc if isinstance(exc, Exception) else RuntimeError(text)


def local_output(path: Any, what: str = "out") -> str:
    """The local path a store is written to: ``path`` itself, or the path of a ``file://`` URL. Any other URL is
    refused (``os.path.abspath("memory://x")`` would name a local directory ``memory:``)."""
    text = os.fspath(local_path(path))
    if is_url(text):
        raise InvalidParameterError(
            f"{what} '{text}' is a {url_scheme(text)}:// URL; this writer builds a store on a local or mounted file "
            "system (atomic renames, file locks): write a store to a URL with dppca_dask.ingest(SRC, URL) "
            "(`dppca-dask ingest SRC --out URL`), which builds it locally and uploads it, its metadata last"
        )
    return text
