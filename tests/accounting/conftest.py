"""Every accounting test gets its own empty calibration cache (on disk and in memory)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dppca_dask.accounting import CACHE_DIR_ENV, clear_memory_cache


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    directory = tmp_path / "cache"
    monkeypatch.setenv(CACHE_DIR_ENV, str(directory))
    clear_memory_cache()
    yield directory
    clear_memory_cache()
