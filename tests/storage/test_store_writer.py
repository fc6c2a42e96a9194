"""The sequential store writer: validation, partitioning, auxiliary arrays, and all-or-nothing commits."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr

from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.storage import StoreWriter, open_matrix, write_matrix


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"n_cols": 0}, r"n_cols must be >= 1; got 0"),
        ({"layout": "coo"}, r"layout must be 'csr' or 'dense'; got 'coo'"),
        ({"rows_per_partition": 0}, r"rows_per_partition must be >= 1; got 0"),
        ({"on_duplicate": "max"}, r"on_duplicate must be 'sum' or 'reject'; got 'max'"),
        ({"target_partition_bytes": 0}, r"target_partition_bytes must be >= 1; got 0"),
        ({"dtype": np.int32}, r"dtype must be float32 or float64; got int32"),
    ],
)
def test_invalid_writer_options(tmp_path: Path, options: dict[str, object], match: str) -> None:
    kwargs: dict[str, object] = {"n_cols": 3, **options}
    with pytest.raises(InvalidParameterError, match=match):
        StoreWriter(tmp_path / "s.zarr", **kwargs)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


def test_existing_path_and_closed_writer(tmp_path: Path, sparse: sp.csr_array) -> None:
    write_matrix(tmp_path / "s.zarr", sparse)
    with pytest.raises(InvalidParameterError, match=r"already exists; choose another output path"):
        StoreWriter(tmp_path / "s.zarr", n_cols=6)
    with StoreWriter(tmp_path / "t.zarr", n_cols=6) as writer:
        writer.append(sparse)
        writer.commit()
        with pytest.raises(InvalidParameterError, match=r"already committed or aborted"):
            writer.append(sparse)


def test_error_inside_the_writer_leaves_nothing(tmp_path: Path, sparse: sp.csr_array) -> None:
    with pytest.raises(RuntimeError, match="stop"), StoreWriter(tmp_path / "s.zarr", n_cols=6) as writer:
        writer.append(sparse)
        raise RuntimeError("stop")
    assert os.listdir(tmp_path) == []


def test_path_appearing_while_writing(tmp_path: Path, sparse: sp.csr_array) -> None:
    with StoreWriter(tmp_path / "s.zarr", n_cols=6) as writer:
        writer.append(sparse)
        (tmp_path / "s.zarr").mkdir()
        with pytest.raises(InvalidParameterError, match=r"appeared while writing"):
            writer.commit()
    assert os.listdir(tmp_path) == ["s.zarr"]


def test_auxiliary_arrays_and_attributes(tmp_path: Path, sparse: sp.csr_array) -> None:
    with StoreWriter(tmp_path / "s.zarr", n_cols=6) as writer:
        writer.append(sparse)
        writer.write_array("obs_ids", np.array([f"r{i}" for i in range(40)], dtype=object))
        writer.write_array("var_ids", np.arange(6) * 10)
        writer.set_attribute("id_maps", {"obs_ids": "rows"})
        store = writer.commit()
    group = zarr.open_group(store.path, mode="r")
    assert group["obs/obs_ids"][39] == "r39"
    np.testing.assert_array_equal(group["var/var_ids"][:], np.arange(6) * 10)
    assert store.metadata["id_maps"] == {"obs_ids": "rows"}


def test_automatic_partition_size(tmp_path: Path, rng: np.random.Generator) -> None:
    matrix = sp.random(1000, 20, density=0.25, format="csr", random_state=np.random.RandomState(0))
    with StoreWriter(tmp_path / "s.zarr", n_cols=20, target_partition_bytes=4000) as writer:
        for start in range(0, 1000, 37):  # blocks that do not line up with partitions
            writer.append(matrix[start : start + 37])
        store = writer.commit()
    sizes = [p.nnz * 12 + p.n_rows * 16 for p in store.partitions[:-1]]
    assert store.n_partitions > 10 and max(sizes) < 2 * 4000 and min(sizes) > 4000 / 2
    np.testing.assert_array_equal(store.to_scipy().toarray(), matrix.toarray())


@pytest.mark.parametrize("layout", ["csr", "dense"])
def test_errors_name_the_partition_of_the_row(tmp_path: Path, sparse: sp.csr_array, layout: str) -> None:
    block = sparse.toarray()
    block[27, 3] = np.inf
    with StoreWriter(tmp_path / "s.zarr", n_cols=6, rows_per_partition=10, layout=layout) as writer:
        writer.append(block[:4])
        with pytest.raises(InvalidInputError, match=r"inf value at row 27 \(partition 2\) of 'src'") as info:
            writer.append(block[4:] if layout == "dense" else sp.csr_array(block[4:]), source="src")
    assert (info.value.partition, info.value.row) == (2, 27)


def test_shape_mismatch_and_complex_values(tmp_path: Path) -> None:
    with StoreWriter(tmp_path / "s.zarr", n_cols=3) as writer:
        with pytest.raises(InvalidInputError, match=r"shape mismatch at row 0 .* the matrix has 3 columns"):
            writer.append(sp.csr_array((2, 4)))
        with pytest.raises(InvalidInputError, match=r"shape mismatch at row 0 .*: a block has shape \(2, 2\)"):
            writer.append(np.ones((2, 2)))
        with pytest.raises(InvalidInputError, match=r"values must be real numbers; got dtype complex128"):
            writer.append(sp.csr_array(np.ones((1, 3), dtype=complex)))


@pytest.mark.parametrize("kind", ["csr", "coo"])
def test_duplicates_reject_or_sum(tmp_path: Path, kind: str) -> None:
    rows, cols, values = np.array([0, 1, 1]), np.array([2, 0, 0]), np.array([1.0, 2.0, 3.0])
    if kind == "coo":
        block: object = sp.coo_array((values, (rows, cols)), shape=(2, 3))
    else:
        block = sp.csr_array((values, cols, np.array([0, 1, 3])), shape=(2, 3))
    with pytest.raises(InvalidInputError, match=r"duplicate entry \(row 1, column 0\) at partition 0"):
        write_matrix(tmp_path / "r.zarr", block, on_duplicate="reject")
    summed = write_matrix(tmp_path / "s.zarr", block)
    np.testing.assert_array_equal(summed.to_scipy().toarray(), [[0, 0, 1], [5, 0, 0]])
    assert not (tmp_path / "r.zarr").exists()


def test_values_too_large_for_float32(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"value -1e\+39 at row 0 \(partition 0\) \(column 1\) does not fit "
                                                r"in float32 .*dtype=float64"):
        write_matrix(tmp_path / "s.zarr", sp.csr_array(np.array([[0.0, -1e39]])), dtype=np.float32)
    assert write_matrix(tmp_path / "t.zarr", np.array([[3e38]]), dtype=np.float32).to_scipy()[0, 0] == np.float32(3e38)


def test_write_matrix_rejects_non_matrices(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match=r"expected a 2-D matrix; got 1 dimensions"):
        write_matrix(tmp_path / "s.zarr", np.ones(3))
    assert open_matrix(write_matrix(tmp_path / "l.zarr", [[1.0, 2.0]]).path).shape == (1, 2)
