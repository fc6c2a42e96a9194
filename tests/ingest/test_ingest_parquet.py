"""Parquet warehouse triplets: shuffled rows, sparse int and string ids over several files, hive directories."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp
import zarr
from ingest_helpers import RPP, assert_store_equals, listing, make_matrix

from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.ingest import ingest, parquet


def triplets(matrix: sp.csr_array, rng: np.random.Generator, *, row_ids: np.ndarray, col_ids: np.ndarray,
             keep_zero_rows: bool = True) -> pa.Table:
    """The matrix as shuffled (row_id, col_id, value) triplets; all-zero rows get explicit zeros if asked."""
    coo = sp.coo_array(matrix)
    rows, cols, values = coo.row, coo.col, coo.data
    if keep_zero_rows:  # a warehouse row with only zero values still appears in the table
        empty = np.flatnonzero(np.diff(matrix.indptr) == 0)
        rows = np.concatenate((rows, empty))
        cols = np.concatenate((cols, np.zeros(empty.size, dtype=cols.dtype)))
        values = np.concatenate((values, np.zeros(empty.size)))
    order = rng.permutation(rows.size)
    return pa.table({"row_id": row_ids[rows[order]], "col_id": col_ids[cols[order]], "value": values[order]})


def write_files(table: pa.Table, directory: Path, n_files: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    bounds = np.linspace(0, table.num_rows, n_files + 1).astype(int)
    for k in range(n_files):
        pq.write_table(table.slice(bounds[k], bounds[k + 1] - bounds[k]), directory / f"part-{k}.parquet",
                       row_group_size=17)
    return directory


def sparse_int_ids(n: int, rng: np.random.Generator) -> np.ndarray:
    """Distinct, non-dense, unsorted 64-bit ids whose sorted order is known."""
    ids = np.sort(rng.choice(2**40, size=n, replace=False)).astype(np.int64) - 2**39  # negative ones too
    return ids


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_shuffled_sparse_int_and_string_ids_over_files(tmp_path: Path, matrix: sp.csr_array,
                                                       rng: np.random.Generator, dtype: type) -> None:
    row_ids = sparse_int_ids(60, rng)
    col_ids = np.array([f"kw-{j:02d}" for j in range(9)])  # sorted order is the column order
    src = write_files(triplets(matrix, rng, row_ids=row_ids, col_ids=col_ids), tmp_path / "tbl", 3)
    store = ingest(src, tmp_path / "s.zarr", rows_per_partition=RPP, dtype=dtype)
    assert store.n_partitions == 6 and store.partitions[1].nnz == 10  # rows 10-19: explicit zeros only
    assert_store_equals(store, matrix.astype(dtype), dtype=dtype)
    group = zarr.open_group(store.path, mode="r")
    np.testing.assert_array_equal(group["obs/obs_ids"][:], row_ids)
    assert list(group["var/var_ids"][:]) == list(col_ids)
    assert store.metadata["id_maps"] == {"obs_ids": {"column": "row_id", "type": "int64"},
                                         "var_ids": {"column": "col_id", "type": "string"}}


def test_ids_are_sorted_not_in_order_of_appearance(tmp_path: Path) -> None:
    table = pa.table({"row_id": ["u9", "u10", "u2"], "col_id": [30, 7, 30], "value": [1.0, 2.0, 3.0]})
    pq.write_table(table, tmp_path / "t.parquet")
    store = ingest(tmp_path / "t.parquet", tmp_path / "s.zarr")
    group = zarr.open_group(store.path, mode="r")
    assert list(group["obs/obs_ids"][:]) == ["u10", "u2", "u9"]  # string order
    np.testing.assert_array_equal(group["var/var_ids"][:], [7, 30])
    np.testing.assert_array_equal(store.to_scipy().toarray(), [[2, 0], [0, 3], [0, 1]])


def test_large_string_id_maps_use_binary_search(tmp_path: Path, matrix: sp.csr_array, rng: np.random.Generator,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parquet, "HASH_LOOKUP_MAX", 4)
    row_ids = np.array([f"user-{i:03d}" for i in range(60)])
    col_ids = np.array([f"kw-{j}" for j in range(9)])
    src = write_files(triplets(matrix, rng, row_ids=row_ids, col_ids=col_ids), tmp_path / "tbl", 2)
    assert_store_equals(ingest(src, tmp_path / "s.zarr"), matrix)


def test_hive_partitioned_directory(tmp_path: Path, rng: np.random.Generator) -> None:
    matrix = make_matrix(rng, n_rows=40, n_cols=5)
    row_ids, col_ids = sparse_int_ids(40, rng), np.arange(5) * 10
    table = triplets(matrix, rng, row_ids=row_ids, col_ids=col_ids)
    keys = pc.bit_wise_and(table["row_id"], 3)
    for block in range(4):  # block=k/ directories; the key is not one of the triplet columns
        write_files(table.filter(pc.equal(keys, block)), tmp_path / "hive" / f"block={block}", 2)
    (tmp_path / "hive" / "_SUCCESS").write_text("")  # files starting with '_' or '.' are ignored
    store = ingest(tmp_path / "hive", tmp_path / "s.zarr", rows_per_partition=7)
    assert_store_equals(store, matrix)


def test_partition_key_as_triplet_column(tmp_path: Path) -> None:
    for col in (3, 5):
        directory = tmp_path / "t" / f"col_id={col}"
        directory.mkdir(parents=True)
        pq.write_table(pa.table({"row_id": [1, 2], "value": [float(col), 1.0]}), directory / "p.parquet")
    store = ingest(tmp_path / "t", tmp_path / "s.zarr", format="parquet")
    np.testing.assert_array_equal(store.to_scipy().toarray(), [[3, 5], [1, 1]])


def test_custom_columns_and_no_value_column(tmp_path: Path) -> None:
    table = pa.table({"user": [7, 7, 3], "item": ["b", "a", "b"], "w": [0.5, 1.5, 2.0]})
    pq.write_table(table, tmp_path / "t.parquet")
    store = ingest(tmp_path / "t.parquet", tmp_path / "a.zarr", row_column="user", col_column="item",
                   value_column="w")
    np.testing.assert_array_equal(store.to_scipy().toarray(), [[0, 2], [1.5, 0.5]])
    ones = ingest(tmp_path / "t.parquet", tmp_path / "b.zarr", row_column="user", col_column="item",
                  value_column=None)
    np.testing.assert_array_equal(ones.to_scipy().toarray(), [[0, 1], [1, 1]])
    assert ones.metadata["source"]["value_column"] is None


def test_integer_values_and_dictionary_columns(tmp_path: Path) -> None:
    table = pa.table({"row_id": pa.array(["x", "y", "x"]).dictionary_encode(),
                      "col_id": pa.array([1, 2, 2], pa.int16()), "value": pa.array([3, 4, 5], pa.int32())})
    pq.write_table(table, tmp_path / "t.parquet")
    store = ingest(tmp_path / "t.parquet", tmp_path / "s.zarr")
    assert store.dtype == "float64"
    np.testing.assert_array_equal(store.to_scipy().toarray(), [[3, 5], [0, 4]])


def test_duplicates_sum_or_reject_with_original_ids(tmp_path: Path) -> None:
    table = pa.table({"row_id": [10, 20, 10], "col_id": ["a", "b", "a"], "value": [1.0, 2.0, 3.0]})
    pq.write_table(table, tmp_path / "t.parquet")
    np.testing.assert_array_equal(ingest(tmp_path / "t.parquet", tmp_path / "a.zarr").to_scipy().toarray(),
                                  [[4, 0], [0, 2]])
    with pytest.raises(InvalidInputError, match=r"duplicate entry \(row id 10, column id 'a': row 0, column 0\) in "
                                                r"partition 0 of '.*t.parquet'"):
        ingest(tmp_path / "t.parquet", tmp_path / "b.zarr", on_duplicate="reject")
    assert listing(tmp_path) == ["a.zarr", "t.parquet"]


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_value_names_file_record_and_ids(tmp_path: Path, rng: np.random.Generator, bad: float) -> None:
    values = rng.standard_normal(50)
    values[37] = bad
    table = pa.table({"row_id": np.arange(50) * 3, "col_id": np.arange(50) % 4, "value": values})
    write_files(table.slice(0, 25), tmp_path / "tbl", 1)
    pq.write_table(table.slice(25), tmp_path / "tbl" / "part-9.parquet")
    with pytest.raises(InvalidInputError, match=rf"{bad!r} value in record 12 of '.*part-9.parquet' \(row id 111: "
                                                r"row 37, partition 3; column id 1\)"):
        ingest(tmp_path / "tbl", tmp_path / "s.zarr", rows_per_partition=10)
    assert listing(tmp_path) == ["tbl"]  # no output, no spill directory, no partial store


def test_null_id_or_value(tmp_path: Path) -> None:
    pq.write_table(pa.table({"row_id": [1, None, 3], "col_id": [1, 1, 1], "value": [1.0, 1.0, 1.0]}),
                   tmp_path / "r.parquet")
    with pytest.raises(InvalidInputError, match=r"null in column 'row_id' at record 1 of '.*r.parquet'"):
        ingest(tmp_path / "r.parquet", tmp_path / "s.zarr")
    pq.write_table(pa.table({"row_id": [1, 2], "col_id": [1, 1], "value": [1.0, None]}), tmp_path / "v.parquet")
    with pytest.raises(InvalidInputError, match=r"null in column 'value' at record 1 of '.*v.parquet'"):
        ingest(tmp_path / "v.parquet", tmp_path / "s.zarr")


def test_missing_column_and_wrong_types(tmp_path: Path) -> None:
    pq.write_table(pa.table({"row_id": [1], "col": [1], "value": [1.0]}), tmp_path / "a.parquet")
    with pytest.raises(InvalidParameterError, match=r"col_column='col_id' is not a column of .*\['row_id', 'col', "
                                                    r"'value'\].*--col-column"):
        ingest(tmp_path / "a.parquet", tmp_path / "s.zarr")
    pq.write_table(pa.table({"row_id": [1.5], "col_id": [1], "value": [1.0]}), tmp_path / "b.parquet")
    with pytest.raises(InvalidInputError, match=r"column 'row_id' .* has type double; row_column must hold integers "
                                                r"or strings"):
        ingest(tmp_path / "b.parquet", tmp_path / "s.zarr")
    pq.write_table(pa.table({"row_id": [1], "col_id": [1], "value": ["x"]}), tmp_path / "c.parquet")
    with pytest.raises(InvalidInputError, match=r"column 'value' .* has type string; value_column must hold a "
                                                r"numeric type"):
        ingest(tmp_path / "c.parquet", tmp_path / "s.zarr")
    with pytest.raises(InvalidParameterError, match=r"must be different columns"):
        ingest(tmp_path / "c.parquet", tmp_path / "s.zarr", col_column="row_id")


def test_files_that_disagree(tmp_path: Path) -> None:
    (tmp_path / "t").mkdir()
    pq.write_table(pa.table({"row_id": [1], "col_id": [1], "value": [1.0]}), tmp_path / "t" / "a.parquet")
    pq.write_table(pa.table({"row_id": ["u1"], "col_id": [1], "value": [1.0]}), tmp_path / "t" / "b.parquet")
    with pytest.raises(InvalidInputError, match=r"cannot read Parquet data in '.*b.parquet'"):
        ingest(tmp_path / "t", tmp_path / "s.zarr")
    pq.write_table(pa.table({"row_id": [1], "value": [1.0]}), tmp_path / "t" / "b.parquet")
    with pytest.raises(InvalidInputError, match=r"file '.*b.parquet' has no column 'col_id'"):
        ingest(tmp_path / "t", tmp_path / "s.zarr")


def test_not_parquet_and_empty(tmp_path: Path) -> None:
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(InvalidInputError, match=r"cannot read Parquet data in '.*junk.parquet'"):
        ingest(tmp_path / "junk.parquet", tmp_path / "s.zarr")
    pq.write_table(pa.table({"row_id": pa.array([], pa.int64()), "col_id": pa.array([], pa.int64()),
                             "value": pa.array([], pa.float64())}), tmp_path / "empty.parquet")
    with pytest.raises(InvalidInputError, match=r"holds no triplets"):
        ingest(tmp_path / "empty.parquet", tmp_path / "s.zarr")


@pytest.mark.parametrize(("column", "hash_lookup_max", "match"), [
    ("row", 2**18, r"id 2 of column 'row_id' in '.*t.parquet' was not there"),
    ("col", 2**18, r"id 'b' of column 'col_id' in '.*t.parquet' was not there"),
    ("col", 0, r"id 'b' of column 'col_id' in '.*t.parquet' was not there"),
])
def test_table_changing_between_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, column: str,
                                       hash_lookup_max: int, match: str) -> None:
    pq.write_table(pa.table({"row_id": [1, 2], "col_id": ["a", "b"], "value": [1.0, 2.0]}), tmp_path / "t.parquet")
    real = parquet._unique_ids

    def missing_an_id(*args: object) -> tuple[np.ndarray, np.ndarray]:
        rows, cols = real(*args)  # type: ignore[arg-type]
        return (rows[:1], cols) if column == "row" else (rows, cols[:1])

    monkeypatch.setattr(parquet, "_unique_ids", missing_an_id)
    monkeypatch.setattr(parquet, "HASH_LOOKUP_MAX", hash_lookup_max)
    with pytest.raises(InvalidInputError, match=match):
        ingest(tmp_path / "t.parquet", tmp_path / "s.zarr")
    assert listing(tmp_path) == ["t.parquet"]


def test_partition_size_is_chosen_from_the_triplet_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dppca_dask.storage import _format

    monkeypatch.setattr(_format, "TARGET_PARTITION_BYTES", 1000)
    n = 400
    pq.write_table(pa.table({"row_id": np.arange(n) // 4, "col_id": np.arange(n) % 4, "value": np.ones(n)}),
                   tmp_path / "t.parquet")
    store = ingest(tmp_path / "t.parquet", tmp_path / "s.zarr")
    # 4 entries per row at 12 bytes plus 16 bytes of row pointer and norm: 64 bytes, so 15 rows per partition.
    assert [p.n_rows for p in store.partitions] == [15] * 6 + [10]
    assert os.path.exists(store.path)
