"""Where a run executes (in this process or on a cluster) depends on public values only (privacy invariant 8).

Two neighbouring stores, one with an extra row that is as heavy as it can be (every column set, large values: many
more stored entries and bytes), with the same declared width and partition count, must make the same executor
decision and write the same provenance, with the same releases within their sensitivities. The limits are set
right at the neighbours' partition count, so a decision that read the rows, the entries or the bytes would be
the first to tip over. Every entry that releases (``pca``, ``lowrank``, ``window``, ``topics``) makes the choice,
and an in-process run submits the same tasks, under the same names, as a run on a LocalCluster.
"""

from __future__ import annotations

import datetime as _dt
import inspect
import re
from pathlib import Path
from typing import Any

import dask.config
import numpy as np
import scipy.sparse as sp

import pytest

import dppca_dask
from dppca_dask.coordinator.client import InProcessClient, choose_executor
from dppca_dask.ingest import ingest
from dppca_dask.storage import append_partition, open_matrix, write_matrix
from privacy_harness import assert_within_sensitivity

N_COLS = 24
ROWS_PER_PARTITION = 50


def neighbours(tmp_path: Path, rng: np.random.Generator) -> tuple[str, str]:
    dense = rng.uniform(-0.2, 0.2, (199, N_COLS)) * (rng.random((199, N_COLS)) < 0.1)
    base = sp.csr_array(dense)
    heavy = sp.csr_array(np.full((1, N_COLS), 50.0))  # clipped to the bound; changes nnz and bytes a lot
    small = write_matrix(tmp_path / "d.zarr", base, rows_per_partition=ROWS_PER_PARTITION, schema="declared")
    large = write_matrix(tmp_path / "d1.zarr", sp.vstack([base, heavy], format="csr"),
                         rows_per_partition=ROWS_PER_PARTITION, schema="declared")
    assert small.n_partitions == large.n_partitions == 4 and large.nnz - small.nnz == N_COLS
    return str(small.path), str(large.path)


def test_the_choice_reads_only_public_values() -> None:
    # The signature is the contract: the caller's client, the asked executor, the width and the partition count.
    assert list(inspect.signature(choose_executor).parameters) == ["client", "executor", "n_cols", "n_partitions"]


def test_neighbours_make_the_same_choice_and_provenance(tmp_path: Path, rng: np.random.Generator,
                                                        auditing_pair) -> None:
    small, large = neighbours(tmp_path, rng)
    a, b = auditing_pair()
    limits = {"dppca_dask.executor.in-process-max-partitions": 4,
              "dppca_dask.executor.in-process-max-columns": N_COLS,
              "dppca_dask.cluster.use-active-client": False}
    with dask.config.set(limits):
        for path in (small, large):
            store = open_matrix(path)
            choice = choose_executor(None, "auto", n_cols=store.n_cols, n_partitions=store.n_partitions)
            assert choice.executor == "in-process"
        results = [dppca_dask.pca(path, epsilon=1.0, delta=1e-6, n_iter=4, noise=noise)
                   for path, noise in ((small, a), (large, b))]
    assert_within_sensitivity(a.records, b.records)
    public = []
    for result in results:
        provenance = dict(result.provenance)
        provenance.pop("started")
        provenance["input"] = {k: v for k, v in provenance["input"].items() if k != "fingerprint"}
        public.append(provenance)
    assert public[0] == public[1]
    assert public[0]["executor"] == "in-process"


# ------------------------------------------------------------------------------- every entry that releases
ENTRIES = ("pca", "lowrank", "window", "topics")
#: A row of the second neighbour: every column set, large whole counts (clipped, or bounded by the topic model's
#: per-document normalisation); the first neighbour has an empty row there (nothing stored for it).
HEAVY = 50.0
LIMITS = {"dppca_dask.executor.in-process-max-partitions": 4,
          "dppca_dask.executor.in-process-max-columns": N_COLS,
          "dppca_dask.cluster.use-active-client": False}


def _day(n: int) -> float:
    return _dt.datetime(2026, 11, n, tzinfo=_dt.timezone.utc).timestamp()


def stamped_neighbours(tmp_path: Path, rng: np.random.Generator) -> tuple[str, str]:
    """Two stores of four stamped partitions (days 1-4, declared width): row 120 (partition 2) is empty in the first
    and as heavy as it can be in the second. Whole counts, so the topic model reads them as words."""
    counts = rng.poisson(0.4, size=(200, N_COLS)).astype(float)
    counts[120] = 0.0
    heavy = counts.copy()
    heavy[120] = HEAVY
    paths = []
    for name, matrix in (("d", counts), ("d1", heavy)):
        blocks = [sp.csr_array(matrix[i: i + ROWS_PER_PARTITION]) for i in range(0, 200, ROWS_PER_PARTITION)]
        store = ingest(blocks[0], tmp_path / f"{name}.zarr", n_features=N_COLS, timestamp="2026-11-01")
        for day, block in enumerate(blocks[1:], start=2):
            store = append_partition(store.path, block, timestamp=_day(day))
        paths.append(str(store.path))
    small, large = (open_matrix(p) for p in paths)
    assert small.n_partitions == large.n_partitions == 4 and large.nnz - small.nnz == N_COLS
    return paths[0], paths[1]


