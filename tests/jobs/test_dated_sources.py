"""Dated sources: ``{date}`` and ``{date:%Y/%m/%d}`` in ``[data.ingest] source`` (and ``[data.append]``) name the
run's day's file, so a nightly job reads each night's extract instead of re-analysing one static file."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobs_helpers import base_doc

from dppca_dask.errors import JobSpecError
from dppca_dask.jobs import parse_job, run_job
from dppca_dask.jobs.spec import dated
from dppca_dask.storage import open_matrix


def test_dated_formats() -> None:
    assert dated("/x/{date}.svm", "2026-11-05") == "/x/2026-11-05.svm"
    assert dated("/x/{date:%Y/%m/%d}/part.svm", "2026-11-05") == "/x/2026/11/05/part.svm"
    assert dated("/x/dt={date:%Y%m%d}", "2026-11-05") == "/x/dt=20261105"
    assert dated("/x/{date}.svm", None) == "/x/{date}.svm"


@pytest.mark.parametrize("source", ["/x/{day}.svm", "/x/{date.year}{", "/x/{0}.svm"])
def test_other_placeholders_are_refused_at_load(tmp_path: Path, source: str) -> None:
    doc = base_doc(tmp_path, str(tmp_path / "s.zarr"))
    doc["data"]["ingest"] = {"source": source, "n_features": 4}
    with pytest.raises(JobSpecError, match=r"only \{date\}"):
        parse_job(doc, source="job.toml", base_dir=str(tmp_path))


def test_each_night_ingests_its_own_extract(tmp_path: Path, write_spec) -> None:
    for day, rows in (("05", 3), ("06", 5)):
        folder = tmp_path / "extracts" / "2026" / "11" / day
        folder.mkdir(parents=True)
        (folder / "part.svm").write_text("".join(f"1 {1 + r % 4}:0.5\n" for r in range(rows)))
    doc = base_doc(tmp_path, str(tmp_path / "s.zarr"), n_iter=2)
    doc["data"]["ingest"] = {"source": str(tmp_path / "extracts" / "{date:%Y/%m/%d}" / "part.svm"), "n_features": 4}
    doc["privacy"]["epsilon"] = 0.3
    doc["cluster"] = {"executor": "local"}
    write_spec(doc)
    spec = parse_job(doc, source="job.toml", base_dir=str(tmp_path))
    assert run_job(spec, date="2026-11-05").status == "completed"
    assert open_matrix(tmp_path / "s.zarr").n_rows == 3
    assert run_job(spec, date="2026-11-06").status == "completed"  # the same dataset key: the same store identity
    assert open_matrix(tmp_path / "s.zarr").n_rows == 5
    with pytest.raises(JobSpecError, match=r"2026/11/07/part\.svm' does not exist"):
        run_job(spec, date="2026-11-07")
