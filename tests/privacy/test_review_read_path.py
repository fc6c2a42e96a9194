"""A damaged store fails before any noise is drawn, with an error that names the partition and, where one row is
at fault, the row (privacy invariant 7), through a real LocalCluster.

A dppca_dask store holds column indices inside the declared width, and its chunks are as its arrays' metadata
describe them. Each case damages one thing after ingest, the way a bad copy, a partial write or a hand edit would:
an index beyond the width or negative, a chunk file cut short, the array's codec changed in its metadata.
(Repeated or unsorted indices inside a row are not refused by a private run: it sums and sorts them, so the norms
it clips with are those of the row it multiplies, and ``info --check`` reports them; see
``tests/storage/test_store_structure.py`` and ``test_store_read_path.py``.) Deterministic: no noise is ever drawn.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import zarr

import dppca_dask
from dppca_dask.errors import StoreCorruptError
from dppca_dask.mechanisms.testing import AuditingNoiseSource
from dppca_dask.storage import open_matrix, write_matrix

N_COLS = 8
ROWS_PER_PARTITION = 16
ROW = 37  # partition 2 (rows 32-47); every row has at least three entries


def _matrix(rng: np.random.Generator) -> sp.csr_array:
    dense = rng.uniform(-0.3, 0.3, (60, N_COLS)) * (rng.random((60, N_COLS)) < 0.6)
    dense[:, :3] = rng.uniform(0.05, 0.3, (60, 3))
    return sp.csr_array(dense)


def _edit_indices(change: Callable[[np.ndarray, int], None]) -> Callable[[str, Any], None]:
    def damage(path: str, store: Any) -> None:
        array = zarr.open_group(path, mode="r+")["X/indices"]
        values = np.asarray(array[:])
        start = int(np.asarray(zarr.open_group(path, mode="r")["X/indptr"][ROW]))
        change(values, start)
        array[:] = values
    return damage


def _beyond(values: np.ndarray, start: int) -> None:
    values[start + 2] = N_COLS + 3


def _negative(values: np.ndarray, start: int) -> None:
    values[start + 1] = -7


def _truncate(path: str, store: Any) -> None:
    chunk = Path(path, "X", "data", "c", "0")
    chunk.write_bytes(chunk.read_bytes()[: chunk.stat().st_size // 2])


def _codec_changed(path: str, store: Any) -> None:
    """The codec edited in the array's own metadata and in the root's consolidated copy, which readers use."""
    meta_path = Path(path, "X", "data", "zarr.json")
    meta = json.loads(meta_path.read_text())
    meta["codecs"] = [c for c in meta["codecs"] if c["name"] == "bytes"] + [
        {"name": "blosc", "configuration": {"typesize": 8, "cname": "lz4", "clevel": 5, "shuffle": "shuffle",
                                            "blocksize": 0}}]
    meta_path.write_text(json.dumps(meta))
    root_path = Path(path, "zarr.json")
    root = json.loads(root_path.read_text())
    root["consolidated_metadata"]["metadata"]["X/data"]["codecs"] = meta["codecs"]
    root_path.write_text(json.dumps(root))


CASES = {
    "index-beyond-width": (_edit_indices(_beyond), 2, ROW),
    "negative-index": (_edit_indices(_negative), 2, ROW),
    "truncated-chunk": (_truncate, 0, None),
    "codec-changed": (_codec_changed, 0, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_store_fails_before_any_noise_naming_partition_and_row(
    tmp_path: Path, rng: np.random.Generator, local_client: Any, seed: int, case: str
) -> None:
    damage, partition, row = CASES[case]
    store = write_matrix(tmp_path / "s.zarr", _matrix(rng), rows_per_partition=ROWS_PER_PARTITION,
                         schema="declared")
    assert store.codec == "none" and os.path.exists(os.path.join(store.path, "X", "data", "c", "0"))
    damage(store.path, store)
    noise = AuditingNoiseSource(seed)
    with pytest.raises(StoreCorruptError, match=rf"partition {partition}\b") as info:
        dppca_dask.pca(open_matrix(store.path), epsilon=1.0, delta=1e-6, mechanism="adaptive-power", n_iter=2,
                       client=local_client, noise=noise, progress=False)
    assert info.value.partition == partition
    if row is not None:
        assert info.value.row == row and f"row {row}" in str(info.value)
    assert noise.records == [] and noise.released_keys == frozenset()
