"""Where a run executes (in this process or on a cluster) depends on public values only (privacy invariant 8).

Two neighbouring stores, one with an extra row that is as heavy as it can be (every column set, large values: many
more stored entries and bytes), with the same declared width and partition count, must make the same executor
decision and write the same provenance, with the same releases within their sensitivities. The limits are set
right at the neighbours' partition count, so a decision that read the rows, the entries or the bytes would be
the first to tip over.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import dask.config
import numpy as np
import scipy.sparse as sp

import dppca_dask
from dppca_dask.coordinator.client import choose_executor
from dppca_dask.storage import open_matrix, write_matrix
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
