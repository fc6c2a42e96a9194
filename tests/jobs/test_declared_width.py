"""A job releases only on a store whose width was declared (DESIGN.md, invariant 9): the spec's ``n_features`` (and a
Parquet extract's ``column_ids``) reach its ingest, and a store whose width was read off the data is refused before
the ledger is touched, whatever the spec declares.

The defect these tests pin down: a warehouse job declared ``[data] n_features`` but ingested its Parquet triplets
without column ids, so its store's width was inferred; the job checked only that the inferred width equalled the
declared one, then reserved, released and charged a result whose report said the shape was not covered.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from jobs_helpers import base_doc, daily_store, declare_schema

from dppca_dask.cli import main
from dppca_dask.errors import JobSpecError
from dppca_dask.jobs import parse_job
from dppca_dask.ledger import CHARGED, Ledger
from dppca_dask.storage import open_matrix

DATE = "2026-04-01"
#: The public feature ids of the extracts below: 12 of them, of which the table uses 0-9 except 7 (9 distinct ids:
#: the width an ingest would infer).
N_FEATURES = 12
USED = [j for j in range(10) if j != 7]


def _extract(directory: Path, rng: np.random.Generator, *, extra_id: int | None = None) -> Path:
    """Parquet triplets (user_id, feature_id, value) over two files, with sparse user ids."""
    directory.mkdir()
    users = 1_000 + 7 * np.arange(400)
    rows, cols, vals = [], [], []
    for user in users:
        picked = rng.choice(USED, size=3, replace=False)
        rows += [user] * 3
        cols += list(picked)
        vals += list(rng.uniform(0.1, 0.5, size=3))
    if extra_id is not None:
        rows.append(int(users[0]) + 1)
        cols.append(extra_id)
        vals.append(0.2)
    rows_a, cols_a, vals_a = np.array(rows, np.int64), np.array(cols, np.int64), np.array(vals)
    for i, part in enumerate(np.array_split(np.arange(rows_a.size), 2)):
        pq.write_table(pa.table({"user_id": rows_a[part], "feature_id": cols_a[part], "value": vals_a[part]}),
                       directory / f"part-{i}.parquet")
    return directory


def _columns(path: Path, n: int = N_FEATURES) -> Path:
    path.write_text("".join(f"{j}\n" for j in range(n)))
    return path


def _warehouse_doc(tmp_path: Path, source: Path, **ingest: Any) -> dict[str, Any]:
    """A job like ``jobs/warehouse-nightly.toml``: the width declared in ``[data]``, Parquet triplets ingested."""
    doc = base_doc(tmp_path, str(tmp_path / "wh.zarr"), n_iter=2)
    doc["data"]["n_features"] = N_FEATURES
    doc["data"]["ingest"] = {"source": str(source), "row_column": "user_id", "col_column": "feature_id",
                             "value_column": "value", "on_duplicate": "reject", **ingest}
    doc["cluster"] = {"executor": "local"}
    return doc


def _refused(spec: Path, tmp_path: Path, capsys: Any, *extra: str) -> str:
    """Run ``spec`` (exit 2 expected) and return standard error; nothing reserved, no store, no output."""
    ledger = tmp_path / "ledger.sqlite"
    before = ledger.read_bytes()
    assert main(["run", str(spec), "--date", DATE, *extra]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert ledger.read_bytes() == before  # the ledger is not touched
    assert Ledger(ledger).budget("ds").entries == ()
    assert not (tmp_path / "out").exists()
    return err


def test_a_warehouse_job_declares_its_width_to_the_ingest_and_its_release_is_covered(
        tmp_path: Path, write_spec: Any, rng: np.random.Generator, capsys: Any) -> None:
    source = _extract(tmp_path / "extract", rng)
    doc = _warehouse_doc(tmp_path, source, format="parquet", column_ids=str(_columns(tmp_path / "columns.txt")))
    spec = write_spec(doc)
    assert main(["run", str(spec), "--date", DATE, "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["status"] == "completed" and outcome["ledger"]["status"] == CHARGED
    store = open_matrix(tmp_path / "wh.zarr")
    assert store.schema == "declared" and store.n_cols == N_FEATURES  # not the 9 ids the table uses
    result = json.loads(Path(outcome["output"], "result.json").read_text())
    assert result["privacy"]["caveats"] == []
    assert result["provenance"]["input"]["schema"] == "declared"
    from dppca_dask.results import load_result

    assert load_result(outcome["output"]).components.shape == (1, N_FEATURES)


def test_the_column_ids_may_be_an_array_and_the_width_given_in_the_ingest(tmp_path: Path, write_spec: Any,
                                                                           rng: np.random.Generator) -> None:
    source = _extract(tmp_path / "extract", rng)
    doc = _warehouse_doc(tmp_path, source, column_ids=list(range(N_FEATURES)), n_features=N_FEATURES)
    del doc["data"]["n_features"]
    spec = parse_job(doc, source="job.toml", base_dir=str(tmp_path))
    assert spec.data.declared_width == N_FEATURES and spec.data.ingest is not None
    assert spec.data.ingest["column_ids"] == list(range(N_FEATURES))


@pytest.mark.parametrize("fmt", ["parquet", None])
def test_a_parquet_ingest_without_column_ids_is_refused_before_the_ledger_and_the_ingest(
        tmp_path: Path, write_spec: Any, rng: np.random.Generator, capsys: Any, fmt: str | None) -> None:
    """The walkthrough's spec: ``[data] n_features`` declared, no column ids. With ``format = "parquet"`` the spec
    is refused as it is read; without, once the source is known to be Parquet (its files), before it is ingested."""
    source = _extract(tmp_path / "extract", rng)
    doc = _warehouse_doc(tmp_path, source, **({"format": fmt} if fmt else {}))
    spec = write_spec(doc)
    for extra in ((), ("--dry-run",)):
        err = _refused(spec, tmp_path, capsys, *extra)
        assert "[data.ingest] ingests Parquet triplets" in err and 'add column_ids = "FILE"' in err
    assert not (tmp_path / "wh.zarr").exists()  # nothing was ingested


def test_an_ingest_without_a_declared_width_is_refused_as_the_spec_is_read(tmp_path: Path, write_spec: Any,
                                                                           capsys: Any) -> None:
    doc = base_doc(tmp_path, str(tmp_path / "s.zarr"))
    doc["data"]["ingest"] = {"source": str(tmp_path / "x.npz")}
    with pytest.raises(JobSpecError, match=r"\[data.ingest\] does not declare the width of the store it writes: .*"
                                           r"add n_features = D"):
        parse_job(doc, source="job.toml", base_dir=str(tmp_path))
    _refused(write_spec(doc), tmp_path, capsys)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda d: d["data"]["ingest"].update(n_features=11),
     r"\[data\] n_features = 12 and \[data.ingest\] n_features = 11 disagree"),
    (lambda d: d["data"]["ingest"].update(n_features=0), r"\[data.ingest\] n_features must be an integer >= 1"),
    (lambda d: d["data"]["ingest"].update(column_ids=[]), r"\[data.ingest\] column_ids must be the path"),
    (lambda d: d["data"]["ingest"].update(column_ids=[True]), r"\[data.ingest\] column_ids must be the path"),
    (lambda d: d["data"]["ingest"].update(column_ids="c.txt", format="svmlight"),
     r"column_ids applies to Parquet triplets; got format = 'svmlight'"),
])
def test_bad_declarations_of_the_ingest_are_refused(tmp_path: Path, mutate: Any, message: str) -> None:
    doc = _warehouse_doc(tmp_path, tmp_path / "extract")
    mutate(doc)
    with pytest.raises(JobSpecError, match=message):
        parse_job(doc, source="job.toml", base_dir=str(tmp_path))


def test_column_ids_on_a_source_that_is_not_parquet_are_refused_before_the_ingest(
        tmp_path: Path, write_spec: Any, capsys: Any) -> None:
    np.savez(tmp_path / "x.npz", x=np.zeros(1))  # told from its name: not Parquet
    doc = _warehouse_doc(tmp_path, tmp_path / "x.npz", column_ids=[0, 1])
    err = _refused(write_spec(doc), tmp_path, capsys)
    assert "column_ids applies to Parquet triplets, but" in err and "is npz" in err


@pytest.mark.parametrize("case", ["id-outside", "svmlight-wider"])
def test_a_declared_width_the_data_does_not_have_fails_in_the_ingest(tmp_path: Path, write_spec: Any,
                                                                     rng: np.random.Generator, capsys: Any,
                                                                     case: str) -> None:
    if case == "id-outside":  # the table uses feature 12, outside the declared ids 0-11
        doc = _warehouse_doc(tmp_path, _extract(tmp_path / "extract", rng, extra_id=N_FEATURES),
                             column_ids=str(_columns(tmp_path / "columns.txt")))
        message = "column id 12 of column 'feature_id'"
    else:  # an svmlight row with feature 13 (one-based) under [data] n_features = 12
        (tmp_path / "x.svm").write_text("1 1:0.5 3:0.2\n-1 13:0.1\n")
        doc = base_doc(tmp_path, str(tmp_path / "wh.zarr"), n_iter=2)
        doc["data"].update(n_features=N_FEATURES, ingest={"source": str(tmp_path / "x.svm")})
        message = "is beyond n_features=12"
    err = _refused(write_spec(doc), tmp_path, capsys)
    assert message in err
    assert not (tmp_path / "wh.zarr").exists()


def test_a_store_whose_width_was_inferred_is_refused_even_when_the_spec_declares_that_width(
        tmp_path: Path, write_spec: Any, rng: np.random.Generator, capsys: Any) -> None:
    """A store ingested from Parquet without column ids has the width of the ids the table uses: declaring that
    same width in the spec does not make the store's schema declared, and the job refuses it, run or dry run."""
    from dppca_dask.ingest import ingest

    store = tmp_path / "inferred.zarr"
    ingest(str(_extract(tmp_path / "extract", rng)), str(store), row_column="user_id", col_column="feature_id")
    assert open_matrix(store).schema == "inferred" and open_matrix(store).n_cols == len(USED)
    doc = base_doc(tmp_path, str(store), n_iter=2)
    doc["data"]["n_features"] = len(USED)
    doc["cluster"] = {"executor": "local"}
    spec = write_spec(doc)
    for extra in ((), ("--dry-run",)):
        err = _refused(spec, tmp_path, capsys, *extra)
        assert "has a width inferred from the data" in err and "--column-ids FILE" in err


