"""The package type-checks: full annotations and mypy on the package (STYLE.md), with the configuration of
``[tool.mypy]`` in pyproject.toml. ``make test`` installs mypy (the ``typecheck`` extra), so there the check runs;
a new release of numpy's or zarr's type annotations that no longer agrees with the code fails it, as intended."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None,
                    reason="mypy is not installed: `make test` installs it (pip install -e '.[typecheck]')")
def test_the_package_type_checks(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache")], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "Success: no issues found" in out.stdout
