"""No function body in dppca_dask is over 100 lines (its docstring aside)."""

from __future__ import annotations

import ast
from pathlib import Path

import dppca_dask

PACKAGE = Path(dppca_dask.__file__).parent
MAX_BODY_LINES = 100

def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the function's last line (0 for a docstring only)."""
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        body = body[1:]
    if not body:
        return 0
    assert node.end_lineno is not None
    return node.end_lineno - body[0].lineno + 1


def long_functions(limit: int = MAX_BODY_LINES) -> list[tuple[str, str, int]]:
    """(file relative to the package, qualified name, body lines) of every function whose body is over ``limit``."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def visit(node: ast.AST, prefix: str) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    name = prefix + child.name
                    if (lines := body_lines(child)) > limit:
                        out.append((relative, name, lines))
                    visit(child, name + ".")
                elif isinstance(child, ast.ClassDef):
                    visit(child, prefix + child.name + ".")
                else:
                    visit(child, prefix)

        visit(tree, "")
    return out


def test_body_lines_skips_the_docstring() -> None:
    source = 'def f():\n    """Doc\n    string."""\n    a = 1\n    return a\n\n\ndef g():\n    """Only a docstring."""\n'
    f, g = ast.parse(source).body
    assert isinstance(f, ast.FunctionDef) and isinstance(g, ast.FunctionDef)
    assert (body_lines(f), body_lines(g)) == (2, 0)


def test_no_function_body_over_100_lines() -> None:
    offenders = long_functions()
    assert not offenders, f"function bodies over {MAX_BODY_LINES} lines (docstring aside); split them:\n" + "\n".join(
        f"    dppca_dask/{f}: {name} ({n} lines)" for f, name, n in offenders)
