"""The schema is public input (issue 8, item 4): ingest records whether the width was declared or inferred."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
import zarr

from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.ingest import ingest
from dppca_dask.storage import _format, open_matrix, write_matrix


def test_svmlight_width_declared_or_inferred(tmp_path: Path) -> None:
    (tmp_path / "m.svm").write_text("1 1:0.5 3:2\n-1 2:1\n")
    inferred = ingest(tmp_path / "m.svm", tmp_path / "a.zarr")
    declared = ingest(tmp_path / "m.svm", tmp_path / "b.zarr", n_features=10)
    assert (inferred.schema, inferred.n_cols) == ("inferred", 3)
    assert (declared.schema, declared.n_cols) == ("declared", 10)
    # Stored in the group's attributes, and read back by open_matrix.
    assert zarr.open_group(declared.path, mode="r").attrs[_format.ATTR_KEY]["schema"] == "declared"
    assert open_matrix(declared.path).schema == "declared"
    assert open_matrix(declared.path).info()["schema"] == "declared"


@pytest.mark.parametrize("kind", ["npy", "npz", "array"])
def test_other_formats_must_match_the_declared_width(tmp_path: Path, kind: str) -> None:
    matrix = sp.random(5, 4, density=0.5, format="csr", random_state=1)
    if kind == "npy":
        np.save(tmp_path / "m.npy", matrix.toarray())
        src: object = tmp_path / "m.npy"
    elif kind == "npz":
        sp.save_npz(tmp_path / "m.npz", matrix)
        src = tmp_path / "m.npz"
    else:
        src = matrix
    store = ingest(src, tmp_path / "ok.zarr", n_features=4)
    assert store.schema == "declared"
    with pytest.raises(InvalidInputError, match=r"has 4 columns but n_features=5 \(--n-features\) was declared"):
        ingest(src, tmp_path / "bad.zarr", n_features=5)
    assert not os.path.exists(tmp_path / "bad.zarr")
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".bad.zarr")]


def test_mtx_must_match_the_declared_width(tmp_path: Path) -> None:
    (tmp_path / "m.mtx").write_text("%%MatrixMarket matrix coordinate real general\n2 3 2\n1 1 1.0\n2 3 2.0\n")
    assert ingest(tmp_path / "m.mtx", tmp_path / "a.zarr").schema == "inferred"
    assert ingest(tmp_path / "m.mtx", tmp_path / "b.zarr", n_features=3).schema == "declared"
    with pytest.raises(InvalidInputError, match=r"has 3 columns but n_features=7"):
        ingest(tmp_path / "m.mtx", tmp_path / "c.zarr", n_features=7)
    assert sorted(os.listdir(tmp_path)) == ["a.zarr", "b.zarr", "m.mtx"]


def test_parquet_column_universe(tmp_path: Path) -> None:
    table = pa.table({"row_id": [10, 10, 20], "col_id": [7, 9, 7], "value": [1.0, 2.0, 3.0]})
    pq.write_table(table, tmp_path / "t.parquet")
    assert ingest(tmp_path / "t.parquet", tmp_path / "a.zarr").schema == "inferred"
    (tmp_path / "ids.txt").write_text("5\n7\n8\n9\n")
    store = ingest(tmp_path / "t.parquet", tmp_path / "b.zarr", column_ids=tmp_path / "ids.txt")
    assert (store.schema, store.n_cols) == ("declared", 4)  # column 8 and 5 exist though unused
    dense = store.to_scipy().toarray()
    np.testing.assert_array_equal(dense, [[0, 1, 0, 2], [0, 3, 0, 0]])
    np.testing.assert_array_equal(zarr.open_group(store.path, mode="r")["var/var_ids"][:], [5, 7, 8, 9])
    with pytest.raises(InvalidInputError, match=r"column id 9 of column 'col_id' .* is not among the declared"):
        ingest(tmp_path / "t.parquet", tmp_path / "c.zarr", column_ids=[5, 7])
    with pytest.raises(InvalidParameterError, match=r"declare the column ids instead"):
        ingest(tmp_path / "t.parquet", tmp_path / "c.zarr", n_features=2)
    with pytest.raises(InvalidParameterError, match=r"n_features=3 disagrees with the 4 declared column ids"):
        ingest(tmp_path / "t.parquet", tmp_path / "c.zarr", column_ids=tmp_path / "ids.txt", n_features=3)
    with pytest.raises(InvalidParameterError, match=r"repeat an id"):
        ingest(tmp_path / "t.parquet", tmp_path / "c.zarr", column_ids=[7, 7, 9])
    with pytest.raises(InvalidParameterError, match=r"are empty"):
        ingest(tmp_path / "t.parquet", tmp_path / "c.zarr", column_ids=[])
    with pytest.raises(InvalidParameterError, match=r"non-integer id"):
        ingest(tmp_path / "t.parquet", tmp_path / "c.zarr", column_ids=["a"])
    with pytest.raises(InvalidParameterError, match=r"cannot read the column ids"):
        ingest(tmp_path / "t.parquet", tmp_path / "c.zarr", column_ids=tmp_path / "missing.txt")
    (tmp_path / "words.txt").write_text("x\n")
    strings = pa.table({"row_id": ["r"], "col_id": ["x"], "value": [1.0]})
    pq.write_table(strings, tmp_path / "s.parquet")
    assert ingest(tmp_path / "s.parquet", tmp_path / "d.zarr", column_ids=tmp_path / "words.txt").schema == "declared"
    assert not os.path.exists(tmp_path / "c.zarr")


def test_anndata_and_old_stores_are_inferred(tmp_path: Path) -> None:
    adata = zarr.open_group(str(tmp_path / "a.zarr"), mode="w", zarr_format=3)
    adata.create_array("X", shape=(2, 3), dtype="float64")[:] = np.ones((2, 3))
    assert open_matrix(tmp_path / "a.zarr").schema == "inferred"
    store = write_matrix(tmp_path / "s.zarr", sp.eye(3, format="csr"))
    assert store.schema == "inferred"
    group = zarr.open_group(store.path, mode="r+")
    meta = dict(group.attrs[_format.ATTR_KEY])
    meta.pop("schema")
    group.attrs[_format.ATTR_KEY] = meta
    assert open_matrix(store.path).schema == "inferred"
    meta["schema"] = "guessed"
    group.attrs[_format.ATTR_KEY] = meta
    with pytest.raises(Exception, match=r"unknown schema 'guessed'"):
        open_matrix(store.path)


def test_repr_has_no_counts(tmp_path: Path) -> None:
    matrix = sp.random(37, 5, density=0.4, format="csr", random_state=3)
    inferred = write_matrix(tmp_path / "i.zarr", matrix, rows_per_partition=10)
    declared = write_matrix(tmp_path / "d.zarr", matrix, rows_per_partition=10, schema="declared")
    for store in (inferred, declared):
        text = repr(store).replace(str(store.store_id), "ID").replace(store.path, "PATH")
        assert "37" not in text and str(store.nnz) not in text and "n_rows" not in text and "nnz" not in text
        assert "partitions" not in text
    assert "n_cols" not in repr(inferred) and "n_cols=5" in repr(declared)
    with pytest.raises(InvalidParameterError, match=r"schema must be 'declared' or 'inferred'"):
        write_matrix(tmp_path / "x.zarr", matrix, schema="maybe")  # type: ignore[arg-type]
