"""What the scheduler (and its dashboard, task stream and performance reports) is told about the size of a kernel's
aggregate must not depend on the data (privacy invariants 3 and 8).

Dask asks ``dask.sizeof.sizeof`` for the size of every task result and shows it: per key on the dashboard, as
``nbytes`` in every task-stream record. A power step's aggregate holds the contributions of the partition's
highest-scoring rows as a sparse matrix whose stored entries are the columns those rows touch, and integers
(cuts, row counts) whose Python size depends on their value. Reported exactly, the size would tell the number of
distinct columns of the rows the filter is about, on every step, un-noised. The aggregates therefore report a
size computed from their public shapes only (grid, d, k, the partitions merged).

Neighbours here: rows on four columns, and the same rows plus one dense row of the largest score (clipped to the
bound), which adds every other column to the top rows' contributions. Deterministic (no statistical assertion).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
from dask.sizeof import sizeof

import dppca_dask
import dppca_dask._sizeof  # noqa: F401 (the registrations every worker makes when it runs a kernel)
from dppca_dask.kernels import ThresholdGrid, power_partial
from dppca_dask.kernels import block as B
from dppca_dask.kernels.power import merge_power_partials
from dppca_dask.storage import row_norms_of, write_matrix

N_COLS = 40
ROWS_PER_PARTITION = 50


def _base(rng: np.random.Generator, n_rows: int = 199) -> sp.csr_array:
    dense = np.zeros((n_rows, N_COLS))
    dense[:, :4] = rng.uniform(-0.2, 0.2, (n_rows, 4))
    return sp.csr_array(dense)


def _with_heavy_row(base: sp.csr_array) -> sp.csr_array:
    return sp.csr_array(sp.vstack([base, sp.csr_array(np.full((1, N_COLS), 5.0))], format="csr"))


def _unit(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.standard_normal(shape)
    if x.ndim == 1:
        return x / np.linalg.norm(x)
    return np.linalg.qr(x)[0]


def test_kernel_aggregates_report_the_same_size_on_neighbours(rng: np.random.Generator) -> None:
    base = _base(rng)
    neighbour = _with_heavy_row(base)
    grid = ThresholdGrid.for_bound(1.0)
    x, xb = np.full(N_COLS, 1.0 / np.sqrt(N_COLS)), _unit(rng, (N_COLS, 3))
    sizes, stored = [], []
    for block in (base, neighbour):
        norms = row_norms_of(block)
        power = power_partial(block, norms, x, partition=0, row_norm_bound=1.0, grid=grid, top_m=10_000)
        other = power_partial(block[:7], norms[:7], x, partition=1, row_norm_bound=1.0, grid=grid, top_m=10_000)
        blocked = B.block_partial(block, norms, xb, partition=0, row_norm_bound=1.0, grid=grid, top_m=10_000)
        stored.append((power.bin_sums.nnz, blocked.bin_sums.nnz))
        sizes.append([sizeof(power), sizeof(merge_power_partials(power, other)), sizeof(blocked),
                      sizeof(B.mean_partial(block, norms, row_norm_bound=1.0)),
                      sizeof(B.variance_partial(block, norms, xb.T, row_norm_bound=1.0)),
                      sizeof(B.norm_counts(norms, np.array([0.5, 1.0, 2.0])))])
    # the neighbours' top rows touch different numbers of columns: an exact size would tell them apart
    assert stored[0][0] < stored[1][0] and stored[0][1] < stored[1][1]
    assert sizes[0] == sizes[1]
    # the sizes still count the dense, public-shaped arrays (the scheduler's estimate stays meaningful)
    assert sizes[0][0] >= grid.n_bins * 8 + N_COLS * 8
    assert sizes[0][2] >= grid.n_bins * 8 + N_COLS * 3 * 8 + grid.n_points * 3 * 8


def test_a_scheduler_records_the_same_result_sizes_on_neighbours(tmp_path: Path, rng: np.random.Generator,
                                                                  local_client: Any, auditing_pair) -> None:
    """Through a real LocalCluster: the ``nbytes`` of every task in the task stream (what the dashboard shows)."""
    from distributed import get_task_stream

    base = _base(rng)
    paths = [write_matrix(tmp_path / f"{name}.zarr", matrix, rows_per_partition=ROWS_PER_PARTITION,
                          schema="declared").path for name, matrix in (("d", base), ("d1", _with_heavy_row(base)))]
    recorded = []
    for path, noise in zip(paths, auditing_pair()):
        with get_task_stream(local_client) as stream:
            dppca_dask.pca(path, epsilon=1.0, delta=1e-6, mechanism="adaptive-power", n_iter=2, persist=False,
                           client=local_client, noise=noise, progress=False)
        recorded.append(sorted((re.sub(r"-[0-9a-f]{8}-", "-<run>-", str(t["key"])), t["nbytes"]) for t in stream.data))
    assert recorded[0] and [name for name, _ in recorded[0]] == [name for name, _ in recorded[1]]
    assert recorded[0] == recorded[1]
