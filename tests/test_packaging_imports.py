"""Start-up cost: ``import dppca_dask`` and ``dppca-dask --version`` / ``--help`` load no heavy dependency."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("dp_accounting", "distributed", "dask.distributed", "zarr", "scipy", "numba")


def _loaded_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nimport json\nprint(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_loads_no_heavy_dependency() -> None:
    assert _loaded_after("import dppca_dask") == []


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_cli_version_and_help_load_no_heavy_dependency(flag: str) -> None:
    code = f"from dppca_dask.cli import main\ntry:\n    main([{flag!r}])\nexcept SystemExit:\n    pass"
    assert _loaded_after(code) == []


def test_public_names_resolve_on_use() -> None:
    import dppca_dask

    assert callable(dppca_dask.pca) and callable(dppca_dask.lowrank) and callable(dppca_dask.write_matrix)
    assert dppca_dask.DPPCA.__name__ == "DPPCA"
    assert set(dppca_dask.__all__) <= set(dir(dppca_dask))
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        dppca_dask.not_a_name  # noqa: B018


def test_ingest_and_lowrank_stay_the_functions_after_their_modules_are_imported() -> None:
    import dppca_dask
    import dppca_dask.api._lowrank  # noqa: F401
    import dppca_dask.ingest.svmlight  # noqa: F401  (binds the subpackage on the parent, as imports do)
    from dppca_dask import ingest, lowrank

    assert callable(ingest) and callable(dppca_dask.ingest) and callable(lowrank) and callable(dppca_dask.lowrank)
    assert dppca_dask.ingest.__module__ == "dppca_dask.ingest"
    assert dppca_dask.lowrank.__module__ == "dppca_dask.api._lowrank"


def test_the_four_entry_points_sit_side_by_side_in_api() -> None:
    import dppca_dask
    from dppca_dask import api

    for name in ("pca", "lowrank", "window", "topics"):
        assert getattr(api, name) is getattr(dppca_dask, name), name
        assert getattr(dppca_dask, name).__module__ == f"dppca_dask.api._{name}", name
    assert set(api.__all__) <= set(dir(api))
    # moved, not copied: no module is left at the old paths
    package = Path(dppca_dask.__file__).parent
    assert not (package / "lowrank.py").exists() and not (package / "api.py").exists()
    assert not callable(getattr(importlib.import_module("dppca_dask.methods.window"), "window", None))
    assert not callable(getattr(importlib.import_module("dppca_dask.methods.tensor"), "topics", None))  # a module


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    from dppca_dask.cli import _SUBCOMMANDS, main

    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for name in _SUBCOMMANDS:
        assert name in text
    assert "differentially private principal components of a store" in text


def test_progress_shows_in_a_jupyter_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from dppca_dask import _progress

    assert not _progress.in_notebook() or "ipykernel" in sys.modules
    shell = types.SimpleNamespace(kernel=object())
    fake_ipython = types.ModuleType("IPython")
    fake_ipython.get_ipython = lambda: shell  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", fake_ipython)
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    assert _progress.in_notebook()
    with _progress.progress_bar(total=3, desc="x") as bar:
        assert not bar.disable
    shell.kernel = None  # a terminal IPython: no kernel, no widget
    assert not _progress.in_notebook()


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command path of the parser (``()``, ``("pca",)``, ``("budget", "init")``, ...)."""
    found = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.extend(_parsers(sub, (*path, name)))
    return found


def test_every_command_renders_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse formats each help text with ``%``: an unescaped one ("10% of the budget") makes ``--help`` of that
    command fail with a TypeError (``dppca-dask pca --help`` did). Every command and subcommand, as users call it."""
    from dppca_dask.cli import build_parser, main

    paths = _parsers(build_parser())
    assert ("pca",) in paths and len(paths) > len({"ingest", "pca", "budget"})
    for path in paths:
        with pytest.raises(SystemExit) as exc:
            main([*path, "--help"])
        assert exc.value.code == 0, path
        assert capsys.readouterr().out.startswith("usage: dppca-dask"), path
