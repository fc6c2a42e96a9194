"""``--log-format json``: every log line on standard error is one JSON object (time, level, logger, message)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_json_log_lines(tmp_path: Path) -> None:
    src = tmp_path / "s.svm"
    src.write_text("1 1:0.5 2:1\n-1 2:1 3:0.2\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "dppca_dask", "--log-format", "json", "-v", "ingest", str(src),
                           "--out", str(tmp_path / "s.zarr"), "--n-features", "3"], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stderr.splitlines() if line.strip()]
    assert lines and all(set(line) >= {"time", "level", "logger", "message"} for line in lines)
    assert any(line["logger"].startswith("dppca_dask") and line["level"] == "INFO" for line in lines)
    assert proc.stdout.startswith("ingested ")  # the summary stays on standard output


def test_the_subcommand_is_found_after_the_log_format() -> None:
    from dppca_dask.cli import _command_of

    assert _command_of(["--log-format", "json", "-v", "run", "job.toml"]) == "run"
    assert _command_of(["-q", "info", "s.zarr"]) == "info"
