"""Wall-clock timings are not released unless asked for (DESIGN.md: "Timings are not released"; the README:
timings are returned only with ``timings=True``).

A result's provenance holds ``started`` and ``finished`` (UTC, to the second) whatever ``timings`` says: their
difference is the run's wall-clock duration, which grows with the rows and entries read, in every result file.
Known and not fixed here (the fix removes ``finished`` from ``pca``'s, ``lowrank``'s and the window releases'
provenance unless ``timings=True``, and the executor-choice test, which pops both keys, must then pop only
``started``): the test states the contract and is expected to fail until then.
"""

from __future__ import annotations

import numpy as np
import pytest

from dppca_dask import pca
from dppca_dask.mechanisms.testing import AuditingNoiseSource


@pytest.mark.xfail(strict=True, reason="provenance['finished'] is written without timings=True")
def test_no_finishing_time_without_timings(seed: int) -> None:
    rng = np.random.default_rng(seed)
    result = pca(rng.uniform(-0.1, 0.1, (200, 6)), epsilon=1.0, delta=1e-6, mechanism="analyze-gauss",
                 client="local", noise=AuditingNoiseSource(seed), progress=False)
    assert result.timings == {}
    assert "finished" not in result.provenance
