"""``dppca-dask budget``: create a privacy-budget ledger (``init``), inspect it (``show``, read-only) and return a
stale reservation of a job that released nothing (``resolve``)."""

from __future__ import annotations

import argparse
import math
from typing import Any

__all__ = ["register"]

#: One line for ``dppca-dask --help`` (read without registering the command).
SUMMARY = "create or inspect a privacy-budget ledger"

_RELATIONS = {
    "add-remove-row": "add/remove one row",
    "replace-row": "replace one row",
}


def _relation(value: str) -> str:
    """``--relation``: a short name, ``entry:B``, ``row:S``, or the relation's full text."""
    from dppca_dask.methods.hardt_roth.relations import entry_relation, row_change_relation
    from dppca_dask.errors import InvalidParameterError

    if value in _RELATIONS:
        return _RELATIONS[value]
    for prefix, make in (("entry:", entry_relation), ("row:", row_change_relation)):
        if value.startswith(prefix):
            try:
                bound = float(value[len(prefix):])
            except ValueError:
                bound = math.nan
            if not (math.isfinite(bound) and bound > 0):
                raise InvalidParameterError(
                    f"--relation {value!r}: the bound after '{prefix}' must be a finite number > 0, e.g. {prefix}1"
                )
            return make(bound)
    if value in _RELATIONS.values() or value.startswith(("one entry changes", "one row changes")):
        return value
    raise InvalidParameterError(
        f"--relation must be one of {', '.join(_RELATIONS)}, entry:B (one entry changes by at most B) or row:S (one "
        f"row changes by a vector of L2 norm at most S); got {value!r}"
    )


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("budget", help=SUMMARY,
                              description="Create, inspect, repair or migrate a privacy-budget ledger.")
    sub = p.add_subparsers(dest="budget_command", metavar="ACTION", required=True)

    init = sub.add_parser(
        "init", help="create a ledger (if missing) and give a dataset key its total budget",
        description="Create the ledger file (owner-only) if it does not exist, and record a dataset key's total "
                    "(epsilon, delta) and, optionally, the neighbouring relation its budget is stated for. Jobs "
                    "never create a ledger or a dataset key. Running it again with the same values does nothing.")
    init.add_argument("--ledger", required=True, help="the ledger: a SQLite file, or a postgresql:// URL")
    init.add_argument("--dataset", required=True, help="the dataset key (one per set of people)")
    init.add_argument("--total-epsilon", type=float, required=True, help="the key's total epsilon")
    init.add_argument("--total-delta", type=float, required=True, help="the key's total delta")
    init.add_argument("--relation", default=None, type=str,
                      help="the neighbouring relation of the budget: add-remove-row, replace-row, entry:B or row:S "
                           "(default: the relation of the first job reserved)")
    init.set_defaults(handler=run_init)

    show = sub.add_parser("show", help="totals, spent, remaining and the history of each dataset",
                          description="Totals, spent (PLD composition of the stored DpEvents, with the sum of "
                                      "epsilon beside it), remaining and the history of each dataset. Read-only.")
    show.add_argument("--ledger", required=True, help="the ledger: a SQLite file, or a postgresql:// URL")
    show.add_argument("--dataset", default=None, help="one dataset key (default: all)")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(handler=run_show)

    resolve = sub.add_parser(
        "resolve", help="return a stale reservation of a job that released nothing",
        description="Return the reservation of a job id left 'reserved' by a run that died or failed before "
                    "releasing anything (no checkpoint, no result). Refused when the ledger records a release or a "
                    "charge: that budget stays spent.")
    resolve.add_argument("--ledger", required=True, help="the ledger: a SQLite file, or a postgresql:// URL")
    resolve.add_argument("--job-id", required=True, help="the job id, ID@DATE")
    resolve.add_argument("--dataset", default=None, help="the dataset key (needed if the job id is in several)")
    resolve.set_defaults(handler=run_resolve)

    migrate = sub.add_parser(
        "migrate", help="convert a ledger of an earlier schema to per-partition books (in place)",
        description="Convert a ledger written by an earlier version (schema 1 or 2, where window releases kept "
                    "partition keys of their own) to one set of books per dataset, kept per partition, in one "
                    "transaction. Whole-store releases count against every partition; a window release's partition "
                    "keys become its charges on those partitions, by their day when their store is given with "
                    "--store (its public partition table is read), else on every partition. Back the ledger up "
                    "first. A ledger already converted is left as it is.")
    migrate.add_argument("--ledger", required=True, help="the ledger: a SQLite file, or a postgresql:// URL")
    migrate.add_argument("--store", action="append", default=[], metavar="STORE",
                         help="a store the dataset's window releases read (repeatable)")
    migrate.set_defaults(handler=run_migrate)


def run_init(args: argparse.Namespace) -> int:
    from dppca_dask.ledger import Ledger, _check_total

    relation = None if args.relation is None else _relation(args.relation)
    _check_total(args.total_epsilon, args.total_delta)  # before anything is created
    created = not Ledger.exists(args.ledger)
    ledger = Ledger.create(args.ledger) if created else Ledger(args.ledger)
    new = ledger.init_dataset(args.dataset, total_epsilon=args.total_epsilon, total_delta=args.total_delta,
                              neighbouring=relation)
    print(f"ledger {ledger.path}: {'created' if created else 'exists'}")
    print(f"dataset '{args.dataset}': {'budget recorded' if new else 'already recorded with these values'} "
          f"(total epsilon={args.total_epsilon:g}, delta={args.total_delta:g}"
          + (f", neighbours differ by {relation})" if relation else ")"))
    return 0


