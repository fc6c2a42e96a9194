"""Centring in jobs: a pca job centres by default where ``dppca-dask pca`` does, its dry run shows the private mean
and the explained variance in what the reservation covers, and the run releases them (charged as planned)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jobs_helpers import base_doc

from dppca_dask.cli import main
from dppca_dask.ledger import CHARGED, Ledger

DATE = "2026-06-01"


def _doc(tmp_path: Path, store: str, **mechanism) -> dict:
    doc = base_doc(tmp_path, store)
    doc["mechanism"] = {"name": "adaptive-power", "n_iter": 2, **mechanism}
    return doc


def test_dry_run_shows_the_centring_and_its_events(tmp_path: Path, small_store: str, write_spec, capsys) -> None:
    spec = write_spec(_doc(tmp_path, small_store))
    assert main(["run", str(spec), "--dry-run", "--date", DATE, "--json"]) == 0
    centred = json.loads(capsys.readouterr().out)
    assert centred["parameters"]["center"] == "private"
    assert centred["releases"][0].startswith("center: private (the mean of the clipped rows: one Gaussian release")
    assert centred["releases"][1].startswith("explained variance: one Gaussian release")
    assert main(["run", str(spec), "--dry-run", "--date", DATE]) == 0
    text = capsys.readouterr().out
    assert "center=private" in text and "reserves: center: private" in text

    plain = write_spec(_doc(tmp_path, small_store, center="none"))
    assert main(["run", str(plain), "--dry-run", "--date", DATE, "--json"]) == 0
    uncentred = json.loads(capsys.readouterr().out)
    assert uncentred["parameters"]["center"] == "none"
    assert not any(line.startswith(("center", "explained")) for line in uncentred["releases"])
    # both fit the dataset's budget and spend all of it: the centred one's releases are calibrated jointly to its
    # total, so the ledger's PLD composition of its events is within 1% of the uncentred one's
    assert 0 < uncentred["remaining_epsilon_after"] < 1.0 and 0 < centred["remaining_epsilon_after"] < 1.0
    assert centred["remaining_epsilon_after"] == pytest.approx(uncentred["remaining_epsilon_after"], abs=0.01)
    assert Ledger(tmp_path / "ledger.sqlite").budget("ds").entries == ()


def test_a_centred_job_releases_the_mean_and_the_variance(tmp_path: Path, small_store: str, local_client,
                                                          write_spec, capsys) -> None:
    spec = write_spec(_doc(tmp_path, small_store, n_components=2))
    assert main(["run", str(spec), "--scheduler", local_client.scheduler.address, "--date", DATE, "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["status"] == "completed" and outcome["ledger"]["status"] == CHARGED
    result = json.loads((Path(outcome["output"]) / "result.json").read_text())
    assert len(result["mean"]) == 300 and len(result["explained_variance"]) == 2
    assert json.loads((Path(outcome["output"]) / "job.json").read_text())["spec"]["mechanism"]["center"] == "private"
    assert not (Path(outcome["output"]) / "checkpoint.json").exists()
