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
   resume from.

The table of releases and the ``latest`` pointer stay in the mirror's directory on this machine; the bucket gets
the dated output directories. Job files hold public and released values only, as on a local disk.
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

__all__ = ["COMPLETE", "mirror_template", "run_into_bucket"]

#: The marker object written last into a published output directory in object storage.
COMPLETE = "COMPLETE"


def mirror_template(url_template: str) -> str:
    """Where on this machine the output template ``url_template`` is mirrored: the path inside the bucket below a
    directory named by a hash of the template (public: it is the spec's own text)."""
    base = os.environ.get("DPPCA_DASK_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "dppca_dask")
    scheme, _, rest = url_template.partition("://")
    digest = hashlib.sha256(url_template.encode()).hexdigest()[:16]
    return os.path.join(os.path.abspath(base), "job-outputs", digest, scheme, *rest.strip("/").split("/"))


def run_into_bucket(run: Callable[..., Any], spec: Any, date: str, **kwargs: Any) -> Any:
    """Run ``run(spec_on_the_mirror, date=date, **kwargs)`` with the output of ``spec`` in object storage (see the
    module docstring); returns its outcome, whose ``output`` is the URL."""
    from dppca_dask.storage._remote import check_bucket

    url = spec.output_dir(date).rstrip("/")
    options = spec.data.storage_options
    local = dataclasses.replace(spec, output=mirror_template(spec.output))
    mirror = local.output_dir(date)
    check_bucket(url, options)  # a missing bucket, endpoint or credentials: named before anything is reserved
    with _job_lock(url, options):
        published = _download(url, mirror, options, spec.job_id(date))
        try:
            outcome = run(local, date=date, **kwargs)
        except BaseException:
            with contextlib.suppress(Exception):  # what the attempt wrote, for another machine to resume from
                if os.path.isdir(mirror) and not published:
                    _upload(url, mirror, options, marker=None)
            raise
        if not (published and outcome.status == "already-completed"):
            _upload(url, mirror, options, marker=outcome.job_id)
    return dataclasses.replace(outcome, output=url)


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


def _upload(url: str, mirror: str, options: Any, *, marker: str | None) -> None:
    """The mirror's files into the bucket, objects it no longer holds removed, and (``marker``) the ``COMPLETE``
    marker last; without ``marker``, an earlier marker is removed first (the output is being rewritten)."""
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
        if relative != COMPLETE:
            fs.put_file(files[relative], f"{inner}/{relative}")
            steps._kill_point("uploading")
    for relative in sorted(set(objects) - set(files) - {COMPLETE}):
        fs.rm_file(objects[relative])
    if marker is not None:
        steps._kill_point("before-marker")
        fs.pipe_file(f"{inner}/{COMPLETE}", json.dumps({"job_id": marker}).encode())
