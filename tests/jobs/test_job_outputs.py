"""Consumable job outputs: ``releases.parquet`` (one row per release) and the ``latest`` pointer beside the dated
output directories; job outputs follow ``DPPCA_DASK_FILE_MODE=umask``."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from jobs_helpers import base_doc, daily_store

from dppca_dask.jobs import parse_job, run_job
from dppca_dask.jobs.outputs import latest_output, load_latest, load_output, read_releases, releases_root


@pytest.fixture
def doc(tmp_path: Path, write_spec) -> dict:
    store = daily_store(tmp_path / "days.zarr")
    doc = base_doc(tmp_path, store, n_iter=2)
    doc["privacy"]["epsilon"] = 0.3
    doc["cluster"] = {"executor": "local"}
    write_spec(doc)
    return doc


def test_the_table_has_one_row_per_release_and_latest_follows_the_newest_date(doc: dict, tmp_path: Path) -> None:
    spec = parse_job(doc, source="job.toml", base_dir=str(tmp_path))
    root = tmp_path / "out" / "test-job"
    assert releases_root(spec, "2026-01-02") == str(root)
    run_job(spec, date="2026-01-02")
    run_job(spec, date="2026-01-01")  # a backfilled date: latest stays on the newest
    run_job(spec, date="2026-01-02")  # already completed: its row is replaced, not added
    rows = pq.read_table(root / "releases.parquet").to_pylist()
    assert [r["date"] for r in rows] == ["2026-01-01", "2026-01-02"]
    first, second = rows
    assert second["job_id"] == "test-job@2026-01-02" and second["status"] == "already-completed"
    assert 0.299 < first["epsilon"] <= 0.3 and 0 < first["delta"] <= 1e-7  # the report's figures
    assert first["relation"] and first["mechanism"] == "adaptive-power" and first["private"] is True
    assert first["components"] == str(root / "2026-01-01" / "components.zarr")
    assert os.path.isdir(first["components"])
    assert os.readlink(root / "latest") == "2026-01-02"
    assert (root / "latest" / "result.json").exists()
    assert not [p for p in root.iterdir() if p.name.endswith(".tmp") or p.name.startswith(".latest.")]
    assert stat.S_IMODE((root / "releases.parquet").stat().st_mode) == 0o600  # owner-only by default
    assert read_releases(str(root)) == rows  # what reads a bucket's table reads a directory's too
    assert latest_output(str(root)) == str(root / "2026-01-02")
    latest = load_latest(str(root))
    assert latest.components.shape == load_output(str(root / "2026-01-01")).components.shape


def test_reading_releases_where_none_were_recorded(tmp_path: Path) -> None:
    from dppca_dask.errors import StoreNotFoundError

    assert read_releases(str(tmp_path)) == [] and latest_output(str(tmp_path)) is None
    with pytest.raises(StoreNotFoundError, match="no release is recorded"):
        load_latest(str(tmp_path))
    with pytest.raises(StoreNotFoundError, match="holds no job result"):
        load_output(str(tmp_path))


def test_job_outputs_follow_the_umask_when_asked(doc: dict, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("DPPCA_DASK_FILE_MODE", "umask")
    old = os.umask(0o022)
    try:
        run_job(parse_job(doc, source="job.toml", base_dir=str(tmp_path)), date="2026-01-01")
    finally:
        os.umask(old)
    out = tmp_path / "out" / "test-job" / "2026-01-01"
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    for path in (out / "result.json", out / "job.json", tmp_path / "out" / "test-job" / "releases.parquet"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_the_command_line_lists_the_releases_and_the_newest(doc: dict, tmp_path: Path, capsys) -> None:
    import json

    from dppca_dask.cli import main

    spec = parse_job(doc, source="job.toml", base_dir=str(tmp_path))
    root = tmp_path / "out" / "test-job"
    run_job(spec, date="2026-01-02")
    run_job(spec, date="2026-01-01")  # a backfilled date: the newest stays 2026-01-02
    capsys.readouterr()
    assert main(["releases", str(root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["date", "job_id", "status", "mechanism", "epsilon", "delta", "reliable", "output"]
    assert [line.split()[0] for line in lines[1:]] == ["2026-01-01", "2026-01-02"]
    assert lines[2].split()[1] == "test-job@2026-01-02" and lines[2].split()[-1] == str(root / "2026-01-02")
    assert lines[1].split()[6] in {"yes", "no"}  # from the released diagnostics
    assert main(["releases", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["releases"] == json.loads(json.dumps(read_releases(str(root))))
    assert main(["releases", str(root), "--latest", "--json"]) == 0
    newest = json.loads(capsys.readouterr().out)
    assert newest["date"] == "2026-01-02" and newest["output"] == latest_output(str(root))
    # Nothing recorded: an empty listing, and no newest (exit 2); no directory at all: exit 2
    assert main(["releases", str(tmp_path)]) == 0 and "no release is recorded" in capsys.readouterr().out
    assert main(["releases", str(tmp_path), "--latest"]) == 2
    assert "no release is recorded" in capsys.readouterr().err
    assert main(["releases", str(tmp_path / "missing")]) == 2
    assert "is not a directory" in capsys.readouterr().err


def test_a_damaged_table_of_releases_is_named(tmp_path: Path) -> None:
    from dppca_dask.cli import main
    from dppca_dask.errors import StoreCorruptError

    (tmp_path / "releases.parquet").write_bytes(b"not a parquet file")
    with pytest.raises(StoreCorruptError, match="releases.parquet' cannot be read .*remove it"):
        read_releases(str(tmp_path))
    assert main(["releases", str(tmp_path)]) == 2
