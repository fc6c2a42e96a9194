"""Wall-clock timings are not released unless asked for (DESIGN.md: "Timings are not released"; docs/privacy.md:
timings are returned only with ``timings=True``).

A result's provenance holds ``started`` (UTC, to the second); a finishing time beside it would give the run's
wall-clock duration, which grows with the rows and entries read, in every result file. So ``finished`` is written
only with ``timings=True`` (``pca``, ``lowrank``), and never by the window releases, which return no timings.
"""

from __future__ import annotations

import numpy as np
import pytest

from dppca_dask import pca
from dppca_dask.mechanisms.testing import AuditingNoiseSource


def test_no_finishing_time_without_timings(seed: int) -> None:
    rng = np.random.default_rng(seed)
    result = pca(rng.uniform(-0.1, 0.1, (200, 6)), epsilon=1.0, delta=1e-6, mechanism="analyze-gauss",
                 client="local", noise=AuditingNoiseSource(seed), progress=False)
    assert result.timings == {}
    assert "finished" not in result.provenance
    timed = pca(rng.uniform(-0.1, 0.1, (200, 6)), epsilon=1.0, delta=1e-6, mechanism="analyze-gauss",
                client="local", noise=AuditingNoiseSource(seed), progress=False, timings=True)
    assert timed.timings and "finished" in timed.provenance


def test_no_finishing_time_in_lowrank_without_timings(seed: int) -> None:
    from dppca_dask.api import lowrank

    rng = np.random.default_rng(seed)
    result = lowrank(rng.uniform(-0.1, 0.1, (200, 6)), rank=2, epsilon=1.0, delta=1e-6,
                     noise=AuditingNoiseSource(seed))
    assert "finished" not in result.provenance
