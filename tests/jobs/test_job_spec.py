"""Job specs: the examples parse, relative paths follow the file, and every mistake is a clear error (exit 2)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from jobs_helpers import JOBS, base_doc

from dppca_dask.cli import main
from dppca_dask.errors import JobSpecError
from dppca_dask.jobs import load_job, parse_job


@pytest.mark.parametrize("name", sorted(p.name for p in JOBS.glob("*.toml")))
def test_examples_parse(name: str) -> None:
    spec = load_job(JOBS / name)
    assert spec.name and spec.budget.total_epsilon >= spec.epsilon
    assert Path(spec.budget.ledger).is_absolute() and Path(spec.data.store).is_absolute()
    assert spec.output_dir("2026-01-02").endswith("2026-01-02")


def test_relative_paths_are_relative_to_the_spec_file_and_overrides_apply() -> None:
    spec = load_job(JOBS / "example.toml", overrides=["privacy.epsilon=0.25", 'cluster.address="tcp://h:1"',
                                                      "mechanism.n_iter=7"])
    assert spec.data.store == str((JOBS / ".." / "build" / "jobs" / "w8a.zarr").resolve())
    assert spec.data.ingest is not None and spec.data.ingest["source"].endswith("shared/data/w8a.svm")
    assert (spec.epsilon, spec.cluster.address, spec.parameters["n_iter"]) == (0.25, "tcp://h:1", 7)
    assert spec.job_id("2026-03-04") == "w8a-pca@2026-03-04"
    assert spec.kind == "pca"


def _doc(tmp_path: Path) -> dict:
    return base_doc(tmp_path, "store.zarr")


CASES = [
    (lambda d: d.update(extra={"a": 1}), r"unknown table\(s\) \[extra\]"),
    (lambda d: d.pop("budget"), r"missing table \[budget\]"),
    (lambda d: d["budget"].update(total_epsilom=1.0), r"\[budget\]: unknown key\(s\) total_epsilom"),
    (lambda d: d["budget"].pop("total_delta"), r"\[budget\]: give both total_epsilon and total_delta"),
    (lambda d: d["budget"].pop("ledger"), r"\[budget\] ledger is required"),
    (lambda d: d["budget"].update(allow_new_store="yes"), r"\[budget\] allow_new_store must be true or false"),
    (lambda d: d["data"].update(n_features=0), r"\[data\] n_features must be an integer >= 1"),
    (lambda d: d["privacy"].update(epsilon="1"), r"\[privacy\] epsilon must be a number"),
    (lambda d: d["privacy"].update(epsilon=-1.0), r"\[privacy\] epsilon must be finite and > 0"),
    (lambda d: d["privacy"].update(delta=1.5), r"\[privacy\] delta must be in \(0, 1\)"),
    (lambda d: d["privacy"].update(epsilon=2.0), r"more than the dataset's whole budget"),
    (lambda d: d["mechanism"].update(name="exact"), r"not differentially private"),
    (lambda d: d["mechanism"].update(name="magic"), r"unknown mechanism 'magic'"),
    (lambda d: d["mechanism"].update(seed=3), r"unknown parameter\(s\) seed.*operating system's entropy"),
    (lambda d: d["mechanism"].update(calibration="paper"), r"unknown parameter\(s\) calibration"),
    (lambda d: d["mechanism"].update(n_iters=3), r"unknown parameter\(s\) n_iters for 'adaptive-power'"),
    (lambda d: d["mechanism"].update(name="private-low-rank"), r"\[mechanism\] rank is required"),
    (lambda d: d["job"].update(name="bad name!"), r"\[job\] name must be letters"),
    (lambda d: d["output"].update(path="out/{user}"), r"only \{name\}, \{id\} and \{date\}"),
    (lambda d: d.update(cluster={"tls_ca_file": "ca.pem"}), r"TLS needs all of tls_ca_file, tls_cert and tls_key"),
    (lambda d: d.update(cluster={"address": "tcp://h:1", "tls_ca_file": "a", "tls_cert": "b", "tls_key": "c"}),
     r"must start with tls://"),
    (lambda d: d.update(cluster={"address": "tcp://h:1", "n_workers": 2}), r"embedded cluster only"),
    (lambda d: d.update(cluster={"n_workers": 0}), r"n_workers must be an integer >= 1"),
    (lambda d: d["data"].update(ingest={"source": "x.parquet", "row_col": "id"}), r"\[data.ingest\]: unknown key"),
    (lambda d: d.update(mechanism=[1]), r"\[mechanism\] must be a table"),
]


@pytest.mark.parametrize(("mutate", "message"), CASES)
def test_every_spec_error_is_clear(tmp_path: Path, mutate, message: str) -> None:
    doc = copy.deepcopy(_doc(tmp_path))
    mutate(doc)
    with pytest.raises(JobSpecError, match=message):
        parse_job(doc, source="job.toml", base_dir=str(tmp_path))


def test_cli_exit_code_2_for_invalid_and_missing_specs(tmp_path: Path, write_spec, capsys) -> None:
    doc = _doc(tmp_path)
    doc["budget"]["totl"] = 1
    assert main(["run", str(write_spec(doc))]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dppca-dask run: error:") and "unknown key(s) totl" in err and "\n" not in err
    assert main(["run", str(tmp_path / "missing.toml")]) == 2
    assert "not found" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text("[job\nname = 1\n")
    assert main(["run", str(bad)]) == 2
    assert "not valid TOML" in capsys.readouterr().err
    assert main(["run", str(write_spec(_doc(tmp_path))), "--date", "2026-13-01"]) == 2
    assert "YYYY-MM-DD" in capsys.readouterr().err
    assert main(["run", str(write_spec(_doc(tmp_path))), "--set", "nodot=1"]) == 2
    assert "TABLE.KEY=VALUE" in capsys.readouterr().err


def test_a_missing_store_fails_before_anything_is_reserved(tmp_path: Path, write_spec, capsys) -> None:
    assert main(["run", str(write_spec(base_doc(tmp_path, str(tmp_path / "absent.zarr"))))]) == 2
    assert "absent.zarr" in capsys.readouterr().err
    from dppca_dask.ledger import Ledger

    assert Ledger(tmp_path / "ledger.sqlite").budget("ds").entries == ()  # nothing was reserved


def test_totals_are_optional_and_checked_against_the_ledger(tmp_path: Path) -> None:
    doc = _doc(tmp_path)
    for key in ("total_epsilon", "total_delta"):
        doc["budget"].pop(key)
    doc["budget"]["allow_new_store"] = True
    doc["data"]["n_features"] = 300
    spec = parse_job(doc, source="job.toml", base_dir=str(tmp_path))
    assert (spec.budget.total_epsilon, spec.budget.total_delta, spec.budget.allow_new_store) == (None, None, True)
    assert spec.data.n_features == 300 and spec.to_dict()["data"]["n_features"] == 300
    assert "total_epsilon" not in spec.to_dict()["budget"]