def run_resolve(args: argparse.Namespace) -> int:
    from dppca_dask.errors import LedgerError
    from dppca_dask.ledger import RESERVED, Ledger

    ledger = Ledger(args.ledger)
    entries = [e for e in ledger.find(args.job_id) if args.dataset in (None, e.dataset)]
    if not entries:
        raise LedgerError(f"job id '{args.job_id}' has no entry in ledger '{ledger.path}'"
                          + (f" for dataset '{args.dataset}'" if args.dataset else ""))
    if len(entries) > 1:
        keys = ", ".join(e.dataset for e in entries)
        raise LedgerError(f"job id '{args.job_id}' has entries for several datasets ({keys}); give --dataset")
    entry = entries[0]
    if entry.status != RESERVED:
        raise LedgerError(f"job '{args.job_id}' of dataset '{entry.dataset}' is {entry.status} ({entry.outcome}), "
                          "not a stale reservation; nothing to resolve")
    from dppca_dask.jobs.steps import job_lock

    with job_lock(ledger, entry.dataset, args.job_id):  # refused while a run of the job holds it
        done = ledger.release(entry.dataset, args.job_id, outcome="resolved")
    print(f"job {args.job_id}: reservation of (epsilon={done.epsilon:g}, delta={done.delta:g}) on dataset "
          f"'{done.dataset}' returned (no release was recorded)")
    return 0


def run_migrate(args: argparse.Namespace) -> int:
    from dppca_dask.ledger import Ledger

    for line in Ledger.migrate(args.ledger, stores=args.store):
        print(line)
    return 0


def run_show(args: argparse.Namespace) -> int:
    from dppca_dask.ledger import Ledger, describe_partition

    ledger = Ledger(args.ledger, read_only=True)
    keys = [args.dataset] if args.dataset else ledger.datasets()
    budgets = [ledger.budget(key) for key in keys]
    if args.json:
        from dppca_dask.cli import _json

        _json.dump({"ledger": ledger.path, "datasets": [b.to_dict() for b in budgets]})
        return 0
    print(f"ledger {ledger.path}: {len(budgets)} dataset(s)")
    for b in budgets:
        print()
        relation = (f"neighbours differ by {b.neighbouring}" if b.neighbouring
                    else "neighbouring relation not yet recorded")
        worst = "no release yet" if b.worst_partition is None else describe_partition(b.worst_partition)
        print(f"dataset '{b.dataset}': worst-off partition epsilon={b.spent_epsilon:.4g} of {b.total_epsilon:g} "
              f"({worst})")
        print(f"  ({relation}; store {b.store_id or 'not yet recorded'})")
        print(f"  total      epsilon={b.total_epsilon:g}  delta={b.total_delta:g}")
        print(f"  spent      epsilon={b.spent_epsilon:.4g} on the worst-off partition (PLD composition at "
              f"delta={b.total_delta:g}; sum of epsilon {b.sum_epsilon:.4g}, sum of delta {b.sum_delta:.3g})")
        print(f"  remaining  epsilon={b.remaining_epsilon:.4g} (indicative: a request is checked by composition on "
              "every partition it reads)")
        _print_partitions(b)
        if not b.entries:
            print("  history    (none)")
            continue
        print("  history:")
        header = f"    {'job id':<32} {'time (UTC)':<25} {'mechanism':<20} {'epsilon':>8} {'delta':>8}  status"
        print(header)
        for e in b.entries:
            if e.partitions and e.partitions != ("*",):
                status_parts = f", {len(e.partitions)} partition(s)"
            else:
                status_parts = ", every partition" if e.partitions else ""
            status = e.status if e.status == "reserved" else f"{e.status} ({e.outcome})"
            if e.attempts > 1:
                status += f", {e.attempts} attempts"
            if e.group_size > 1:
                status += f", counted x{e.group_size} (group privacy)"
            status += status_parts
            print(f"    {e.job_id:<32} {e.updated:<25} {e.mechanism:<20} {e.epsilon:>8.4g} {e.delta:>8.2g}  {status}")
    return 0


def _print_partitions(b: Any, *, limit: int = 12) -> None:
    """Each partition's composed epsilon, worst first (the ``limit`` worst; the count of the others)."""
    from dppca_dask.ledger import describe_partition

    if not b.partitions:
        return
    ranked = sorted(b.partitions, key=lambda p: (-p.spent_epsilon, p.partition))
    print(f"  partitions ({len(ranked)}, worst first):")
    for p in ranked[:limit]:
        print(f"    {describe_partition(p.partition):<28} epsilon={p.spent_epsilon:<10.4g} "
              f"({p.entries} release(s); sum of epsilon {p.sum_epsilon:.4g})")
    if len(ranked) > limit:
        print(f"    ... {len(ranked) - limit} more (--json lists them all)")
