"""``run --dry-run`` of a job that ingests its store from ``[data.ingest]`` first: it is planned from the spec and the
source, without ingesting, so it works before the first run (when the store does not exist yet). It says what the
ingest would be, checks what can be checked on the source (that it exists, its format, the declared width, an
AnnData layer, the store's path), tries the reservation planned from the declared width in a copy of the ledger, and
says plainly what it leaves to the run. It writes no store and leaves the ledger file byte for byte as it was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
from jobs_helpers import JOBS, base_doc

from dppca_dask.cli import main
from dppca_dask.ledger import Ledger

DATE = "2026-05-01"


def _dry_run(spec: Path, ledger: Path, capsys: Any, *extra: str) -> tuple[int, Any, str]:
    """``run --dry-run --json``: exit code, the report (``None`` on a refusal) and standard error; the ledger file is
    byte for byte the same afterwards."""
    before = ledger.read_bytes()
    code = main(["run", str(spec), "--dry-run", "--date", DATE, "--json", *extra])
    captured = capsys.readouterr()
    assert ledger.read_bytes() == before
    return code, (json.loads(captured.out) if code == 0 else None), captured.err


def _npz(path: Path, rng: np.random.Generator, n_cols: int = 30) -> Path:
    matrix = sp.random(500, n_cols, density=0.1, format="csr", random_state=np.random.RandomState(5)) * 0.2
    sp.save_npz(path, sp.csr_matrix(matrix))
    return path


def test_the_topics_example_dry_runs_right_after_budget_init(tmp_path: Path, capsys: Any) -> None:
    """The walkthrough: the sample corpus, ``budget init`` as the spec's comments say, then ``--dry-run``."""
    subprocess.run([sys.executable, str(JOBS / "sample_corpus.py"), str(tmp_path / "corpus"), "--documents", "2000",
                    "--words", "80", "--topics", "3"], check=True, capture_output=True)
    ledger = tmp_path / "ledger.sqlite"
    assert main(["budget", "init", "--ledger", str(ledger), "--dataset", "corpus", "--total-epsilon", "4",
                 "--total-delta", "1e-5"]) == 0
    capsys.readouterr()
    store = tmp_path / "corpus.zarr"
    overrides = {"data.store": str(store), "data.ingest.source": str(tmp_path / "corpus" / "corpus.npz"),
                 "data.ingest.n_features": 80, "budget.ledger": str(ledger), "output.path": str(tmp_path / "out"),
                 "mechanism.n_topics": 3}
    args = [f"--set={key}={json.dumps(value)}" for key, value in overrides.items()]
    code, checked, err = _dry_run(JOBS / "topics-nightly.toml", ledger, capsys, *args)
    assert code == 0, err
    assert checked["status"] == "would-run" and checked["neighbouring"] == "add/remove one row"
    assert checked["ingest"] == {"source": str(tmp_path / "corpus" / "corpus.npz"), "format": "npz",
                                 "n_features": 80, "layer": None, "column_ids": None}
    assert checked["releases"][0].startswith("whitening: 6 Gaussian releases")
    assert 0 < checked["remaining_epsilon_after"] < 4
    assert any("the dry run does not ingest" in note and "the word counts" in note for note in checked["notes"])
    assert not store.exists() and not (tmp_path / "out").exists()
    assert Ledger(ledger).budget("corpus").entries == ()
    # the text form says the same
    assert main(["run", str(JOBS / "topics-nightly.toml"), "--dry-run", "--date", DATE, *args]) == 0
    out = capsys.readouterr().out
    assert "note: the run would first ingest" in out and "reserves: whitening" in out and "budget: fits" in out


