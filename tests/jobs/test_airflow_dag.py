"""The Airflow example (``jobs/airflow_dag.py``), read without Airflow: it parses, maps the exit codes of
``dppca-dask run`` as the scheduling guide says (3 skipped, 2 failed without retry), runs each logical date with
catch-up, and its mapping agrees with the command's exit codes."""

from __future__ import annotations

import ast
from pathlib import Path

from jobs_helpers import JOBS

DAG = JOBS / "airflow_dag.py"


def _tree() -> ast.Module:
    return ast.parse(DAG.read_text(), filename=str(DAG))


def _pure_namespace() -> dict[str, object]:
    """``EXIT_CODES`` and ``classify`` compiled alone (they need nothing from Airflow)."""
    nodes = [n for n in _tree().body if (isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "EXIT_CODES" for t in n.targets)) or (
        isinstance(n, ast.FunctionDef) and n.name == "classify")]
    assert len(nodes) == 2
    namespace: dict[str, object] = {}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(DAG), "exec"), namespace)  # noqa: S102
    return namespace


def test_exit_codes_map_onto_task_states() -> None:
    classify = _pure_namespace()["classify"]
    assert [classify(code) for code in (0, 2, 3, 4, 5, 1, -9)] == [  # type: ignore[operator]
        "success", "fail", "skip", "fail", "retry", "retry", "retry"]


def test_the_codes_are_the_commands() -> None:
    from dppca_dask.cli.run import FAILURE_STATUS

    codes = _pure_namespace()["EXIT_CODES"]
    assert set(codes) == {0, 1} | set(FAILURE_STATUS) - {130}  # type: ignore[arg-type]


def test_the_dag_runs_each_logical_date_with_catch_up() -> None:
    tree = _tree()
    dag = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "DAG")
    kwargs = {k.arg: k.value for k in dag.keywords}
    assert ast.literal_eval(kwargs["catchup"]) is True and ast.literal_eval(kwargs["schedule"]) == "@daily"
    text = DAG.read_text()
    assert '"--date", ds, "--json"' in text and '"{{ ds }}"' in text
    for name in ("AirflowSkipException", "AirflowFailException"):
        assert name in text


def test_the_guide_names_the_example() -> None:
    guide = Path(__file__).resolve().parents[2] / "docs" / "guide" / "jobs-scheduling.md"
    assert "airflow_dag.py" in guide.read_text()
