"""One progress bar for a whole private run (issue 36: the progress restarted every iteration): it counts the
partitions each pass reads, never goes back, and ends at the run's passes x partitions (public counts only)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from tqdm import tqdm

import dppca_dask
from dppca_dask import _progress
from dppca_dask.coordinator import run as run_module
from dppca_dask.storage import write_matrix


class _Recorded:
    def __init__(self) -> None:
        self.bars: list[tqdm] = []
        self.seen: list[list[tuple[int, float]]] = []

    def progress_bar(self, *, total: int | None, desc: str, unit: str = "it", enabled: bool | None = None,
                     **kwargs: Any) -> tqdm:
        bar = tqdm(total=total, desc=desc, unit=unit, file=io.StringIO(), **kwargs)
        seen: list[tuple[int, float]] = []
        update = bar.update

        def recorded(n: float = 1) -> Any:
            out = update(n)
            seen.append((bar.n, bar.total))
            return out

        bar.update = recorded  # type: ignore[method-assign]
        self.bars.append(bar)
        self.seen.append(seen)
        return bar


def _run(tmp_path: Path, matrix: sp.csr_array, monkeypatch: pytest.MonkeyPatch, client: Any,
         name: str) -> tuple[_Recorded, list[int]]:
    store = write_matrix(tmp_path / f"{name}.zarr", matrix, rows_per_partition=50, schema="declared")
    recorded = _Recorded()
    monkeypatch.setattr(_progress, "progress_bar", recorded.progress_bar)
    passes: list[int] = []
    original = run_module.run_algorithm

    def counting(executor: Any, run: Any, on_pass: Any = None) -> Any:
        def both(n: int) -> None:
            passes.append(n)
            on_pass(n)

        return original(executor, run, both if on_pass is not None else None)

    monkeypatch.setattr("dppca_dask._execution.run_algorithm", counting)  # what the entry points run
    dppca_dask.pca(store, n_components=1, epsilon=1.0, delta=1e-6, mechanism="adaptive-power", n_iter=4,
                   client=client, seed=3, progress=True)
    monkeypatch.undo()
    return recorded, passes


@pytest.mark.parametrize("executor", ["local", "cluster"])
def test_one_bar_over_the_runs_passes(tmp_path: Path, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch,
                                      local_client: Any, executor: str) -> None:
    matrix = sp.csr_array(sp.random(200, 10, density=0.3, random_state=rng, format="csr"))  # 4 partitions
    client = "local" if executor == "local" else local_client
    recorded, passes = _run(tmp_path, matrix, monkeypatch, client, "a")
    assert len(recorded.bars) == 1  # one bar for the run, not one per iteration
    seen = recorded.seen[0]
    counts = [n for n, _ in seen]
    assert counts == sorted(counts) and all(n <= total for n, total in seen)  # never restarts, never overflows
    assert len(passes) >= 4 and set(passes) == {4}  # every pass read the 4 partitions
    assert recorded.bars[0].n == recorded.bars[0].total == sum(passes)
    # A neighbouring dataset (one row removed): each pass still adds the partition count, the only number the bar
    # takes from a pass (how many passes a run makes follows from its released values).
    neighbour = sp.csr_array(matrix[1:])
    again, neighbour_passes = _run(tmp_path, neighbour, monkeypatch, client, "b")
    assert set(neighbour_passes) == {4} and again.bars[0].n == again.bars[0].total == sum(neighbour_passes)
