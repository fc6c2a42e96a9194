"""A job's outcome prints in a few lines: its id and status, where the result is, the ledger's charge and the
result's own first line (the result's repr was nested whole before, arrays' summaries and all)."""

from __future__ import annotations

from pathlib import Path

from jobs_helpers import base_doc

from dppca_dask.jobs.runner import run_job
from dppca_dask.jobs.spec import load_job


def test_a_job_outcome_is_short(tmp_path: Path, small_store: str, local_client, write_spec) -> None:
    spec = load_job(write_spec(base_doc(tmp_path, small_store)))
    outcome = run_job(spec, date="2026-01-01", client=local_client)
    text = repr(outcome)
    lines = text.splitlines()
    assert lines[0] == f"JobOutcome(job_id={outcome.job_id!r}, status='completed')"
    assert lines[1] == f"  output: {outcome.output}"
    assert lines[2].startswith(f"  ledger: dataset {outcome.ledger_entry.dataset!r}, (") and "charged" in lines[2]
    assert lines[-1] == "  result: " + repr(outcome.result).splitlines()[0]
    assert len(lines) <= 5 and max(map(len, lines)) <= 200
