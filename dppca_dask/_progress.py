"""Progress reporting: a progress bar on a terminal, nothing otherwise; log lines either way.

Only public values may be passed here (counts of rows written during ingestion, iteration numbers, timings and
released noisy values during a private run): progress output leaves the coordinator.
"""

from __future__ import annotations

import sys
from typing import Any

from tqdm.auto import tqdm

__all__ = ["progress_bar"]


def progress_bar(*, total: int | None, desc: str, unit: str = "it", enabled: bool | None = None, **kwargs: Any) -> Any:
    """A ``tqdm`` bar on standard error when it is a terminal (or when ``enabled=True``); disabled otherwise."""
    if enabled is None:
        enabled = sys.stderr.isatty()
    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, file=sys.stderr, leave=False,
                dynamic_ncols=True, **kwargs)
