"""Running a job: refresh the store, reserve the budget, run the mechanism, charge, write the result.

The order is what makes a job safe to schedule and to re-run:

1. the spec and the mechanism's parameters are validated and the store's metadata read (bad input fails here,
   before any budget is reserved: DESIGN.md invariant 7);
2. the job's DpEvents are reserved in the ledger under its job id ``<id>@<date>`` (one transaction; refused with
   exit code 3 if the dataset's total would be exceeded);
3. the mechanism runs; adaptive power iteration writes each released (noisy) iterate to ``checkpoint.json`` in
   the output directory before anything else sees it;
4. the result is written to ``.pending/`` in the output directory, the reservation becomes a charge, and the
   result is moved into place.

A job that fails before drawing any data-dependent noise returns its reservation; one that fails after keeps the
charge (invariant 6). Running the same job id again:

- after success, does nothing (idempotent per job id and date) and reports the existing result;
- after a crash or a failure, continues under the same reservation: adaptive power iteration resumes from its
  last checkpoint without repeating a released iteration (so the total released is exactly one run's), other
  mechanisms start again only if nothing of theirs was released (they release once, at the end);
- between the charge and the move of the result, finishes the move.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from dppca_dask.errors import BudgetExceededError, JobSpecError, LedgerError
from dppca_dask.jobs.spec import JobSpec

__all__ = ["JobOutcome", "run_job"]

log = logging.getLogger(__name__)

CHECKPOINT = "checkpoint.json"
JOB_FILE = "job.json"
PENDING = ".pending"


@dataclass(frozen=True)
class JobOutcome:
    """What a job run did: its id, the ledger entry, where the result is and what happened."""

    job_id: str
    status: str
    """``completed``, ``already-completed`` or ``resumed-and-completed``."""
    output: str
    ledger_entry: Any
    result: Any
    resumed_from: int | None = None
    """Releases recovered from the checkpoint of an interrupted attempt (adaptive power), if any."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id, "status": self.status, "output": self.output,
            "ledger": self.ledger_entry.to_dict(), "resumed_from": self.resumed_from,
            "privacy": self.result.privacy.to_dict() if self.result is not None else None,
            "mechanism": self.result.mechanism if self.result is not None else None,
        }


def today() -> str:
    """The default run date: today in UTC, ``YYYY-MM-DD``."""
    return _dt.datetime.now(_dt.timezone.utc).date().isoformat()


def _check_date(date: str) -> str:
    try:
        return _dt.date.fromisoformat(date).isoformat()
    except (TypeError, ValueError) as exc:
        raise JobSpecError(f"date must be YYYY-MM-DD; got {date!r}") from exc


