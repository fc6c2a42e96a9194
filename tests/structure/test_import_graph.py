"""The package imports without cycles: every module imports in a fresh interpreter in any order, and the graph of
module-level ``import`` statements between dppca_dask modules has no cycle."""

from __future__ import annotations

import ast
import os
import random
import subprocess
import sys
from pathlib import Path

import dppca_dask

PACKAGE = Path(dppca_dask.__file__).parent
#: Modules that are not importable on their own by design (``python -m dppca_dask`` runs the CLI).
_ENTRY_POINTS = {"dppca_dask.__main__"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _top_level_imports(module: str, path: Path, known: set[str]) -> set[str]:
    """dppca_dask modules imported when ``module`` loads: statements at module level (also inside if/try blocks,
    never inside functions or ``if TYPE_CHECKING``), each counted with the packages it loads on the way."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, (ast.If, ast.Try, ast.With)):
                for field in ("body", "orelse", "finalbody", "handlers"):
                    for child in getattr(node, field, []) or []:
                        visit(child.body if isinstance(child, ast.ExceptHandler) else [child])
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(module, path.name == "__init__.py", node)
                targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
            for target in targets:
                parts = target.split(".")
                for i in range(1, len(parts) + 1):  # importing a.b.c loads a, a.b and a.b.c
                    name = ".".join(parts[:i])
                    if name in known and name != module:
                        out.add(name)

    visit(tree.body)
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := walk(nxt)) is not None:
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := walk(node)) is not None:
            return found
    return None


def _package_edges_removed(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    # a package's __init__ loading its own submodules is not a cycle of theirs when the submodule needs only the
    # package object (Python loads the parent first): drop child -> ancestor-package edges of that kind only
    return {m: {t for t in deps if not (m.startswith(t + ".") and t in _PACKAGES)} for m, deps in graph.items()}


_PACKAGES = {_module_name(p) for p in PACKAGE.rglob("__init__.py")}


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_module_level_imports_have_no_cycle() -> None:
    modules = _modules()
    known = set(modules)
    graph = {m: _top_level_imports(m, p, known) for m, p in modules.items()}
    # every module's package is loaded before it, so only imports of sibling/other modules can close a cycle
    cycle = _cycle(_package_edges_removed(graph))
    assert cycle is None, f"import cycle between dppca_dask modules: {' -> '.join(cycle or [])}"


def test_methods_registry_modules_do_not_import_the_entry_points() -> None:
    modules = _modules()
    known = set(modules)
    for name, path in modules.items():
        if name.startswith("dppca_dask.methods"):
            deps = _top_level_imports(name, path, known)
            # any module of the entry points' packages (api/_pca.py, api/_lowrank.py, ...), the CLI or the jobs
            above = {dep for dep in deps if dep.split(".")[:2] in (["dppca_dask", "api"], ["dppca_dask", "cli"],
                                                                   ["dppca_dask", "jobs"])}
            assert not above, f"{name} imports {sorted(above)}"


def test_every_module_imports_in_a_fresh_interpreter_in_random_order(seed: int) -> None:
    names = sorted(set(_modules()) - _ENTRY_POINTS)
    random.Random(seed).shuffle(names)
    code = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, f"importing in the order {names} failed:\n{done.stderr[-3000:]}"


def _all_imports(module: str, path: Path, known: set[str]) -> set[str]:
    """dppca_dask modules ``module`` imports anywhere: at module level, inside functions, inside ``if TYPE_CHECKING``.

    ``from dppca_dask.x import name`` counts as an import of ``dppca_dask.x.name`` when that is a module, else of
    ``dppca_dask.x``; a package's ``__init__`` is the package module. Loading a module's parent packages on the way is
    not counted (every module's package loads before it). Lazy imports of optional third-party packages are outside
    the graph by construction: only dppca_dask modules are nodes."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(module, path.name == "__init__.py", node)
            for alias in node.names:
                if f"{base}.{alias.name}" in known:
                    out.add(f"{base}.{alias.name}")
                elif base in known:
                    out.add(base)
    out.discard(module)
    return out


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one node (Tarjan's algorithm, iterative), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = []
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work.append((root, sorted(graph[root])))
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def test_strongly_connected_finds_every_cycle() -> None:
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}, "e": {"a"}}
    assert _strongly_connected(graph) == [["a", "b"], ["c", "d"]]
    assert _strongly_connected({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_counting_imports_inside_functions() -> None:
    modules = _modules()
    known = set(modules)
    graph = {m: _all_imports(m, p, known) for m, p in modules.items()}
    cycles = _strongly_connected(graph)
    report = [
        " <-> ".join(component)
        + "\n    "
        + "\n    ".join(f"{m} imports {', '.join(sorted(graph[m] & set(component)))}" for m in component)
        for component in cycles
    ]
    assert not cycles, "import cycles among dppca_dask modules (imports inside functions count):\n" + "\n".join(report)