def release(entry: str, path: str, noise: Any, **kwargs: Any) -> Any:
    """One release of ``entry`` with few steps (the choice, not the utility, is under test)."""
    budget = {"epsilon": 1.0, "delta": 1e-6, "noise": noise, **kwargs}
    if entry == "pca":
        return dppca_dask.pca(path, mechanism="adaptive-power", n_iter=2, center=False, **budget)
    if entry == "lowrank":  # one release; its relation is a row changing, as the empty and the heavy row do
        return dppca_dask.lowrank(path, rank=2, mechanism="randomized-response", **budget)
    if entry == "window":
        return dppca_dask.window(path, last="4D", **budget)
    # enough budget for the 200 documents' whitening to find their moments (a smaller budget releases noise)
    return dppca_dask.topics(path, n_topics=2, n_restarts=1, n_iter=1, pca_iter=1, **{**budget, "epsilon": 8.0})


def public_provenance(result: Any) -> dict[str, Any]:
    """The provenance without its clock times and the stores' own ids (which differ between any two stores)."""
    provenance = dict(result.provenance)
    for key in ("started", "finished"):
        provenance.pop(key, None)
    provenance["input"] = {k: v for k, v in provenance["input"].items() if k not in ("fingerprint", "store_id")}
    return provenance


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_entry_makes_the_same_choice_and_provenance_on_neighbours(
        entry: str, tmp_path: Path, rng: np.random.Generator, auditing_pair) -> None:
    small, large = stamped_neighbours(tmp_path, rng)
    a, b = auditing_pair()
    with dask.config.set(LIMITS):
        results = [release(entry, path, noise) for path, noise in ((small, a), (large, b))]
    assert [r.provenance["executor"] for r in results] == ["in-process", "in-process"]
    assert public_provenance(results[0]) == public_provenance(results[1])
    assert a.records and [(r.release, r.kind, r.exact.shape) for r in a.records] == \
        [(r.release, r.kind, r.exact.shape) for r in b.records]
    if entry != "topics":  # the topic model's later releases follow its released whitening (tests/privacy/
        assert_within_sensitivity(a.records, b.records)  # test_tensor_power.py couples them)


@pytest.mark.parametrize("entry", ENTRIES)
def test_the_limits_are_read_at_the_public_partition_count(entry: str, tmp_path: Path,
                                                           rng: np.random.Generator) -> None:
    # One partition under the neighbours' count: both go to a cluster (the choice alone, nothing is run).
    from dppca_dask._execution import executor_choice as _executor_choice
    from dppca_dask.coordinator import as_source

    small, large = stamped_neighbours(tmp_path, rng)
    with dask.config.set({**LIMITS, "dppca_dask.executor.in-process-max-partitions": 3}):
        choices = {_executor_choice(as_source(open_matrix(p)), None, "auto") for p in (small, large)}
    assert len(choices) == 1 and next(iter(choices)).executor == "cluster"


def _task_names(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record the key of every task the coordinator submits, in this process or to a cluster (the coordinator's
    per-run token replaced by a placeholder)."""
    from distributed import Client

    names: list[str] = []
    for cls in (InProcessClient, Client):
        submit = cls.submit

        def recording(self: Any, func: Any, *args: Any, key: str | None = None, _submit: Any = submit,
                      **kwargs: Any) -> Any:
            names.append(re.sub(r"-[0-9a-f]{8}(?=-|$)", "-TOKEN", str(key)))
            return _submit(self, func, *args, key=key, **kwargs)

        monkeypatch.setattr(cls, "submit", recording)
    return names


@pytest.mark.parametrize("entry", ENTRIES)
def test_the_same_tasks_run_in_process_and_on_a_cluster(entry: str, tmp_path: Path, rng: np.random.Generator,
                                                        local_client: Any, seed: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from dppca_dask.mechanisms.testing import AuditingNoiseSource

    small, _ = stamped_neighbours(tmp_path, rng)
    names = _task_names(monkeypatch)
    runs = {}
    for where, options in (("in-process", {"executor": "local"}), ("cluster", {"client": local_client})):
        names.clear()
        result = release(entry, small, AuditingNoiseSource(seed), **options)
        assert result.provenance["executor"] == where
        runs[where] = list(names)
    assert runs["in-process"] and runs["in-process"] == runs["cluster"]
    assert all(name.startswith("dppca-") for name in runs["in-process"])