def test_the_dry_run_reserves_what_the_run_then_charges(tmp_path: Path, write_spec: Any, rng: np.random.Generator,
                                                        capsys: Any) -> None:
    doc = base_doc(tmp_path, str(tmp_path / "s.zarr"), n_iter=2)
    doc["data"]["ingest"] = {"source": str(_npz(tmp_path / "m.npz", rng)), "n_features": 30}
    doc["cluster"] = {"executor": "local"}
    spec = write_spec(doc)
    ledger = tmp_path / "ledger.sqlite"
    code, checked, err = _dry_run(spec, ledger, capsys)
    assert code == 0, err
    assert checked["executor"] == {"asked": "local", "executor": "in-process",
                                   "reason": "executor='local' was asked for"}
    assert not (tmp_path / "s.zarr").exists()
    assert main(["run", str(spec), "--date", DATE, "--json"]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["privacy"]["neighbouring"] == checked["neighbouring"]
    assert float(Ledger(ledger).budget("ds").remaining_epsilon) == pytest.approx(checked["remaining_epsilon_after"])


def test_the_executor_the_partition_count_decides_is_left_to_the_run(tmp_path: Path, write_spec: Any,
                                                                     rng: np.random.Generator, capsys: Any) -> None:
    import dask.config

    doc = base_doc(tmp_path, str(tmp_path / "s.zarr"), n_iter=2)
    doc["data"]["ingest"] = {"source": str(_npz(tmp_path / "m.npz", rng)), "n_features": 30}
    spec = write_spec(doc)
    ledger = tmp_path / "ledger.sqlite"
    with dask.config.set({"dppca_dask.cluster.use-active-client": False}):
        code, checked, err = _dry_run(spec, ledger, capsys)
        assert code == 0, err
        assert checked["executor"]["executor"] == "undecided"
        assert "decided by the run from the ingested store's partition count" in checked["executor"]["reason"]
        with dask.config.set({"dppca_dask.executor.in-process-max-columns": 10}):  # the width alone decides
            code, checked, err = _dry_run(spec, ledger, capsys)
            assert code == 0, err
            assert checked["executor"]["executor"] == "cluster"
            assert checked["executor"]["reason"].startswith("30 columns above the in-process limit 10")


def test_a_reservation_that_needs_the_row_count_is_not_tried_and_the_dry_run_says_so(
        tmp_path: Path, write_spec: Any, rng: np.random.Generator, capsys: Any) -> None:
    doc = base_doc(tmp_path, str(tmp_path / "s.zarr"))
    doc["mechanism"] = {"name": "private-low-rank", "rank": 2}
    doc["data"]["ingest"] = {"source": str(_npz(tmp_path / "m.npz", rng)), "n_features": 30}
    spec = write_spec(doc)
    ledger = tmp_path / "ledger.sqlite"
    code, checked, err = _dry_run(spec, ledger, capsys)
    assert code == 0, err
    assert checked["remaining_epsilon_after"] is None and checked["releases"] == []
    assert any(note.startswith("the reservation is not tried: a low-rank release is planned and checked against "
                               "the store's number of rows") for note in checked["notes"])
    doc["budget"]["dataset"] = "other"  # the key is still checked: a key without a budget is refused
    del doc["budget"]["total_epsilon"], doc["budget"]["total_delta"]
    code, _, err = _dry_run(write_spec(doc), ledger, capsys)
    assert code == 2 and "dataset 'other' has no budget" in err


def test_the_dry_run_checks_the_layer_of_a_source_not_ingested_yet(tmp_path: Path, write_spec: Any,
                                                                   rng: np.random.Generator, capsys: Any) -> None:
    import anndata

    counts = rng.poisson(2.0, size=(200, 20)).astype(np.float32)
    anndata.AnnData(X=sp.csr_matrix(counts), layers={"counts": sp.csr_matrix(counts)}).write_h5ad(tmp_path / "c.h5ad")
    doc = base_doc(tmp_path, str(tmp_path / "cells.zarr"), n_iter=2)
    doc["data"]["ingest"] = {"source": str(tmp_path / "c.h5ad"), "layer": "counts", "n_features": 20}
    ledger = tmp_path / "ledger.sqlite"
    code, checked, err = _dry_run(write_spec(doc), ledger, capsys)
    assert code == 0, err
    assert checked["layer"] == "counts" and checked["ingest"]["format"] == "anndata"
    doc["data"]["ingest"]["layer"] = "missing"
    code, _, err = _dry_run(write_spec(doc), ledger, capsys)
    assert code == 2 and "its layers: counts" in err
    assert not (tmp_path / "cells.zarr").exists()


def test_a_store_path_the_ingest_would_not_replace_is_refused(tmp_path: Path, write_spec: Any,
                                                              rng: np.random.Generator, capsys: Any) -> None:
    (tmp_path / "s.zarr").write_text("not a store")
    doc = base_doc(tmp_path, str(tmp_path / "s.zarr"))
    doc["data"]["ingest"] = {"source": str(_npz(tmp_path / "m.npz", rng)), "n_features": 30}
    code, _, err = _dry_run(write_spec(doc), tmp_path / "ledger.sqlite", capsys)
    assert code == 2 and "[data] store:" in err and "is a file" in err


def test_a_missing_source_is_refused(tmp_path: Path, write_spec: Any, capsys: Any) -> None:
    doc = base_doc(tmp_path, str(tmp_path / "s.zarr"))
    doc["data"]["ingest"] = {"source": str(tmp_path / "none.npz"), "n_features": 30}
    code, _, err = _dry_run(write_spec(doc), tmp_path / "ledger.sqlite", capsys)
    assert code == 2 and "[data.ingest] source" in err and "does not exist" in err
