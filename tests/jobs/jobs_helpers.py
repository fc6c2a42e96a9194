"""Helpers of the job tests: paths, and job spec documents rendered as TOML."""

from __future__ import annotations

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
