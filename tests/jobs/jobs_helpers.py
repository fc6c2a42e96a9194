"""Shared code of the job tests: paths, job spec documents rendered as TOML, and a job killed at a chosen point."""

from __future__ import annotations

import os
import subprocess
import sys
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
#: Runs the CLI with the job runner's kill point ``sys.argv[1]`` exiting the process at once (``os._exit``: no
#: cleanup, no ``finally``, as a killed process); the CLI's arguments follow.
KILL_SCRIPT = """
import os, sys
from dppca_dask.jobs import runner

point = sys.argv[1]

def kill(name):
    if name == point:
        os._exit({killed})

runner._kill_point = kill
from dppca_dask.cli import main
sys.exit(main(sys.argv[2:]))
""".format(killed=KILLED)


def run_killed_at(point: str, args: Sequence[str], tmp_path: Path) -> None:
    """Run ``dppca-dask *args`` in a new process killed at the runner's kill point ``point``; fail unless it was
    killed there."""
    script = tmp_path / "killer.py"
    script.write_text(KILL_SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    killed = subprocess.run([sys.executable, str(script), point, *args], cwd=REPO, env=env, capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == KILLED, killed.stderr[-2000:]


def released_results(out: Path, identity: Callable[[Path], str | None]) -> set[str]:
    """The identities of the results a job left in its output directory ``out`` and in ``out/.pending`` (a
    directory without a result is left out)."""
    return {identity(out / ".pending"), identity(out)} - {None}
