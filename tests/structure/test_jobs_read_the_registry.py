"""``jobs/`` reads the registry for every entry kind: no module of it names an entry kind or a mechanism, or imports
a family's module or an entry point's module (a new family registers its entry and needs no branch in ``jobs/``)."""

from __future__ import annotations

import ast
from pathlib import Path

import dppca_dask
from dppca_dask.methods import entry_names, mechanism_names

JOBS = Path(dppca_dask.__file__).parent / "jobs"
#: What ``jobs/`` may import of the layers below the entry points: the registry and the errors, the storage, the
#: ledger, the coordinator... but no family and no entry point.
_FAMILY_PREFIXES = ("dppca_dask.api", "dppca_dask.methods.", "dppca_dask.estimator", "dppca_dask.pp")
_REGISTRY = ("dppca_dask.methods", "dppca_dask.methods._registry")


def _names() -> set[str]:
    """Every entry kind and every registered mechanism name (and the job-only ``sliding-window``); not ``auto``,
    which is also ``[cluster] executor``'s default."""
    return {*entry_names(), *mechanism_names(), "sliding-window"} - {"auto"}


def _imported(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.lineno, node.module))
            if node.module == "dppca_dask.methods":  # ``from dppca_dask.methods import window``: a family module
                out.extend((node.lineno, f"dppca_dask.methods.{alias.name}") for alias in node.names
                           if alias.name[:1].islower() and alias.name not in {"get_mechanism", "mechanism_names",
                                                                              "mechanism_help", "register",
                                                                              "get_entry", "entry_names",
                                                                              "entry_for", "register_entry"})
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def violations(source: str, names: set[str]) -> list[str]:
    """Where ``source`` (a module of ``jobs/``) names an entry kind or a mechanism as a string (a comparison, an
    argument: a branch per kind), or imports a family's or an entry point's module."""
    tree = ast.parse(source)
    found = [f"line {line}: imports {module}" for line, module in _imported(tree)
             if module.startswith(_FAMILY_PREFIXES) and module not in _REGISTRY]
    skip = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):  # a message's text is not a branch
            skip.update(id(v) for v in node.values if isinstance(v, ast.Constant))
    found += [f"line {node.lineno}: names {node.value!r}" for node in ast.walk(tree)
              if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
              and id(node) not in skip]
    return found


def test_the_check_finds_a_branch_per_kind_and_a_family_import() -> None:
    names = _names()
    assert violations('if spec.kind == "topics":\n    pass\n', names) == ["line 1: names 'topics'"]
    assert violations('x = m in ("window", "x")\n', names) == ["line 1: names 'window'"]
    assert violations('def f():\n    from dppca_dask.api._lowrank import lowrank\n', names) == [
        "line 2: imports dppca_dask.api._lowrank"]
    assert violations("from dppca_dask.methods.tensor.topics import topics\n", names) == [
        "line 1: imports dppca_dask.methods.tensor.topics"]
    assert violations("from dppca_dask.methods import window\n", names) == ["line 1: imports dppca_dask.methods.window"]
    assert violations("from dppca_dask.api import pca\n", names) == ["line 1: imports dppca_dask.api"]
    assert violations('"""A window job."""\nfrom dppca_dask.methods._registry import get_entry\n'
                      'x = f"a {y} window"\n', names) == []


def test_jobs_name_no_entry_kind_and_import_no_family() -> None:
    names = _names()
    assert {"pca", "lowrank", "window", "topics"} <= names
    report = {path.name: found for path in sorted(JOBS.glob("*.py"))
              if (found := violations(path.read_text(encoding="utf-8"), names))}
    assert not report, "jobs/ branches per entry kind or imports a family (read the registry instead):\n" + "\n".join(
        f"{name}: {'; '.join(found)}" for name, found in report.items())
