"""Every release reaches the checkpoint before anything else shows it (privacy invariant 2).

A job writes each released state to its checkpoint from ``on_release``; a re-run after a crash resumes from the
last checkpoint and draws again only the releases after it. That is sound only if nothing outside the process saw
a release the checkpoint does not hold: a crash between the noise draw and the checkpoint must leave no trace of
the drawn value. Here the log lines of every release (the released iteration and its θ) are recorded together
with the checkpoints, in order: each line must come after the checkpoint of the release it reports. Sequential and
block adaptive power, and ``auto`` (whose pilot and chosen run checkpoint the same way). Deterministic (seeded).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import numpy as np
import pytest

from dppca_dask import pca
from dppca_dask.datasets import PlantedSpec, low_coherence_matrix
from dppca_dask.mechanisms.testing import AuditingNoiseSource


class _Recorder(logging.Handler):
    def __init__(self, order: list[tuple[str, Any]]) -> None:
        super().__init__(level=logging.DEBUG)
        self.order = order

    def emit(self, record: logging.LogRecord) -> None:
        self.order.append(("log", record.getMessage()))


@pytest.mark.parametrize(("mechanism", "n_components"), [("adaptive-power", 1), ("adaptive-power-block", 2),
                                                         ("auto", 2)])
def test_each_release_is_checkpointed_before_it_is_logged(seed: int, mechanism: str, n_components: int) -> None:
    spec = PlantedSpec(n_rows=4_000, n_cols=30, nnz_per_row=8, support=10, signal_share=0.02, seed=seed % 1000)
    order: list[tuple[str, Any]] = []

    def checkpoint(state: Any, events: tuple[Any, ...]) -> None:
        thresholds = [t for row in state.thresholds for t in row]
        order.append(("checkpoint", (getattr(state, "pending_index", None), thresholds[-1] if thresholds else None)))

    recorder = _Recorder(order)
    logger = logging.getLogger("dppca_dask")
    previous = logger.level
    logger.addHandler(recorder)
    logger.setLevel(logging.DEBUG)
    try:
        pca(low_coherence_matrix(spec), epsilon=1.0, delta=1e-6, mechanism=mechanism, n_components=n_components,
            n_iter=3, client="local", noise=AuditingNoiseSource(seed), progress=False, on_release=checkpoint)
    finally:
        logger.removeHandler(recorder)
        logger.setLevel(previous)
    lines = [(i, m) for i, (kind, m) in enumerate(order) if kind == "log" and m.startswith("released iteration")]
    assert len(lines) >= 3
    for i, message in lines:
        # right before the line: the checkpoint of the Gaussian release it reports (not its threshold step's,
        # nor another line), holding the θ the line shows
        theta = float(re.search(r"theta=([0-9.e+-]+)", message).group(1))
        kind, value = order[i - 1]
        assert kind == "checkpoint", (message, order[i - 1])
        pending, last = value
        assert pending is None and last is not None and np.isclose(last, theta, rtol=1e-3), (message, value)
