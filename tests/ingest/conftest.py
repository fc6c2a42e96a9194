"""Fixtures for ingestion tests."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from ingest_helpers import make_matrix


@pytest.fixture
def matrix(rng: np.random.Generator) -> sp.csr_array:
    return make_matrix(rng)
