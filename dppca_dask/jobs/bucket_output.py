"""Job outputs in object storage: ``[output] path = "s3://bucket/results/{name}/{date}"``.

Object storage has no rename and no file lock, which the runner's steps use (``.pending/`` moved into place, the
table of releases renamed over the old one). So a job whose output is a URL runs, unchanged, against a local copy of
its output directory (the *mirror*), and the bucket receives the outcome:

1. the job's lock object beside the output (``.DATE.job.lock`` for ``.../DATE``), created by a conditional PUT: a
   second run of the same output on any machine is refused while one runs (a lock left by a killed process of this
   machine is taken over; one of another machine is named, to be deleted by hand);
2. the mirror, kept on this machine (``$DPPCA_DASK_CACHE_DIR/job-outputs/<hash of the URL>/``, owner-only), takes
   what the bucket holds for the output: the whole of it when the bucket's copy is complete (its ``COMPLETE``
   marker names this job id), else only the files the mirror lacks (what an attempt on another machine uploaded
   when it failed: its ``job.json`` and checkpoint, from which the run resumes without a second release);
3. the job runs on the mirror exactly as on a local output (reservation, checkpoints, ``.pending/``, the charge,
   the move into place, resumption after a crash, the refusal of a second release);
4. the mirror's files are uploaded (objects the output no longer holds, such as a finished run's checkpoint, are
   removed), and last the ``COMPLETE`` marker, one PUT of ``{"job_id": ...}``. A reader takes the output as
   published once the marker names the job id; a run killed before it leaves an output without it, and the next
   run of the job finishes the upload (its ledger entry is charged and the mirror holds the result) without
   computing anything again. A run that fails uploads what it wrote (no marker), for a run on another machine to
   resume from;
5. the release is recorded beside the dated outputs in the bucket (in the directory that
   :func:`~dppca_dask.jobs.outputs.releases_root` names: ``s3://bucket/results/NAME`` for
   ``s3://bucket/results/{name}/{date}``), after the marker,
   so that nothing names an output not yet published: its row as an object of its own (``.releases/<job id>.json``),
   then, under the table's lock object (``.releases.lock``), the table ``releases.parquet`` rebuilt from every row
   object and the ``latest`` object (JSON: ``job``, ``job_id``, ``date``, ``output``, the URL of the newest date's
   output): see :func:`publish_rows` for why this is safe when machines publish dates of one job at once. Rows name
   URLs. The mirror's directory keeps a copy of the bucket's table and ``latest``, taken before the run and after
   the publication (a fresh machine starts from the bucket's, not an empty one). A run killed after the marker
   records its release at its next run, which releases nothing again.

Objects in the bucket name the output by its URL, never by the mirror's path (the job file's ``[output] path`` is
the spec's URL template): a machine's path is not the output's identity. Job files hold public and released values
only, as on a local disk; object names hold the spec's names, job ids and dates only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator
from typing import Any

from dppca_dask.jobs import steps
from dppca_dask.jobs.steps import JOB_FILE

__all__ = ["COMPLETE", "ROWS", "TABLE_LOCK", "mirror_template", "publish_rows", "run_into_bucket"]

#: The marker object written last into a published output directory in object storage.
COMPLETE = "COMPLETE"
#: Beside the dated outputs: the prefix of the table's row objects, one per job id, and the table's lock object.
ROWS, TABLE_LOCK = ".releases", ".releases.lock"


def mirror_template(url_template: str) -> str:
    """Where on this machine the output template ``url_template`` is mirrored: the path inside the bucket below a
    directory named by a hash of the template (public: it is the spec's own text)."""
    base = os.environ.get("DPPCA_DASK_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "dppca_dask")
    scheme, _, rest = url_template.partition("://")
    digest = hashlib.sha256(url_template.encode()).hexdigest()[:16]
    return os.path.join(os.path.abspath(base), "job-outputs", digest, scheme, *rest.strip("/").split("/"))


def run_into_bucket(run: Callable[..., Any], spec: Any, date: str, **kwargs: Any) -> Any:
    """Run ``run(spec_on_the_mirror, date=date, **kwargs)`` with the output of ``spec`` in object storage (see the
    module docstring), then record the release in the bucket's table of releases and ``latest``; returns the
    outcome, whose ``output`` is the URL."""
    from dppca_dask.jobs.outputs import recorded, release_row, releases_root
    from dppca_dask.storage._remote import check_bucket

    url = spec.output_dir(date).rstrip("/")
    options = spec.data.storage_options
    local = dataclasses.replace(spec, output=mirror_template(spec.output))
    mirror = local.output_dir(date)
    public = {local.output: spec.output, mirror: url}  # the mirror's paths, as the bucket names them
    root, mirror_root = releases_root(spec, date), releases_root(local, date)
    check_bucket(url, options)  # a missing bucket, endpoint or credentials: named before anything is reserved
    with _job_lock(url, options):
        published = _download(url, mirror, options, spec.job_id(date))
        _copy_table(root, mirror_root, options)  # the mirror starts from the bucket's table, not an empty one
        try:
            outcome = run(local, date=date, **kwargs)
        except BaseException:
            with contextlib.suppress(Exception):  # what the attempt wrote, for another machine to resume from
                if os.path.isdir(mirror) and not published:
                    _upload(url, mirror, options, marker=None, public=public)
            raise
        if not (published and outcome.status == "already-completed"):
            _upload(url, mirror, options, marker=outcome.job_id, public=public)
        if recorded(outcome):  # after the marker: a row or ``latest`` never names an unpublished output
            publish_rows(root, release_row(spec, date, outcome, published_as=url), options)
            _copy_table(root, mirror_root, options)
    return dataclasses.replace(outcome, output=url)


def publish_rows(root: str, row: dict[str, Any], options: Any) -> list[dict[str, Any]]:
    """Record ``row`` (a published output's) in the bucket's table of releases in ``root`` and point ``latest`` at
    the newest release; returns the table's rows.

    The row is written first as an object of its own (``.releases/<job id>.json``, one PUT, replacing an earlier
    run's of the same job id), then, holding the table's lock object (``.releases.lock``, a conditional PUT, waited
    for up to :data:`~dppca_dask.storage._remote.LOCK_TIMEOUT` seconds), the table is rebuilt from every row object
    and written whole (one PUT), and ``latest`` after it. Two machines publishing dates of the same job take turns
    at the rebuild, and each rebuild lists every row written before it: the last one written holds them all (a
    table read, changed and written back would lose a row to a concurrent writer without the lock, and a lost row
    could not be rebuilt without the row objects). A run killed after its row but before the rebuild leaves the
    row out of the table until the next publication in ``root`` (of any date, or the re-run of its own, which
    releases nothing again).
    """
    from dppca_dask.jobs.outputs import LATEST, RELEASES, newest, releases_table
    from dppca_dask.storage._remote import write_object

    root = root.rstrip("/")
    write_object(f"{root}/{ROWS}/{_row_name(row['job_id'])}",
                 json.dumps(row, sort_keys=True).encode(), options)
    steps._kill_point("row-written")
    with _table_lock(root, options):
        rows = _rows(root, options)
        steps._kill_point("rows-listed")
        write_object(f"{root}/{RELEASES}", _parquet(releases_table(rows)), options)
        steps._kill_point("table-written")
        top = newest(rows)
        write_object(f"{root}/{LATEST}", json.dumps(
            {key: top[key] for key in ("job", "job_id", "date", "output")}, sort_keys=True).encode(), options)
    return rows


def _row_name(job_id: str) -> str:
    """The row object's name of ``job_id`` (public: the spec's id and the run's date)."""
    from urllib.parse import quote

    return quote(job_id, safe="@-_.+") + ".json"


def _rows(root: str, options: Any) -> list[dict[str, Any]]:
    """Every row object below ``root/.releases``."""
    from dppca_dask._urls import filesystem

    fs, _ = filesystem(root, options)
    rows = []
    for relative, path in sorted(_listing(f"{root}/{ROWS}", options).items()):
        if "/" not in relative and relative.endswith(".json"):
            with contextlib.suppress(FileNotFoundError):  # replaced meanwhile: the next rebuild has it
                rows.append(json.loads(fs.cat_file(path)))
    return rows


def _parquet(table: Any) -> bytes:
    import io

    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(table, buffer)
    return buffer.getvalue()


@contextlib.contextmanager
def _table_lock(root: str, options: Any) -> Iterator[None]:
    import time

    from dppca_dask.errors import InvalidParameterError
    from dppca_dask.storage import _remote

    lock = f"{root}/{TABLE_LOCK}"
    timeout = _remote.LOCK_TIMEOUT
    deadline = time.monotonic() + timeout
    while not _remote.try_lock_object(lock, options):  # a lock of a killed process of this machine is taken over
        if time.monotonic() > deadline:
            raise InvalidParameterError(
                f"the table of releases in '{root}' has been updated by another run for more than "
                f"{timeout:.0f} s (its lock object {lock} exists); the output is published, its release not "
                f"yet in the table: if no run is updating it (one was killed on another machine), delete the lock "
                f"object (aws s3 rm {lock}) and run the job again, which records it without releasing again")
        time.sleep(0.2)
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            _remote.remove_object(lock, options)


def _copy_table(root: str, mirror_root: str, options: Any) -> None:
    """The bucket's table of releases and ``latest`` into the mirror's directory (owner-only), as the bucket holds
    them (their rows name URLs); the mirror's copies go when the bucket has none."""
    from dppca_dask.jobs.outputs import LATEST, RELEASES
    from dppca_dask.storage._files import make_tree_private
    from dppca_dask.storage._remote import read_object

    os.makedirs(mirror_root, mode=0o700, exist_ok=True)
    for name in (RELEASES, LATEST):
        target = os.path.join(mirror_root, name)
        try:
            data = read_object(f"{root.rstrip('/')}/{name}", options)
        except FileNotFoundError:
            if os.path.lexists(target):
                os.remove(target)
            continue
        if os.path.islink(target):
            os.remove(target)
        with open(f"{target}.tmp", "wb") as handle:
            handle.write(data)
        make_tree_private(f"{target}.tmp")
        os.replace(f"{target}.tmp", target)


@contextlib.contextmanager
def _job_lock(url: str, options: Any) -> Iterator[None]:
    from dppca_dask.errors import LedgerError
    from dppca_dask.storage._remote import remove_object, try_lock_object

    parent, _, name = url.rpartition("/")
    lock = f"{parent}/.{name}.job.lock"
    if not try_lock_object(lock, options):
        raise LedgerError(
            f"the output '{url}' is being written by another run (its lock object {lock} exists); wait for it to "
            f"end (running a job twice at once could release twice), or, if that run was killed on another machine, "
            f"delete the lock object (aws s3 rm {lock}) and run again")
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            remove_object(lock, options)


def _listing(url: str, options: Any) -> dict[str, str]:
    """The objects below ``url``: path relative to it -> full path in the filesystem."""
    from dppca_dask._urls import filesystem

    fs, inner = filesystem(url, options)
    fs.invalidate_cache(inner)
    try:
        found = fs.find(inner)
    except FileNotFoundError:
        return {}
    return {path[len(inner) + 1:]: path for path in found if path.startswith(inner + "/")}


def _download(url: str, mirror: str, options: Any, job_id: str) -> bool:
    """Bring the mirror up to what the bucket holds (see the module docstring, step 2); whether the bucket's copy
    was published (its marker names ``job_id``)."""
    from dppca_dask._urls import filesystem
    from dppca_dask.storage._files import make_tree_private

    fs, _ = filesystem(url, options)
    objects = _listing(url, options)
    complete = False
    if COMPLETE in objects:
        with contextlib.suppress(ValueError, AttributeError, OSError):
            complete = json.loads(fs.cat_file(objects[COMPLETE])).get("job_id") == job_id
    if complete and os.path.isdir(mirror):
        shutil.rmtree(mirror)  # the published output is the truth, whatever an older attempt left here
    os.makedirs(mirror, mode=0o700, exist_ok=True)
    for relative, path in objects.items():
        target = os.path.join(mirror, *relative.split("/"))
        if relative == COMPLETE or os.path.lexists(target):
            continue
        os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
        fs.get_file(path, target)
    make_tree_private(mirror)
    return complete


def _upload(url: str, mirror: str, options: Any, *, marker: str | None, public: dict[str, str]) -> None:
    """The mirror's files into the bucket, objects it no longer holds removed, and (``marker``) the ``COMPLETE``
    marker last; without ``marker``, an earlier marker is removed first (the output is being rewritten). The job
    file goes up naming the output's URL where it names the mirror (``public``: mirror path -> URL)."""
    from dppca_dask._urls import filesystem

    fs, inner = filesystem(url, options)
    objects = _listing(url, options)
    if COMPLETE in objects:
        fs.rm_file(objects[COMPLETE])  # first: a reader never takes a half-rewritten output as published
    files = {}
    for root, _dirs, names in os.walk(mirror):
        for name in names:
            path = os.path.join(root, name)
            files[os.path.relpath(path, mirror).replace(os.sep, "/")] = path
    for relative in sorted(files):
        if relative == JOB_FILE:
            fs.pipe_file(f"{inner}/{relative}", _public_job_file(files[relative], public))
        elif relative != COMPLETE:
            fs.put_file(files[relative], f"{inner}/{relative}")
        steps._kill_point("uploading")
    for relative in sorted(set(objects) - set(files) - {COMPLETE}):
        fs.rm_file(objects[relative])
    if marker is not None:
        steps._kill_point("before-marker")
        fs.pipe_file(f"{inner}/{COMPLETE}", json.dumps({"job_id": marker}).encode())
        steps._kill_point("published")


def _public_job_file(path: str, public: dict[str, str]) -> bytes:
    """The job file at ``path`` as the bucket holds it: every path of the mirror (``public``'s keys, or below
    them) replaced by the URL it stands for. A machine's path is not the output's identity."""
    def rename(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: rename(item) for key, item in value.items()}
        if isinstance(value, list):
            return [rename(item) for item in value]
        if isinstance(value, str):
            for here, there in sorted(public.items(), key=lambda pair: -len(pair[0])):
                if value == here or value.startswith(here.rstrip("/") + "/"):
                    return there + value[len(here):]
        return value

    with open(path, encoding="utf-8") as handle:
        return (json.dumps(rename(json.load(handle)), indent=2, sort_keys=True) + "\n").encode()
