"""The base install works without the optional dependencies: without pyarrow everything but Parquet ingestion runs,
and a Parquet input names the extra to install."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def _run_without(modules: tuple[str, ...], code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    block = "".join(f"sys.modules[{m!r}] = None\n" for m in modules)  # import of these now raises ImportError
    script = f"import sys\n{block}{textwrap.dedent(code)}"
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})


@pytest.mark.slow
def test_base_install_runs_without_pyarrow_and_parquet_names_the_extra(tmp_path: Path) -> None:
    (tmp_path / "a.svm").write_text("1 1:0.5 3:2\n-1 2:1\n")
    (tmp_path / "t.parquet").write_bytes(b"PAR1" + b"\0" * 16 + b"PAR1")
    out = _run_without(("pyarrow", "sklearn"), """
        from dppca_dask import ingest, pca
        from dppca_dask.errors import MissingExtraError
        store = ingest("a.svm", "a.zarr", n_features=3)
        result = pca(store.path, epsilon=1.0, delta=1e-6, mechanism="exact", client="local")
        print("components", result.components.shape)
        try:
            ingest("t.parquet", "t.zarr")
        except MissingExtraError as exc:
            print("MISSING", exc)
    """, tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "components (1, 3)" in out.stdout
    assert "t.parquet') needs the optional dependency 'pyarrow', which is not installed" in out.stdout
    assert "pip install 'dppca-dask[parquet]'" in out.stdout


def test_pyproject_floors_equal_the_lowest_constraints() -> None:
    import re
    import tomllib

    root = Path(__file__).resolve().parent.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in ("parquet", "anndata", "sklearn", "test", "numba"):
        requirements += project["optional-dependencies"][extra]
    floors = {}
    for requirement in requirements:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?>=([0-9][^,]*)(?:,.*)?", requirement)
        assert match, f"no floor in {requirement!r}"
        floors[match.group(1).lower()] = match.group(2)
    pins = {}
    for line in (root / "ci" / "lowest-constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):  # other lines cap dependencies of dependencies
            name, version = line.split("==")
            pins[name.strip().lower()] = version.strip()
    assert set(pins) == set(floors), set(pins) ^ set(floors)
    for name, floor in floors.items():
        pinned = pins[name].split(".")
        assert pinned[: len(floor.split("."))] == floor.split("."), (name, floor, pins[name])


def test_the_dashboard_extra_installs_bokeh() -> None:
    """distributed's dashboard needs bokeh, which no other extra installs (``pip install dppca_dask[dashboard]``)."""
    import tomllib

    root = Path(__file__).resolve().parent.parent
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("bokeh>=3.1") for r in extras["dashboard"])
