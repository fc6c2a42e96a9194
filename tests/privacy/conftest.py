"""Fixtures of the neighbouring-datasets tests (see ``privacy_harness``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dppca_dask.mechanisms.testing import AuditingNoiseSource


@pytest.fixture
def auditing_pair(seed: int) -> Callable[[], tuple[AuditingNoiseSource, AuditingNoiseSource]]:
    """Two auditing sources with the same seed (one per neighbour)."""

    def make() -> tuple[AuditingNoiseSource, AuditingNoiseSource]:
        return AuditingNoiseSource(seed), AuditingNoiseSource(seed)

    return make
