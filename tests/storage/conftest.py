"""Fixtures for store tests: seeded matrices and tiny zarr chunks (so small stores have many chunk files)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.storage import _format


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    """16 stored values per chunk of ``data``/``indices`` for stores written in this test."""
    monkeypatch.setattr(_format, "NNZ_CHUNK", 16)
    return 16


@pytest.fixture
def sparse(rng: np.random.Generator) -> sp.csr_array:
    """40 x 6 CSR with an all-zero row (5) and all-zero rows 10-19 (an empty partition at 10 rows each)."""
    dense = rng.standard_normal((40, 6)) * (rng.random((40, 6)) < 0.5)
    dense[5] = 0.0
    dense[10:20] = 0.0
    dense[:, 0] += (rng.random(40) < 0.3) * 1.5  # some entries in every partition but the empty one
    dense[10:20] = 0.0
    return sp.csr_array(dense)
