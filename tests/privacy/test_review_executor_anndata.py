"""The executor choice on an AnnData zarr store opened directly reads only public values (privacy invariant 8).

An AnnData store's partitions are not fixed at ingest: opening it sizes them by its stored entries per row
(``nnz / n_rows`` bytes), exactly as an ``.h5ad`` file's blocks are sized. Their count is then private, and the
choice between this process and a cluster, which every result states in ``provenance["executor"]``, must not read
it. Neighbours: light rows, and the same rows plus one row with every column set. With the partition target scaled
down to test size, the neighbours open into 4 and 5 partitions; the in-process limit is set at 4, so a choice that
read the partition count would tip over on one of them. Analyze Gauss releases; deterministic checks.
"""

from __future__ import annotations

from pathlib import Path

import dask.config
import numpy as np
import pytest
import scipy.sparse as sp
import zarr

import dppca_dask
from dppca_dask.errors import InferredSchemaWarning
from dppca_dask.storage import _format, open_matrix
from privacy_harness import assert_within_sensitivity

N_COLS = 40


def _write_anndata(path: Path, matrix: sp.csr_array) -> str:
    """An AnnData zarr store (format 3) whose ``X`` is ``matrix`` as a ``csr_matrix``, one chunk per array."""
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    root.attrs.update({"encoding-type": "anndata", "encoding-version": "0.1.0"})
    x = root.create_group("X", attributes={"encoding-type": "csr_matrix", "encoding-version": "0.1.0",
                                           "shape": list(matrix.shape)})
    for name, values in (("data", matrix.data.astype(np.float64)), ("indices", matrix.indices.astype(np.int32)),
                         ("indptr", matrix.indptr.astype(np.int64))):
        arr = x.create_array(name, shape=values.shape, dtype=values.dtype, chunks=(max(values.size, 1),))
        arr[:] = values
    return str(path)


def test_neighbouring_anndata_stores_run_on_the_same_executor(tmp_path: Path, rng: np.random.Generator,
                                                              monkeypatch: pytest.MonkeyPatch, auditing_pair) -> None:
    dense = np.zeros((200, N_COLS))
    dense[:, :2] = rng.uniform(0.05, 0.2, (200, 2))
    base = sp.csr_array(dense)
    heavy = sp.csr_array(sp.vstack([base, sp.csr_array(np.full((1, N_COLS), 0.1))], format="csr"))
    paths = [_write_anndata(tmp_path / "d.zarr", base), _write_anndata(tmp_path / "d1.zarr", heavy)]
    # 32 bytes per row on the light store (2 entries of 12 bytes, 8 for the row pointer): 50 rows per partition
    monkeypatch.setattr(_format, "TARGET_PARTITION_BYTES", 32 * 50)
    assert [open_matrix(p).n_partitions for p in paths] == [4, 5]  # sized by the stored entries: private
    limits = {"dppca_dask.executor.in-process-max-partitions": 4,
              "dppca_dask.executor.in-process-max-columns": N_COLS,
              "dppca_dask.cluster.use-active-client": False}
    a, b = auditing_pair()
    with dask.config.set(limits), pytest.warns(InferredSchemaWarning):
        results = [dppca_dask.pca(path, epsilon=1.0, delta=1e-6, mechanism="analyze-gauss", row_norm_bound=1.0,
                                  noise=noise, progress=False) for path, noise in zip(paths, (a, b))]
    assert_within_sensitivity(a.records, b.records)
    assert results[0].provenance["executor"] == results[1].provenance["executor"] == "in-process"
