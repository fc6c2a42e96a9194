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
    (lambda d: d.update(mechanism={"name": "private-low-rank"}), r"\[mechanism\] rank is required"),
    (lambda d: d["job"].update(name="bad name!"), r"\[job\] name must be letters"),
    (lambda d: d["output"].update(path="out/{user}"), r"only \{name\}, \{id\} and \{date\}"),
    (lambda d: d.update(cluster={"tls_ca_file": "ca.pem"}), r"TLS needs all of tls_ca_file, tls_cert and tls_key"),
    (lambda d: d.update(cluster={"address": "tcp://h:1", "tls_ca_file": "a", "tls_cert": "b", "tls_key": "c"}),
     r"must start with tls://"),
    (lambda d: d.update(cluster={"address": "tcp://h:1", "n_workers": 2}), r"embedded cluster only"),
    (lambda d: d.update(cluster={"n_workers": 0}), r"n_workers must be an integer >= 1"),
    (lambda d: d["data"].update(ingest={"source": "x.parquet", "row_col": "id"}), r"\[data.ingest\]: unknown key"),
    (lambda d: d.update(mechanism=[1]), r"\[mechanism\] must be a table"),
    (lambda d: d["mechanism"].update(center="mean"), r'\[mechanism\] center must be "none" or "private"'),
    (lambda d: d.update(mechanism={"name": "private-power", "center": "private"}),
     r'center = "private" applies to adaptive-power, adaptive-power-block, analyze-gauss'),
    (lambda d: d.update(mechanism={"name": "topics"}), r"\[mechanism\] n_topics is required for 'topics'"),
    (lambda d: d.update(mechanism={"name": "topics", "n_topics": 0}), r"n_topics must be an integer >= 1; got 0"),
    (lambda d: d.update(mechanism={"name": "topics", "n_topics": True}), r"n_topics must be an integer >= 1"),
    (lambda d: d.update(mechanism={"name": "topics", "n_topics": 3, "n_restarts": 2.5}),
     r"\[mechanism\] n_restarts must be an integer >= 1"),
    (lambda d: d.update(mechanism={"name": "topics", "n_topics": 3, "alpha0": -1.0}),
     r"\[mechanism\] alpha0 must be a finite number >= 0 \(0: the single-topic model"),
    (lambda d: d.update(mechanism={"name": "topics", "n_topics": 3, "pca_share": 1.0}),
     r"\[mechanism\] pca_share must be a number in \(0, 1\)"),
    (lambda d: d.update(mechanism={"name": "topics", "n_topics": 3, "pair_bound": 0}),
     r"\[mechanism\] pair_bound must be a number in \(0, 1\]"),
    (lambda d: d.update(mechanism={"name": "topics", "n_topics": 3, "tensor_clip": 2.0}),
     r"\[mechanism\] tensor_clip must be a number in \(0, 1\]"),
    (lambda d: d.update(mechanism={"name": "topics", "n_topics": 3, "persist": "yes"}),
     r"\[mechanism\] persist must be true or false"),
    (lambda d: d.update(mechanism={"name": "topics", "n_topics": 3, "center": "private"}),
     r"unknown parameter\(s\) center for 'topics'"),
    (lambda d: d.update(mechanism={"name": "topics", "n_topics": 3, "seed": 1}),
     r"unknown parameter\(s\) seed for 'topics'.*operating system's entropy"),
    (lambda d: (d.update(mechanism={"name": "topics", "n_topics": 301}), d["data"].update(n_features=300)),
     r"n_topics must be at most the store's width n_features=300; got 301"),
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


def test_center_defaults_as_the_pca_command() -> None:
    """A pca job centres by default where `dppca-dask pca` does (adaptive power, its block form, Analyze Gauss),
    and the default is written into the parameters, so that the plan, the run and job.json agree."""
    def parse(mechanism: dict) -> dict:
        doc = {"job": {"name": "j"}, "data": {"store": "s.zarr"}, "mechanism": mechanism,
               "privacy": {"epsilon": 0.5, "delta": 1e-7}, "budget": {"ledger": "l.sqlite", "dataset": "ds"},
               "output": {"path": "out"}}
        return dict(parse_job(doc, base_dir="/tmp").parameters)

    assert parse({"name": "adaptive-power"})["center"] == "private"
    assert parse({"name": "analyze-gauss"})["center"] == "private"
    assert parse({"name": "adaptive-power-block", "n_components": 2})["center"] == "private"
    assert parse({"name": "private-power"})["center"] == "none"
    assert parse({"name": "adaptive-power", "center": "none"})["center"] == "none"
    assert parse({"name": "adaptive-power", "center": True})["center"] == "private"
    assert parse({"name": "analyze-gauss", "center": False})["center"] == "none"
    assert "center" not in parse({"name": "private-low-rank", "rank": 2})
    topics = parse({"name": "topics", "n_topics": 4, "alpha0": 0.5})
    assert topics == {"n_topics": 4, "alpha0": 0.5}
