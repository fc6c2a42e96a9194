"""Fixtures of the Hardt–Roth mechanism tests."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hr_helpers import RecordingNoiseSource

from dppca_dask.accounting import CACHE_DIR_ENV, clear_memory_cache
from dppca_dask.mechanisms import NoiseSource


@pytest.fixture
def recording(seed: int) -> Callable[[], RecordingNoiseSource]:
    counter = iter(range(10_000))
    return lambda: RecordingNoiseSource(seed * 10_000 + next(counter))


@pytest.fixture
def seeded_noise(seed: int) -> Callable[[int], NoiseSource]:
    def make(offset: int = 0) -> NoiseSource:
        with warnings.catch_warnings():
            from dppca_dask.errors import NotPrivateWarning
            warnings.simplefilter("ignore", NotPrivateWarning)
            warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
            return NoiseSource.from_seed(seed * 1000 + offset)

    return make


@pytest.fixture(autouse=True)
def isolated_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    directory = tmp_path / "cache"
    monkeypatch.setenv(CACHE_DIR_ENV, str(directory))
    clear_memory_cache()
    yield directory
    clear_memory_cache()
