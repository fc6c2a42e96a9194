"""Job outputs a warehouse can consume: a table of releases and a pointer to the latest one.

Beside a job's dated output directories (the part of ``[output] path`` before its first ``{date}``: for
``out/{name}/{date}`` the directory ``out/NAME/``) a completed run keeps

- ``releases.parquet``: one row per release (job, job id, date, mechanism, ε, δ, neighbouring relation, the
  release's diagnostics as JSON text when it has them, its explained-variance ratios when it released them, where
  its components are, the output directory). A re-run of a date replaces that date's row; the table is rewritten
  to a temporary file and renamed over the old one, under a lock, so a reader sees the old table or the new one;
- ``latest``: a symbolic link to the newest date's output directory (by date, not by run order: a backfilled day
  does not move it back), replaced atomically (a new link renamed over the old one).

For an output in object storage (``[output] path = "s3://..."``) both are objects of the bucket beside the dated
outputs: ``latest`` is a small JSON object naming the newest output's URL, and the table is rebuilt from one row
object per job id (see :mod:`dppca_dask.jobs.bucket_output`). :func:`read_releases` and :func:`latest_output` read
either kind of place, :func:`load_latest` and :func:`load_output` read the result itself.

Every value in them is public or released: the parameters of the spec, the privacy report, released values.
Files follow ``DPPCA_DASK_FILE_MODE`` (owner-only by default, the umask with ``umask``).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
import uuid
from typing import Any

__all__ = ["COMPONENT_FILES", "LATEST", "RELEASES", "latest_output", "load_latest", "load_output", "newest",
           "publish_release", "read_releases", "recorded", "release_row", "releases_root", "releases_table"]

log = logging.getLogger(__name__)

#: The table of releases, and the pointer to the latest output directory, in :func:`releases_root`.
RELEASES, LATEST = "releases.parquet", "latest"
#: Where a result's released arrays are, by kind, first found wins.
COMPONENT_FILES = ("components.zarr", "factors.zarr", "release.json", "topics.npy")

_COLUMNS = ("job", "job_id", "date", "status", "mechanism", "epsilon", "delta", "relation", "private",
            "diagnostics", "variance_ratios", "components", "output", "recorded_at")


def releases_root(spec: Any, date: str) -> str:
    """The directory the table and the pointer live in: ``[output] path`` up to the directory before its first
    ``{date}`` placeholder (the parent of the run's output directory when the path has none). For an output in
    object storage, the URL of that directory (``s3://bucket/results/NAME`` for ``s3://bucket/results/{name}/{date}``).
    """
    from dppca_dask._urls import is_url

    template = str(spec.output)
    if is_url(template):
        at = template.find("{date")
        if at < 0:
            return spec.output_dir(date).rstrip("/").rpartition("/")[0]
        prefix = template[:at]
        return prefix[: prefix.rfind("/")].format(name=spec.name, id=spec.id)
    at = template.find("{date")
    if at < 0:
        return os.path.dirname(os.path.abspath(spec.output_dir(date)))
    prefix = template[:at]
    prefix = prefix[: prefix.rfind(os.sep) + 1] if os.sep in prefix else ""
    return os.path.abspath(prefix.format(name=spec.name, id=spec.id) or ".")


def release_row(spec: Any, date: str, outcome: Any, *, published_as: str | None = None) -> dict[str, Any]:
    """The table row of one completed run (public and released values only). ``published_as``: the URL the output
    directory ``outcome.output`` (on this machine) is published at, which the row names instead."""
    result = outcome.result
    report = getattr(result, "privacy", None)
    diagnostics = getattr(result, "diagnostics", None)
    ratios = getattr(result, "explained_variance_ratio", None)
    here = os.path.abspath(outcome.output)
    found = next((name for name in COMPONENT_FILES if os.path.exists(os.path.join(here, name))), None)
    output = here if published_as is None else published_as.rstrip("/")
    components = None if found is None else (os.path.join(output, found) if published_as is None
                                             else f"{output}/{found}")
    return {
        "job": spec.name, "job_id": outcome.job_id, "date": date, "status": outcome.status,
        "mechanism": getattr(result, "mechanism", spec.mechanism),
        "epsilon": None if report is None else float(report.epsilon),
        "delta": None if report is None else float(report.delta),
        "relation": None if report is None else str(report.neighbouring),
        "private": bool(getattr(result, "private", True)),
        "diagnostics": None if diagnostics is None else json.dumps(_plain(diagnostics), sort_keys=True),
        "variance_ratios": None if ratios is None else [float(v) for v in list(ratios)],
        "components": components, "output": output,
        "recorded_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def _plain(value: Any) -> Any:
    if hasattr(value, "to_dict"):
        return _plain(value.to_dict())
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def recorded(outcome: Any) -> bool:
    """Whether ``outcome`` is a completed run, which the table of releases records."""
    return outcome.result is not None and (str(outcome.status).endswith("completed")
                                           or outcome.status == "completed-from-pending")


def publish_release(spec: Any, date: str, outcome: Any) -> Any:
    """Record a completed run in its job's table of releases and point ``latest`` at the newest date; returns
    ``outcome``. A run that did not complete changes neither."""
    if not recorded(outcome):
        return outcome
    root = releases_root(spec, date)
    os.makedirs(root, exist_ok=True)
    from filelock import FileLock

    from dppca_dask.storage._files import FILE_MODE, private_files

    lock = os.path.join(root, f".{RELEASES}.lock")
    with FileLock(lock, mode=FILE_MODE) if private_files() else FileLock(lock):
        rows = _write_table(root, release_row(spec, date, outcome))
        _point_latest(root, str(newest(rows)["output"]))
    return outcome


def _write_table(root: str, row: dict[str, Any]) -> list[dict[str, Any]]:
    """Replace (or add) ``row``'s job id in the table and write it atomically; returns every row."""
    import pyarrow.parquet as pq

    from dppca_dask.storage._files import make_tree_private

    path = os.path.join(root, RELEASES)
    rows: list[dict[str, Any]] = []
    if os.path.exists(path):
        rows = [r for r in pq.read_table(path).to_pylist() if r.get("job_id") != row["job_id"]]
    rows.append(row)
    table = releases_table(rows)
    tmp = os.path.join(root, f".{RELEASES}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        pq.write_table(table, tmp)
        make_tree_private(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return rows


def releases_table(rows: list[dict[str, Any]]) -> Any:
    """The table of releases (a ``pyarrow.Table``) of ``rows``, sorted by date and job id."""
    import pyarrow as pa

    rows = sorted(rows, key=lambda r: (str(r["date"]), str(r["job_id"])))
    schema = pa.schema([
        ("job", pa.string()), ("job_id", pa.string()), ("date", pa.string()), ("status", pa.string()),
        ("mechanism", pa.string()), ("epsilon", pa.float64()), ("delta", pa.float64()), ("relation", pa.string()),
        ("private", pa.bool_()), ("diagnostics", pa.string()), ("variance_ratios", pa.list_(pa.float64())),
        ("components", pa.string()), ("output", pa.string()), ("recorded_at", pa.string()),
    ])
    return pa.Table.from_pylist([{c: r.get(c) for c in _COLUMNS} for r in rows], schema=schema)


def newest(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The row ``latest`` points at: the newest date (a backfilled day does not move it back), the last recorded
    among runs of one date."""
    return max(rows, key=lambda r: (r["date"], r["recorded_at"]))


def read_releases(root: str, storage_options: Any = None) -> list[dict[str, Any]]:
    """The rows of the table of releases in ``root`` (:func:`releases_root`: a directory, or a URL in object storage
    with its ``storage_options``), oldest date first; none when no release was recorded there."""
    import io

    import pyarrow.parquet as pq

    from dppca_dask._urls import is_url

    import pyarrow as pa

    from dppca_dask.errors import StoreCorruptError

    where = f"{root.rstrip('/')}/{RELEASES}" if is_url(root) else os.path.join(root, RELEASES)
    if is_url(root):
        from dppca_dask.storage._remote import read_object

        try:
            source: Any = io.BytesIO(read_object(where, storage_options))
        except FileNotFoundError:
            return []
    elif os.path.exists(where):
        source = where
    else:
        return []
    try:
        return list(pq.read_table(source).to_pylist())
    except (pa.ArrowException, OSError) as exc:
        fix = ("the job's next run rebuilds it from the row objects in .releases/" if is_url(root) else
               "restore it from a backup, or remove it: the job's next run starts a new table")
        raise StoreCorruptError(f"the table of releases '{where}' cannot be read ({type(exc).__name__}); {fix}",
                                source=where) from None


def latest_output(root: str, storage_options: Any = None) -> str | None:
    """Where the newest release recorded in ``root`` is: the output directory ``root/latest`` points at, or for a
    root in object storage the URL its ``latest`` object names; None when nothing was released there yet."""
    from dppca_dask._urls import is_url

    if is_url(root):
        from dppca_dask.storage._remote import read_object

        try:
            return str(json.loads(read_object(f"{root.rstrip('/')}/{LATEST}", storage_options))["output"])
        except FileNotFoundError:
            return None
    link = os.path.join(root, LATEST)
    return os.path.realpath(link) if os.path.islink(link) else None


def _point_latest(root: str, output: str) -> None:
    """Point ``root/latest`` at ``output`` (relative when inside ``root``): a new link renamed over the old one."""
    link = os.path.join(root, LATEST)
    target = os.path.relpath(output, root) if os.path.commonpath([root, output]) == root else output
    if os.path.islink(link) and os.readlink(link) == target:
        return
    if os.path.lexists(link) and not os.path.islink(link):
        log.warning("%s is not a symbolic link: left alone (the latest release is %s)", link, output)
        return
    tmp = os.path.join(root, f".{LATEST}.{uuid.uuid4().hex[:8]}")
    os.symlink(target, tmp)
    os.replace(tmp, link)


#: What reads a job's result back, by the file its output directory holds (:data:`COMPONENT_FILES`' order).
_LOADERS = {"components.zarr": "dppca_dask.results:load_result", "factors.zarr": "dppca_dask.results:load_lowrank",
            "release.json": "dppca_dask.methods.window.release:load_release",
            "topics.npy": "dppca_dask.methods.tensor.topics:load_topics"}


def load_output(output: str, storage_options: Any = None) -> Any:
    """The result a job wrote into the output directory ``output`` (a path, or a URL in object storage with its
    ``storage_options``), read by the loader of its kind (:func:`~dppca_dask.load_result`,
    :func:`~dppca_dask.load_lowrank`, the window's and the topic model's). An output in object storage is read
    only once published (its ``COMPLETE`` marker written), through a private temporary directory removed after.

    Raises
    ------
    StoreNotFoundError
        ``output`` holds no result, or (object storage) is not published yet.
    """
    import importlib
    import tempfile

    from dppca_dask._urls import is_url
    from dppca_dask.errors import StoreNotFoundError

    if is_url(output):
        with tempfile.TemporaryDirectory(prefix="dppca-output-") as here:  # 0700: mkdtemp's
            _fetch_published(output.rstrip("/"), here, storage_options)
            return load_output(here)
    found = next((name for name in COMPONENT_FILES if os.path.exists(os.path.join(output, name))), None)
    if found is None:
        raise StoreNotFoundError(f"'{output}' holds no job result (none of {', '.join(COMPONENT_FILES)}); give the "
                                 "output directory of a completed run (read_releases lists them)")
    module, _, name = _LOADERS[found].partition(":")
    return getattr(importlib.import_module(module), name)(output)


def load_latest(root: str, storage_options: Any = None) -> Any:
    """The newest release recorded in ``root`` (:func:`releases_root`: a directory, or a URL in object storage),
    read as :func:`load_output` reads it.

    Raises
    ------
    StoreNotFoundError
        Nothing was released in ``root`` yet.
    """
    from dppca_dask.errors import StoreNotFoundError

    output = latest_output(root, storage_options)
    if output is None:
        raise StoreNotFoundError(f"no release is recorded in '{root}' (no '{LATEST}' there); run the job first, or "
                                 "give the directory its table of releases is in (the part of [output] path before "
                                 "{date})")
    return load_output(output, storage_options)


def _fetch_published(url: str, directory: str, storage_options: Any) -> None:
    """The objects of the published output ``url`` into ``directory``."""
    from dppca_dask._urls import filesystem
    from dppca_dask.errors import StoreNotFoundError
    from dppca_dask.storage._remote import read_object

    try:
        published = bool(json.loads(read_object(f"{url}/COMPLETE", storage_options)).get("job_id"))
    except (FileNotFoundError, ValueError, AttributeError):
        published = False
    if not published:
        raise StoreNotFoundError(f"'{url}' is not a published job output (no COMPLETE marker naming its job id); "
                                 "wait for its run to end, or run the job again to finish its upload")
    fs, inner = filesystem(url, storage_options)
    fs.invalidate_cache(inner)
    for path in fs.find(inner):
        relative = path[len(inner) + 1:]
        if path.startswith(inner + "/") and relative != "COMPLETE":
            target = os.path.join(directory, *relative.split("/"))
            os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
            fs.get_file(path, target)
