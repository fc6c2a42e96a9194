"""Processes racing for a budget (``test_ledger.test_processes_racing_for_a_budget_never_overspend``), in a module of
its own: a spawned process imports only this and the ledger, not the test module's imports."""

from __future__ import annotations

ROW = "add/remove one row"


def race_worker(path: str, job: str, barrier: object, results: object) -> None:
    """Wait at ``barrier`` with the other processes, then reserve (0.3, 0) of dataset ``ds`` in the ledger at
    ``path`` and put ``(job, "reserved" | "refused")`` on ``results``."""
    from dppca_dask.accounting import EpsilonDeltaDpEvent as Event
    from dppca_dask.errors import BudgetExceededError as Refused
    from dppca_dask.ledger import Ledger as L

    ledger = L(path)
    barrier.wait()  # type: ignore[attr-defined]
    try:
        ledger.reserve("ds", job, epsilon=0.3, delta=0.0, events=[Event(0.3)], mechanism="race", neighbouring=ROW,
                       total_epsilon=1.0, total_delta=1e-6)
        results.put((job, "reserved"))  # type: ignore[attr-defined]
    except Refused:
        results.put((job, "refused"))  # type: ignore[attr-defined]


def race(path: str, n_processes: int, report: object) -> None:
    """Start ``n_processes`` processes running :func:`race_worker` (jobs ``job-0``, ``job-1``, ...) against the
    ledger at ``path`` and put ``(outcomes, exit codes)`` on ``report``.

    Run it in a new (spawned) process: it imports the ledger once and forks the racing processes from there, each a
    process of its own with its own connection to the ledger, without importing the package again (forking is
    safe here: this process has started no thread)."""
    import multiprocessing

    import dppca_dask.accounting  # noqa: F401  (imported once, before forking)
    import dppca_dask.errors  # noqa: F401
    import dppca_dask.ledger  # noqa: F401

    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(n_processes), ctx.Queue()
    procs = [ctx.Process(target=race_worker, args=(path, f"job-{i}", barrier, results)) for i in range(n_processes)]
    for p in procs:
        p.start()
    outcomes = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    report.put((outcomes, [p.exitcode for p in procs]))  # type: ignore[attr-defined]
