"""``dppca-dask run --dry-run``: the checks of a run and the reservation tried on a copy; the ledger is left
byte-identical and nothing is written."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

_JOBS = str(Path(__file__).resolve().parents[1] / "jobs")
if _JOBS not in sys.path:
    sys.path.insert(0, _JOBS)

from jobs_helpers import base_doc, init_ledger, render  # noqa: E402

from dppca_dask.cli import main  # noqa: E402


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _job(tmp_path: Path, seed: int, **privacy: float) -> tuple[Path, dict[str, dict[str, object]]]:
    from dppca_dask import write_matrix

    rng = np.random.default_rng(seed)
    store = tmp_path / "m.zarr"
    write_matrix(str(store), sp.random(3000, 20, density=0.2, random_state=rng, format="csr"),
                 rows_per_partition=1000, schema="declared")
    doc = base_doc(tmp_path, str(store))
    doc["privacy"].update(privacy)
    init_ledger(doc)
    spec = tmp_path / "job.toml"
    spec.write_text(render(doc))
    return spec, doc


def test_dry_run_checks_and_leaves_the_ledger_byte_identical(tmp_path: Path, seed: int,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    spec, doc = _job(tmp_path, seed)
    ledger = Path(str(doc["budget"]["ledger"]))
    before = _digest(ledger)
    assert main(["run", str(spec), "--date", "2026-05-01", "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "job test-job@2026-05-01: dry run: would run; nothing was reserved or released" in text
    assert "budget: fits" in text
    assert main(["run", str(spec), "--date", "2026-05-01", "--dry-run", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dry_run"] is True and data["status"] == "would-run" and data["epsilon"] == 0.8
    assert _digest(ledger) == before
    assert not (tmp_path / "out").exists()  # no output written
    from dppca_dask.ledger import Ledger

    assert Ledger(ledger, read_only=True).entry("ds", "test-job@2026-05-01") is None


def test_dry_run_refuses_what_the_budget_cannot_cover(tmp_path: Path, seed: int,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from dp_accounting import GaussianDpEvent

    from dppca_dask.ledger import Ledger

    spec, doc = _job(tmp_path, seed)
    assert main(["run", str(spec), "--date", "2026-05-01", "--dry-run", "--json"]) == 0
    relation = json.loads(capsys.readouterr().out)["neighbouring"]
    ledger = Path(str(doc["budget"]["ledger"]))
    # Another job already holds most of the budget: a Gaussian of multiplier 5 spends about epsilon 0.97 at 1e-6.
    Ledger(ledger).reserve("ds", "other@2026-04-30", epsilon=0.97, delta=1e-7, events=[GaussianDpEvent(5.0)],
                           mechanism="analyze-gauss", neighbouring=relation)
    before = _digest(ledger)
    assert main(["run", str(spec), "--date", "2026-05-01", "--dry-run"]) == 3
    assert "ds" in capsys.readouterr().err
    assert _digest(ledger) == before


def test_dry_run_refuses_a_bad_store(tmp_path: Path, seed: int, capsys: pytest.CaptureFixture[str]) -> None:
    spec, doc = _job(tmp_path, seed)
    doc["data"]["store"] = str(tmp_path / "missing.zarr")
    spec.write_text(render(doc))
    before = _digest(Path(str(doc["budget"]["ledger"])))
    assert main(["run", str(spec), "--date", "2026-05-01", "--dry-run"]) == 2
    assert "missing.zarr" in capsys.readouterr().err
    assert _digest(Path(str(doc["budget"]["ledger"]))) == before
