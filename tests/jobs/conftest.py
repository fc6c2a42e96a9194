"""Fixtures for job tests: job specs written to a temporary directory, a generated store, killed runs (the loopback
clusters are the session's, from ``tests/conftest.py``)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

_CLUSTER = str(Path(__file__).resolve().parents[1] / "cluster")
if _CLUSTER not in sys.path:
    sys.path.insert(0, _CLUSTER)

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from jobs_helpers import KilledRuns, declare_schema, init_ledger, render  # noqa: E402


@pytest.fixture
def write_spec(tmp_path: Path) -> Callable[..., Path]:
    """Write a job spec; with ``init=True`` (default) also create its ledger and dataset budget if missing, as
    ``dppca-dask budget init`` does."""
    counter = iter(range(10**6))

    def write(doc: dict[str, dict[str, Any]], *, init: bool = True) -> Path:
        path = tmp_path / f"job-{next(counter)}.toml"
        path.write_text(render(doc))
        if init and not Path(doc["budget"]["ledger"]).exists():
            init_ledger(doc)
        return path

    return write


@pytest.fixture(scope="session")
def kill_at(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KilledRuns]:
    """``kill_at(point, args, tmp_path)``: run ``dppca-dask *args`` in a new process killed at the job runner's kill
    point ``point`` (see ``jobs_helpers.KilledRuns``)."""
    runs = KilledRuns(tmp_path_factory.mktemp("kill-server"))
    try:
        yield runs
    finally:
        runs.close()


@pytest.fixture(scope="session")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A generated low-coherence store: 20,000 x 300, 4 partitions."""
    from dppca_dask.datasets import PlantedSpec, write_low_coherence

    path = tmp_path_factory.mktemp("jobs-data") / "small.zarr"
    spec = PlantedSpec(n_rows=20_000, n_cols=300, nnz_per_row=20, support=40, signal_share=0.02, seed=11)
    write_low_coherence(path, spec, rows_per_partition=5_000, progress=False)
    declare_schema(path)  # its width is public (generated with a declared number of columns)
    return str(path)
