"""Progress reporting: a progress bar on a terminal, nothing otherwise; log lines either way.

Only public values may be passed here (counts of rows written during ingestion, iteration numbers, timings and
released noisy values during a private run): progress output leaves the coordinator.
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm.auto import tqdm

__all__ = ["RunProgress", "in_notebook", "progress_bar"]


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (where ``tqdm.auto`` draws a notebook widget)."""
    if "ipykernel" not in sys.modules:
        return False
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def progress_bar(*, total: int | None, desc: str, unit: str = "it", enabled: bool | None = None, **kwargs: Any) -> Any:
    """A ``tqdm`` bar on standard error when it is a terminal, a notebook widget in Jupyter (``tqdm.auto``), or
    when ``enabled=True``; disabled otherwise."""
    if enabled is None:
        enabled = sys.stderr.isatty() or in_notebook()
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, file=sys.stderr, leave=False,
                dynamic_ncols=True, **kwargs)


class RunProgress:
    """One bar for a whole private run, over its passes: each pass adds the partitions it read.

    A run's length is planned in iterations; its passes per iteration differ by mechanism (an AboveThreshold step
    before a Gaussian one, a quantile or a variance pass). The total starts at ``iterations x partitions`` and,
    after each released iteration, is the passes so far extrapolated over the iterations left: public counts only
    (the plan, the partition count, the passes made, the released iterations), so the bar moves alike on
    neighbouring datasets. It never restarts; it is complete when the run closes it.
    """

    def __init__(self, *, iterations: int, partitions: int, desc: str, enabled: bool | None = None) -> None:
        self.iterations = max(int(iterations), 1)
        self.partitions = max(int(partitions), 1)
        self.released = 0
        self.bar = progress_bar(total=self.iterations * self.partitions, desc=desc, unit="part", enabled=enabled)

    def passed(self, partitions: int) -> None:
        """A pass over ``partitions`` partitions ended."""
        if partitions <= 0:
            return
        if self.bar.n + partitions > self.bar.total:
            self.bar.total = self.bar.n + partitions
        self.bar.update(partitions)

    def iteration(self, theta: float | None = None) -> None:
        """An iteration was released: re-plan the total from the passes per iteration seen so far."""
        self.released += 1
        left = max(self.iterations - self.released, 0)
        self.bar.total = max(self.bar.n + round(left * self.bar.n / self.released), self.bar.n)
        postfix = f"iteration {self.released}/{self.iterations}"
        self.bar.set_postfix_str(postfix + (f", theta={theta:.3g}" if theta is not None else ""))

    def close(self) -> None:
        """The run ended: the bar is complete (what it counted is the run's length)."""
        self.bar.total = self.bar.n
        self.bar.refresh()
        self.bar.close()