def _write_json(path: str, obj: Any) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(obj, handle, indent=2, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def _read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


# ------------------------------------------------------------------------------------------------ planning


def _lowrank_neighbouring(parameters: dict[str, Any]) -> str:
    from dppca_dask.accounting.hardt_roth import row_change_relation

    change = parameters.get("row_change_bound", parameters.get("row_norm_bound", 1.0))
    return row_change_relation(float(change))


def _plan(spec: JobSpec, n_cols: int, n_rows: int | None = None) -> tuple[str, tuple[Any, ...]]:
    """(neighbouring relation, DpEvents to reserve) from public parameters and the store's width."""
    from dppca_dask.accounting import EpsilonDeltaDpEvent
    from dppca_dask.api import plan_release

    if spec.kind == "pca":
        plan = plan_release(n_cols, mechanism=spec.mechanism, epsilon=spec.epsilon, delta=spec.delta,
                            **dict(spec.parameters))
        return plan.neighbouring, plan.events
    if n_rows is not None:  # the exact events a complete low-rank run emits (every parameter validated first)
        from dppca_dask.lowrank import plan_lowrank

        plan_lr = plan_lowrank(n_rows, n_cols, epsilon=spec.epsilon, delta=spec.delta, mechanism=spec.mechanism,
                               **dict(spec.parameters))
        return plan_lr.neighbouring, plan_lr.events
    # Low-rank mechanisms run at their calibrated (epsilon, delta) (standard calibration, which jobs always use).
    return _lowrank_neighbouring(dict(spec.parameters)), (EpsilonDeltaDpEvent(spec.epsilon, spec.delta),)


def _refresh_store(spec: JobSpec) -> None:
    from dppca_dask.ingest import ingest

    assert spec.data.ingest is not None
    args = dict(spec.data.ingest)
    source = args.pop("source")
    if not os.path.exists(source):
        raise JobSpecError(f"{spec.source}: [data.ingest] source '{source}' does not exist")
    log.info("refreshing store %s from %s", spec.data.store, source)
    ingest(source, spec.data.store, overwrite=True, **args)


# ------------------------------------------------------------------------------------------------ running


def _security(spec: JobSpec) -> Any:
    if not spec.cluster.tls:
        return None
    from distributed.security import Security

    for key in ("tls_ca_file", "tls_cert", "tls_key"):
        path = getattr(spec.cluster, key)
        if not os.path.exists(path):
            raise JobSpecError(f"{spec.source}: [cluster] {key} '{path}' does not exist")
    return Security(tls_ca_file=spec.cluster.tls_ca_file, tls_client_cert=spec.cluster.tls_cert,
                    tls_client_key=spec.cluster.tls_key, require_encryption=True)


def _finalise(output: str) -> None:
    """Move the result from ``.pending`` into the output directory (after the charge)."""
    pending = os.path.join(output, PENDING)
    if not os.path.isdir(pending):
        return
    for name in sorted(os.listdir(pending)):
        target = os.path.join(output, name)
        if os.path.isdir(target):
            shutil.rmtree(target)
        elif os.path.exists(target):
            os.remove(target)
        os.replace(os.path.join(pending, name), target)
    os.rmdir(pending)
    checkpoint = os.path.join(output, CHECKPOINT)
    if os.path.exists(checkpoint):
        os.remove(checkpoint)


def _load_result(spec: JobSpec, output: str) -> Any:
    if spec.kind == "lowrank":
        from dppca_dask.lowrank import load_lowrank

        return load_lowrank(output)
    from dppca_dask.results import load_result

    return load_result(output)


def _checkpoint(output: str, job_id: str, fingerprint: str) -> Any:
    """The released state of an interrupted attempt of ``job_id`` (adaptive power), or None."""
    from dppca_dask.algorithms.adaptive_power import AdaptivePowerState

    path = os.path.join(output, CHECKPOINT)
    if not os.path.exists(path):
        return None
    saved = _read_json(path)
    if saved.get("job_id") != job_id:
        log.info("ignoring the checkpoint of another job (%s) in %s", saved.get("job_id"), output)
        return None
    if saved.get("store_fingerprint") != fingerprint:
        raise LedgerError(
            f"job '{job_id}' was interrupted after releasing {saved.get('releases')} iterations of a store that has "
            f"changed since (fingerprint {saved.get('store_fingerprint')}, now {fingerprint}); it cannot resume on "
            "other data. Restore the store, or give the run a new job id (new budget)"
        )
    return AdaptivePowerState.from_json(saved["state"])


def run_job(
    spec: JobSpec,
    *,
    date: str | None = None,
    client: Any = None,
    noise: Any = None,
    progress: bool | None = None,
) -> JobOutcome:
    """Run ``spec`` once for ``date`` (default: today, UTC): see the module docstring for the steps.

    Parameters
    ----------
    client
        A ``distributed.Client`` to use instead of the spec's ``[cluster]`` (tests, notebooks).
    noise
        The noise source (default: a new one from the operating system's entropy). Tests pass a seeded one;
        the result is then not private, and says so, but the ledger still charges it.

    Raises
    ------
    BudgetExceededError
        The dataset's budget cannot cover the job (nothing was read or reserved).
    """
    date = _check_date(date or today())
    with _job_lock(spec.budget.ledger, spec.budget.dataset, spec.job_id(date)):
        return _run_job(spec, date=date, client=client, noise=noise, progress=progress)


@contextlib.contextmanager
def _job_lock(ledger_path: str, dataset: str, job_id: str) -> Iterator[None]:
    """An exclusive lock per (ledger, dataset, job id) for the whole run: two overlapping runs of one job (a
    scheduler's retry while the first still runs) must not both release. The operating system drops the lock when
    the process dies, so a crashed run never blocks its own resumption."""
    import fcntl

    directory = f"{os.path.abspath(ledger_path)}.locks"
    os.makedirs(directory, exist_ok=True)
    name = hashlib.sha256(f"{dataset}\0{job_id}".encode()).hexdigest()[:32]
    with open(os.path.join(directory, f"{name}.lock"), "a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise LedgerError(
                f"job '{job_id}' of dataset '{dataset}' is already running in another process; wait for it to end "
                "(running it twice at once could release twice)"
            ) from exc
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _run_job(spec: JobSpec, *, date: str, client: Any, noise: Any, progress: bool | None) -> JobOutcome:
    from dppca_dask.ledger import CHARGED, RESERVED, Ledger
    from dppca_dask.mechanisms import NoiseSource
    from dppca_dask.storage import open_matrix

    job_id = spec.job_id(date)
    output = spec.output_dir(date)
    ledger = Ledger(spec.budget.ledger)
    dataset = spec.budget.dataset
    t0 = time.perf_counter()

    # -- an earlier attempt of this job id ------------------------------------------------------------------
    previous = ledger.entry(dataset, job_id)
    if previous is not None and previous.status == CHARGED:
        if previous.outcome == "succeeded":
            _finalise(output)  # a crash between the charge and the move of the result
            if not os.path.exists(os.path.join(output, "result.json")):
                raise LedgerError(
                    f"job '{job_id}' is charged to '{dataset}' as succeeded but its result is missing from "
                    f"'{output}'; it is not released again: restore the output, or give the run a new job id"
                )
            log.info("job %s already completed; nothing to do", job_id)
            return JobOutcome(job_id, "already-completed", output, previous, _load_result(spec, output))
    resuming = previous is not None and previous.status in (RESERVED, CHARGED)

    # -- 1. data and public parameters (nothing reserved yet) ---------------------------------------------
    if spec.data.ingest is not None and not resuming:
        _refresh_store(spec)
    store = open_matrix(spec.data.store)
    neighbouring, events = _plan(spec, store.n_cols, store.n_rows)
    security = _security(spec)
    resume = None
    if resuming:
        if spec.mechanism == "adaptive-power":
            resume = _checkpoint(output, job_id, store.fingerprint)
        if resume is None and (previous.status == CHARGED or previous.first_release is not None):
            raise BudgetExceededError(
                f"job '{job_id}' released values or failed after drawing noise, and its budget stays spent (ledger "
                f"'{spec.budget.ledger}', dataset '{dataset}'); no checkpoint of it was found in '{output}' to resume "
                "from, so running it again would be a second release: restore the checkpoint, or give the run a new "
                "job id (--job-id or --date) to spend new budget"
            )

    # -- 2. reserve -------------------------------------------------------------------------------------------
    entry = ledger.reserve(
        dataset, job_id, epsilon=spec.epsilon, delta=spec.delta, events=events, mechanism=spec.mechanism,
        neighbouring=neighbouring, job_name=spec.name, total_epsilon=spec.budget.total_epsilon,
        total_delta=spec.budget.total_delta,
    )
    log.info("job %s: %s (epsilon=%g, delta=%g) %s for dataset %s", job_id, spec.mechanism, spec.epsilon,
             spec.delta, "resumed its reservation" if resuming else "reserved", dataset)
    os.makedirs(output, exist_ok=True)
    _write_json(os.path.join(output, JOB_FILE), {
        "job_id": job_id, "date": date, "spec": spec.to_dict(), "ledger": spec.budget.ledger, "dataset": dataset,
        "store_fingerprint": store.fingerprint,
    })

    # -- 3. run -----------------------------------------------------------------------------------------------
    if noise is None:
        noise = NoiseSource.from_entropy()
    fingerprint = store.fingerprint

    noted = [entry.first_release is not None]

    def checkpoint(state: Any, emitted: tuple[Any, ...]) -> None:
        # Released values only (noisy iterates, released thresholds): safe to write (invariant 3).
        if hasattr(state, "to_json"):
            _write_json(os.path.join(output, CHECKPOINT), {
                "job_id": job_id, "store_fingerprint": fingerprint, "mechanism": spec.mechanism,
                "releases": len(emitted) // 2, "state": state.to_json(),
            })
            if not noted[0]:  # from now on this job id can only continue from its checkpoint
                ledger.note_first_release(dataset, job_id)
                noted[0] = True

    stale = os.path.join(output, PENDING)
    if os.path.isdir(stale):  # what a failed attempt left half-written; never moved into place
        shutil.rmtree(stale)
    try:
        result = _run_mechanism(spec, store, client=client, security=security, noise=noise,
                                on_release=checkpoint, resume=resume, progress=progress)
        result.save(os.path.join(output, PENDING))
    except BaseException:
        if noise.data_dependent_keys or noted[0] or resume is not None or (
                previous is not None and previous.status == CHARGED):
            ledger.charge(dataset, job_id, outcome="failed")
            log.error("job %s failed after drawing noise: its budget stays spent", job_id)
        else:
            ledger.release(dataset, job_id)
            log.error("job %s failed before drawing any noise: its reservation is returned", job_id)
        raise

    # -- 4. charge, then put the result in place ---------------------------------------------------------------
    entry = ledger.charge(dataset, job_id, outcome="succeeded")
    _finalise(output)
    log.info("job %s completed in %.1f s; charged to %s", job_id, time.perf_counter() - t0, dataset)
    status = "resumed-and-completed" if resume is not None else "completed"
    resumed_from = None if resume is None else resume.component * _n_iter(spec) + resume.iteration
    return JobOutcome(job_id, status, output, entry, result, resumed_from)


def _n_iter(spec: JobSpec) -> int:
    from dppca_dask.api import DEFAULT_N_ITER

    return int(spec.parameters.get("n_iter") or DEFAULT_N_ITER)


def _run_mechanism(spec: JobSpec, store: Any, *, client: Any, security: Any, noise: Any, on_release: Any,
                   resume: Any, progress: bool | None) -> Any:
    from dppca_dask.coordinator import connect

    if client is None and spec.cluster.address:
        target: Any = spec.cluster.address
    else:
        target = client
    with connect(target, n_workers=spec.cluster.n_workers, memory_limit=spec.cluster.memory_limit,
                 security=security) as dask_client:
        params = dict(spec.parameters)
        if spec.kind == "lowrank":
            from dppca_dask.lowrank import lowrank

            return lowrank(store, epsilon=spec.epsilon, delta=spec.delta, mechanism=spec.mechanism,
                           client=dask_client, noise=noise, **params)
        from dppca_dask.api import pca

        return pca(store, epsilon=spec.epsilon, delta=spec.delta, mechanism=spec.mechanism, client=dask_client,
                   noise=noise, on_release=on_release, resume=resume, progress=progress, **params)
