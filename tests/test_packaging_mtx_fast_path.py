"""Matrix Market files that fit in memory are read by ``scipy.io.mmread``; the stored matrix is the one the
streaming parser stores, and whatever needs a precise error still gets it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.errors import InvalidInputError
from dppca_dask.ingest import ingest, mtx


def _stored(path: str) -> np.ndarray:
    from dppca_dask import open_matrix

    store = open_matrix(path)
    return np.vstack([store.read_partition(p.index).toarray() for p in store.partitions])


BODIES = {
    "general": "%%MatrixMarket matrix coordinate real general\n% c\n4 3 5\n1 1 1.5\n2 3 -2\n4 2 3e-1\n1 1 0.5\n3 1 7\n",
    "symmetric": "%%MatrixMarket matrix coordinate real symmetric\n3 3 4\n1 1 2\n2 1 1\n3 2 -4\n3 3 1\n",
    "skew": "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n2 1 1\n3 1 5\n",
    "pattern": "%%MatrixMarket matrix coordinate pattern general\n3 4 3\n1 4\n2 2\n3 1\n",
    "integer": "%%MatrixMarket matrix coordinate integer general\n2 2 2\n1 2 7\n2 1 -3\n",
}


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_fast_and_streaming_paths_store_the_same_matrix(tmp_path: Path, kind: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / f"{kind}.mtx"
    src.write_text(BODIES[kind])
    header = mtx.read_header(open(src, "rb"), str(src))
    assert mtx._read_coordinate_in_memory(str(src), header, _options(tmp_path)) is not None  # fast path taken
    ingest(str(src), str(tmp_path / "fast.zarr"), progress=False)
    import dask.config

    with dask.config.set({"dppca_dask.ingest.in-memory-max-bytes": 0}):
        assert mtx._read_coordinate_in_memory(str(src), header, _options(tmp_path)) is None
        ingest(str(src), str(tmp_path / "slow.zarr"), progress=False)
    np.testing.assert_array_equal(_stored(str(tmp_path / "fast.zarr")), _stored(str(tmp_path / "slow.zarr")))


def _options(tmp_path: Path) -> object:
    from dppca_dask.ingest._common import IngestOptions

    return IngestOptions(out=str(tmp_path / "x.zarr"), progress=False)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 1 nan\n2 2 1\n", "NaN and infinite values"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 2\n1 3 1\n2 2 1\n", "column index 3 at line 3"),
        ("%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1\n2 2 1\n", "declares 3 entries but has only 2"),
    ],
)
def test_what_the_fast_path_cannot_vouch_for_gets_the_streaming_error(tmp_path: Path, body: str,
                                                                      message: str) -> None:
    src = tmp_path / "bad.mtx"
    src.write_text(body)
    with pytest.raises(InvalidInputError, match=message):
        ingest(str(src), str(tmp_path / "bad.zarr"), progress=False)


def test_duplicates_rejected_by_the_streaming_path(tmp_path: Path) -> None:
    src = tmp_path / "dup.mtx"
    src.write_text(BODIES["general"])
    with pytest.raises(InvalidInputError, match="duplicate"):
        ingest(str(src), str(tmp_path / "dup.zarr"), progress=False, on_duplicate="reject")


def test_a_generated_matrix_round_trips(tmp_path: Path, seed: int) -> None:
    import scipy.io

    rng = np.random.default_rng(seed)
    matrix = sp.random(500, 40, density=0.1, random_state=rng, format="coo")
    scipy.io.mmwrite(str(tmp_path / "g.mtx"), matrix)
    ingest(str(tmp_path / "g.mtx"), str(tmp_path / "g.zarr"), progress=False, rows_per_partition=128)
    np.testing.assert_allclose(_stored(str(tmp_path / "g.zarr")), matrix.toarray(), rtol=1e-15)
