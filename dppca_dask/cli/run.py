"""``dppca-dask run JOB.toml``: run a job spec under its privacy-budget ledger (idempotent per job id and date)."""

from __future__ import annotations

import argparse
import contextlib
import json
from typing import Any

from dppca_dask.ledger._postgres import redact  # a ledger URL's password is never printed

__all__ = ["register"]

#: One line for ``dppca-dask --help`` (read without registering the command).
SUMMARY = "run a job spec (TOML) under its privacy-budget ledger"


def register(subparsers: Any) -> None:
    from dppca_dask.cli._cluster import add_cluster_arguments, add_executor_argument

    p = subparsers.add_parser(
        "run",
        help=SUMMARY,
        description=(
            "Run a job: refresh the store if the spec says so, reserve the privacy budget in the ledger, run the "
            "mechanism, charge the ledger and write the result. The ledger must exist (`dppca-dask budget init` "
            "creates it). The ledger's job id is '<id>@<date>': running the "
            "same job on the same date again does nothing once it has succeeded, and resumes it after a crash. "
            "Exit codes: 0 done, 2 invalid spec or input, 3 privacy budget exhausted, 4 mechanism failure."
        ),
    )
    p.add_argument("job", help="the job spec (TOML)")
    p.add_argument("--date", default=None, help="run date YYYY-MM-DD, part of the job id (default: today, UTC)")
    p.add_argument("--job-id", default=None, help="override [job] id (the job id is then ID@DATE)")
    p.add_argument("--scheduler", default=None, help="override [cluster] address (tcp://HOST:PORT or tls://...)")
    add_executor_argument(p, text="override [cluster] executor: where to run without a scheduler ('local' in this "
                                  "process, 'cluster' on an embedded LocalCluster, 'auto' by the store's public "
                                  "shape)", default=None)
    add_cluster_arguments(p)
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="TABLE.KEY=VALUE",
                   help="override a value of the spec (TOML syntax; repeatable), e.g. --set privacy.epsilon=0.5")
    p.add_argument("--allow-new-store", action="store_true",
                   help="accept a store other than the one the dataset key was first used with (the same people's "
                        "data, re-ingested); the ledger records the new store")
    p.add_argument("--dry-run", action="store_true",
                   help="check the spec, the store (every partition; a sliding-window job: the window's plan from the "
                        "public partition table), its schema, the scheduler and the budget (the reservation tried on a "
                        "copy of the ledger); reserve, release and write nothing. A job that ingests its store "
                        "first is checked from its spec and source, without ingesting")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Run the job; with ``--json`` exactly one JSON object on standard output whatever the outcome (the exit code
    in it). A reader that goes away early (``| head -1``) does not change the exit code: the job's work is done by
    the time anything is printed."""
    import sys

    try:
        code = _run(args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at the interpreter's exit
        return code
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except BaseException as exc:
        if args.json and not isinstance(exc, (SystemExit, GeneratorExit)):
            with contextlib.suppress(BrokenPipeError):
                _json_failure(args, exc)
        raise


def _silence_stdout() -> None:
    """Point standard output at the null device (its reader went away): the interpreter's final flush then has
    nowhere to fail."""
    import os
    import sys

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def exit_code_of(exc: BaseException) -> int:
    """The exit code the command line ends with for ``exc`` (as :func:`dppca_dask.cli.main` decides it)."""
    from dppca_dask.errors import DppcaError

    if isinstance(exc, DppcaError):
        return int(exc.exit_code)
    if isinstance(exc, KeyboardInterrupt):
        return 130
    from dppca_dask.coordinator.client import is_cluster_loss

    return 5 if is_cluster_loss(exc) else 1


#: The ``status`` of a failed run's JSON object, by exit code.
FAILURE_STATUS = {2: "invalid", 3: "refused", 4: "mechanism-failed", 5: "cluster-lost", 130: "interrupted"}


def _json_failure(args: argparse.Namespace, exc: BaseException) -> None:
    """The one JSON object of a run that did not complete: its status, exit code and the error line (the message
    standard error also shows; an unexpected error only by its class and place, never its message)."""
    from dppca_dask.cli import _json, _unexpected
    from dppca_dask.errors import DppcaError

    code = exit_code_of(exc)
    message = str(exc) if isinstance(exc, DppcaError) else _unexpected(exc)
    if code == 5:
        from dppca_dask.coordinator.client import cluster_lost_error

        message = str(cluster_lost_error(exc, "during the run"))
    _json.dump({"job": args.job, "job_id": getattr(args, "resolved_job_id", None), "date": args.date,
                "status": FAILURE_STATUS.get(code, "error"), "exit_code": code, "error": message,
                "error_type": type(exc).__name__})


def _run(args: argparse.Namespace) -> int:
    from dppca_dask.jobs import load_job, run_job

    overrides = list(args.overrides)
    if args.job_id:
        overrides.append(f"job.id={json.dumps(args.job_id)}")
    if args.scheduler:
        overrides.append(f"cluster.address={json.dumps(args.scheduler)}")
    if args.executor is not None:
        overrides.append(f"cluster.executor={json.dumps(args.executor)}")
    spec = load_job(args.job, overrides=overrides)
    with contextlib.suppress(Exception):  # for the JSON object of a run that fails (a bad date fails later)
        from dppca_dask.jobs.runner import today

        args.resolved_job_id = spec.job_id(args.date or today())
    if args.dry_run:
        return _dry_run(spec, args)
    outcome = run_job(spec, date=args.date, allow_new_store=args.allow_new_store)
    if args.json:
        from dppca_dask.cli import _json

        _json.dump({**outcome.to_dict(), "exit_code": 0})
        return 0
    result = outcome.result
    report = result.privacy
    if outcome.status == "already-completed":
        print(f"job {outcome.job_id}: already completed; nothing released or charged again")
    else:
        extra = f" (resumed after {outcome.resumed_from} released iterations)" if outcome.resumed_from else ""
        print(f"job {outcome.job_id}: {outcome.status}{extra}")
    print(f"mechanism: {result.mechanism}")
    if result.private:
        print(f"privacy: ({report.epsilon:.4g}, {report.delta:.3g})-differentially private for neighbours differing "
              f"by {report.neighbouring}")
    else:
        print("privacy: NOT differentially private (seeded run)")
    entry = outcome.ledger_entry
    if outcome.partitions:
        for line in _partition_lines(spec, outcome.partitions):
            print(line)
    else:
        print(f"ledger: {redact(spec.budget.ledger)} dataset '{entry.dataset}': {entry.status} (epsilon={entry.epsilon:g}, "
              f"delta={entry.delta:g}); see `dppca-dask budget show --ledger {redact(spec.budget.ledger)}`")
    print(f"result: {outcome.output}")
    return 0


#: A window job's summary lists its partition keys up to this many; beyond, the count, the first and the last
#: (``--json`` lists each).
LISTED_KEYS = 10


def _partition_lines(spec: Any, partitions: Any) -> list[str]:
    """What a partition-scoped (sliding-window) job was charged: every partition key it is charged to, each with
    its partition's timestamp (public), as its JSON outcome's ``partition_keys`` gives them."""
    entries = [p.entry for p in partitions]
    statuses = sorted({e.status if e.status == "reserved" else f"{e.status} ({e.outcome})" for e in entries})
    figures = sorted({(e.epsilon, e.delta) for e in entries})
    charge = (f"epsilon={figures[0][0]:g}, delta={figures[0][1]:g} on each" if len(figures) == 1
              else "epsilon and delta per key in --json")
    lines = [f"ledger: {redact(spec.budget.ledger)} dataset '{spec.budget.dataset}': {', '.join(statuses)} on "
             f"{len(partitions)} partition key(s) ({charge}); see `dppca-dask budget show --ledger "
             f"{redact(spec.budget.ledger)}`"]
    if len(partitions) <= LISTED_KEYS:
        lines += [f"  {p.label()}" for p in partitions]
    else:
        lines += [f"  {partitions[0].label()}", f"  ... ({len(partitions) - 2} more; --json lists each)",
                  f"  {partitions[-1].label()}"]
    return lines


def _dry_run(spec: Any, args: argparse.Namespace) -> int:
    from dppca_dask.jobs.dry_run import dry_run_job

    checked = dry_run_job(spec, date=args.date, allow_new_store=args.allow_new_store)
    if args.json:
        from dppca_dask.cli import _json

        _json.dump({**checked.to_dict(), "exit_code": 0})
        return 0
    print(f"job {checked.job_id}: dry run: {checked.status.replace('-', ' ')}; nothing was reserved or released")
    print(f"mechanism: {checked.mechanism} (epsilon={checked.epsilon:g}, delta={checked.delta:g}"
          f"{f', neighbours differing by {checked.neighbouring}' if checked.neighbouring else ''})")
    if checked.remaining_epsilon_after is not None:
        print(f"budget: fits; dataset '{checked.dataset}' would have epsilon {checked.remaining_epsilon_after:.4g} "
              f"left (indicative) in ledger {redact(spec.budget.ledger)}")
    if checked.parameters:
        print("parameters: " + ", ".join(f"{k}={v}" for k, v in sorted(checked.parameters.items())))
    for line in checked.releases:
        print(f"reserves: {line}")
    if checked.executor:
        print(f"executor: {checked.executor['executor']} ([cluster] executor = \"{checked.executor['asked']}\": "
              f"{checked.executor['reason']})")
    if checked.layer is not None:
        print(f"data: layer '{checked.layer}' of {spec.data.ingest['source']} ([data.ingest] layer)")
    for note in checked.notes:
        print(f"note: {note}")
    print(f"result would be written to: {checked.output}")
    return 0
