"""Shared code of the job tests: paths, job spec documents rendered as TOML, and a job killed at a chosen point."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
JOBS = REPO / "jobs"
W8A = REPO.parent / "shared" / "data" / "w8a.svm"


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return repr(value)


def render(doc: dict[str, dict[str, Any]]) -> str:
    """A job spec document as TOML (tables of scalars, one level of sub-tables)."""
    lines: list[str] = []
    for table, values in doc.items():
        scalars = {k: v for k, v in values.items() if not isinstance(v, dict)}
        lines.append(f"[{table}]")
        lines += [f"{k} = {_toml(v)}" for k, v in scalars.items()]
        for sub, sub_values in values.items():
            if isinstance(sub_values, dict):
                lines.append(f"[{table}.{sub}]")
                lines += [f"{k} = {_toml(v)}" for k, v in sub_values.items()]
    return "\n".join(lines) + "\n"


def base_doc(tmp_path: Path, store: str, **mechanism: Any) -> dict[str, dict[str, Any]]:
    """A job spec of sequential adaptive power iteration (``center = "none"``: the run that checkpoints each
    release and resumes from it; a job's default centres, see ``test_centred_jobs.py``)."""
    return {
        "job": {"name": "test-job"},
        "data": {"store": store},
        "mechanism": {"name": "adaptive-power", "n_iter": 3, "center": "none", **mechanism},
        "privacy": {"epsilon": 0.8, "delta": 1e-7},
        "budget": {"ledger": str(tmp_path / "ledger.sqlite"), "dataset": "ds", "total_epsilon": 1.0,
                   "total_delta": 1e-6},
        "output": {"path": str(tmp_path / "out" / "{name}" / "{date}")},
    }


def daily_store(path: Path, days: int = 3) -> str:
    """A store of ``days`` daily partitions stamped 2026-11-01.. (declared width)."""
    import datetime as _dt

    import numpy as np
    import scipy.sparse as sp

    from dppca_dask.ingest import ingest
    from dppca_dask.storage import append_partition

    rng = np.random.default_rng(3)
    blocks = [sp.csr_array(rng.standard_normal((20, 6)) * (rng.random((20, 6)) < 0.5) * 0.3) for _ in range(days)]
    store = ingest(blocks[0], path, n_features=6, timestamp="2026-11-01")
    for n, block in enumerate(blocks[1:], start=2):
        stamp = _dt.datetime(2026, 11, n, tzinfo=_dt.timezone.utc).timestamp()
        store = append_partition(store.path, block, timestamp=stamp)
    return str(path)


def init_ledger(doc: dict[str, dict[str, Any]], relation: str | None = None) -> None:
    """Create the spec's ledger and dataset budget, as `dppca-dask budget init` does (a run never creates them)."""
    from dppca_dask.ledger import Ledger

    budget = doc["budget"]
    path = Path(budget["ledger"])
    ledger = Ledger(path) if path.exists() else Ledger.create(path)
    ledger.init_dataset(budget["dataset"], total_epsilon=budget.get("total_epsilon", 1.0),
                        total_delta=budget.get("total_delta", 1e-6), neighbouring=relation)


def declare_schema(store: str | Path, value: str | None = "declared") -> None:
    """Mark a store's width as declared at ingest, or (``None``) as inferred from the data, in its metadata."""
    import zarr

    from dppca_dask.storage import _format

    group = zarr.open_group(str(store), mode="r+")
    meta = dict(group.attrs[_format.ATTR_KEY])
    meta["schema"] = "inferred" if value is None else value
    group.attrs[_format.ATTR_KEY] = meta


#: The exit code of a job process killed at its kill point.
KILLED = 77
#: A process that imports the package once and then, for each request (one JSON line on its standard input: the
#: kill point, the CLI's arguments, files for the run's standard output and error), forks a new process that runs
#: the CLI with the job runner's (and the binary tree's) kill point exiting that process at once (``os._exit``: no
#: cleanup, no ``finally``, as a killed process). It answers each request with two lines: the new process's pid,
#: then its exit code. Each killed run is a process of its own, as a fresh interpreter would be, without importing
#: Dask, zarr and the package again (about 2.5 s of every run on 2 cores).
KILL_SERVER = """
import json, os, sys

from dppca_dask.cli import main
from dppca_dask.jobs import steps

# What a job run imports; loaded here once, before any thread is started (so that forking is safe).
import dask.array, distributed, filelock, scipy.sparse, zarr  # noqa: E401,F401
import dppca_dask.api, dppca_dask.cli.run, dppca_dask.coordinator.client, dppca_dask.jobs.plan  # noqa: E401,F401
import dppca_dask.ledger  # noqa: F401
from dppca_dask.methods.window import tree  # the binary tree's release steps have kill points of their own


def run(point, argv, stdout, stderr):
    def kill(name):
        if name == point:
            os._exit({killed})

    steps._kill_point = kill
    tree._kill_point = kill
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, path in ((1, stdout), (2, stderr)):
        os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    code = 1
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code if isinstance(code, int) else 1)


for line in iter(sys.stdin.readline, ""):
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        run(**request)
    print(pid, flush=True)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
""".format(killed=KILLED)


class KilledRuns:
    """``runs(point, args, tmp_path)`` runs ``dppca-dask *args`` in a new process killed at the job runner's kill
    point ``point`` and fails unless it was killed there; the processes are forked by one ``KILL_SERVER`` process
    started in ``directory``. ``close()`` ends that process."""

    def __init__(self, directory: Path) -> None:
        script = directory / "killer.py"
        script.write_text(KILL_SERVER)
        self._log = directory / "killer.err"
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        with self._log.open("w") as log:
            self._server = subprocess.Popen([sys.executable, str(script)], cwd=REPO, env=env, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=log, bufsize=0)

    def _line(self, timeout: float) -> str:
        """The server's next line of output (read unbuffered, so that ``select`` sees what is left)."""
        assert self._server.stdout is not None
        fd = self._server.stdout.fileno()
        deadline = time.monotonic() + timeout
        line = b""
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError(f"no answer from the kill server within {timeout} s")
            chunk = os.read(fd, 1)
            if not chunk:
                raise RuntimeError(f"the kill server ended:\n{self._log.read_text()[-2000:]}")
            line += chunk
        return line.decode()

    def __call__(self, point: str, args: Sequence[str], tmp_path: Path) -> None:
        assert self._server.stdin is not None
        stdout, stderr = tmp_path / "killed.out", tmp_path / "killed.err"
        request = {"point": point, "argv": list(args), "stdout": str(stdout), "stderr": str(stderr)}
        self._server.stdin.write((json.dumps(request) + "\n").encode())
        self._server.stdin.flush()
        pid = int(self._line(120))
        try:
            code = int(self._line(300))
        except TimeoutError:
            os.kill(pid, signal.SIGKILL)
            self._line(60)
            raise
        assert code == KILLED, stderr.read_text()[-2000:]

    def close(self) -> None:
        assert self._server.stdin is not None
        self._server.stdin.close()
        try:
            self._server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait(timeout=30)


def released_results(out: Path, identity: Callable[[Path], str | None]) -> set[str]:
    """The identities of the results a job left in its output directory ``out`` and in ``out/.pending`` (a
    directory without a result is left out)."""
    return {identity(out / ".pending"), identity(out)} - {None}
