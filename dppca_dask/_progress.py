"""Progress reporting: a progress bar on a terminal, nothing otherwise; log lines either way.

Only public values may be passed here (counts of rows written during ingestion, iteration numbers, timings and
released noisy values during a private run): progress output leaves the coordinator.
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm.auto import tqdm

__all__ = ["in_notebook", "progress_bar"]


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