def test_a_window_job_refuses_a_store_whose_width_was_inferred(tmp_path: Path, write_spec: Any,
                                                               capsys: Any) -> None:
    store = daily_store(tmp_path / "days.zarr", days=3)
    declare_schema(store, None)
    doc = base_doc(tmp_path, store)
    doc["job"] = {"name": "win"}
    doc["mechanism"] = {"name": "sliding-window", "last": "2D", "release": "gaussian"}
    spec = write_spec(doc)
    for extra in (("--dry-run",), ()):
        assert main(["run", str(spec), "--date", "2026-11-03", *extra]) == 2
        assert "has a width inferred from the data" in capsys.readouterr().err
    assert [e for e in Ledger(tmp_path / "ledger.sqlite").find("win@2026-11-03")] == []


def test_ingest_and_append_tables_apply_to_the_jobs_that_use_them(tmp_path: Path) -> None:
    """A sliding-window job never ingests (its store grows by appends) and other jobs never append: a table the
    job would ignore is refused when the spec is read, instead of being silently skipped."""
    store = tmp_path / "days.zarr"
    (tmp_path / "ids.txt").write_text("\n".join(str(i) for i in range(12)) + "\n")
    window = base_doc(tmp_path, str(store))
    window["mechanism"] = {"name": "sliding-window", "last": "2D", "release": "gaussian"}
    window["data"]["ingest"] = {"source": str(tmp_path / "day.parquet"), "n_features": 12,
                                "column_ids": str(tmp_path / "ids.txt")}
    with pytest.raises(JobSpecError, match=r"\[data.ingest\] does not apply to a 'sliding-window' job.*"
                                           r"\[data.append\]"):
        parse_job(window, source="w.toml")
    pca_job = base_doc(tmp_path, str(store))
    pca_job["data"]["append"] = {"source": str(tmp_path / "{date}.parquet")}
    with pytest.raises(JobSpecError, match=r"\[data.append\] applies to sliding-window jobs only"):
        parse_job(pca_job, source="p.toml")
