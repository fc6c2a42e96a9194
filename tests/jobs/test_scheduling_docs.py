"""The scheduling examples of jobs/README.md: the crontab line and the Airflow task are well formed and call
``dppca-dask run`` with arguments the command accepts."""

from __future__ import annotations

import re
import shlex

from jobs_helpers import JOBS

from dppca_dask.cli import build_parser

README = (JOBS / "README.md").read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def _run_arguments(command: str) -> list[str]:
    words = shlex.split(command)
    start = next(i for i, w in enumerate(words) if w.endswith("dppca-dask"))
    return words[start + 1:]


def test_crontab_line_is_valid_and_its_command_parses() -> None:
    (block,) = _blocks("cron")
    lines = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
    assert len(lines) == 1
    fields = lines[0].split(None, 5)
    patterns = [r"^(\*|[0-5]?\d)$", r"^(\*|[01]?\d|2[0-3])$", r"^(\*|[1-9]|[12]\d|3[01])$", r"^(\*|[1-9]|1[0-2])$",
                r"^(\*|[0-7])$"]
    for value, pattern in zip(fields[:5], patterns):
        assert re.match(pattern, value), value
    command = fields[5].split(">>")[0]
    args = build_parser().parse_args(_run_arguments(command.split("&&", 1)[1]))
    assert args.command == "run" and (JOBS / "warehouse-nightly.toml").name in args.job


def test_airflow_example_is_named_and_its_command_parses() -> None:
    assert "`airflow_dag.py`" in README and (JOBS / "airflow_dag.py").exists()
    command = re.search(r"`(dppca-dask --log-format json run SPEC --date \{\{ ds \}\} --json)`", README)
    assert command is not None
    args = build_parser().parse_args(shlex.split(command.group(1).replace("{{ ds }}", "2026-01-01"))[1:])
    assert args.command == "run" and args.date == "2026-01-01" and args.json and args.log_format == "json"
