"""The body of a process racing for a budget (``test_ledger.test_processes_racing_for_a_budget_never_overspend``),
in a module of its own: a spawned process imports only this and the ledger, not the test module's imports."""

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
