"""``dppca-dask budget show``: what a ledger's datasets have spent, what remains, and the history of jobs."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register"]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("budget", help="inspect a privacy-budget ledger",
                              description="Inspect a privacy-budget ledger (SQLite).")
    sub = p.add_subparsers(dest="budget_command", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="totals, spent, remaining and the history of each dataset",
                          description="Totals, spent (PLD composition of the stored DpEvents, with the sum of "
                                      "epsilon beside it), remaining and the history of each dataset.")
    show.add_argument("--ledger", required=True, help="the ledger file")
    show.add_argument("--dataset", default=None, help="one dataset key (default: all)")
    show.add_argument("--json", action="store_true", help="print one JSON object")
    show.set_defaults(handler=run_show)


def run_show(args: argparse.Namespace) -> int:
    from dppca_dask.ledger import Ledger

    ledger = Ledger(args.ledger, create=False)
    keys = [args.dataset] if args.dataset else ledger.datasets()
    budgets = [ledger.budget(key) for key in keys]
    if args.json:
        json.dump({"ledger": args.ledger, "datasets": [b.to_dict() for b in budgets]}, sys.stdout)
        sys.stdout.write("\n")
        return 0
    print(f"ledger {args.ledger}: {len(budgets)} dataset(s)")
    for b in budgets:
        print()
        print(f"dataset '{b.dataset}' (neighbours differ by {b.neighbouring or 'not yet recorded'})")
        print(f"  total      epsilon={b.total_epsilon:g}  delta={b.total_delta:g}")
        print(f"  spent      epsilon={b.spent_epsilon:.4g} (PLD composition at delta={b.total_delta:g}; "
              f"sum of epsilon {b.sum_epsilon:.4g}, sum of delta {b.sum_delta:.3g})")
        print(f"  remaining  epsilon={b.remaining_epsilon:.4g} (indicative: a request is checked by composition)")
        if not b.entries:
            print("  history    (none)")
            continue
        print("  history:")
        header = f"    {'job id':<32} {'time (UTC)':<25} {'mechanism':<20} {'epsilon':>8} {'delta':>8}  status"
        print(header)
        for e in b.entries:
            status = e.status if e.status == "reserved" else f"{e.status} ({e.outcome})"
            if e.attempts > 1:
                status += f", {e.attempts} attempts"
            print(f"    {e.job_id:<32} {e.updated:<25} {e.mechanism:<20} {e.epsilon:>8.4g} {e.delta:>8.2g}  {status}")
    return 0
