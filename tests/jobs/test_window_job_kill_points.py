"""A sliding-window job is atomic as a ``pca`` job is: killed (``os._exit``, no cleanup) at each step, the ledger and
the output directory are in the state that step leaves (seen in order: reserved before the release, the result
pending before the charge, charged before the result is published), and the re-run leaves one charge and at most
one published release; a completed job id re-run with another spec is refused (exit 2)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from jobs_helpers import base_doc, daily_store

from dppca_dask.cli import main
from dppca_dask.ledger import CHARGED, RESERVED, Ledger

DATE = "2026-11-04"
POINTS = ("before-reservation", "reserved", "released", "pending-written", "pending-complete", "charged")
#: What each kill leaves: (the ledger entry's status or None, a release noted, the result pending and complete,
#: the result published), and the re-run's exit code and status.
STATES = {
    "before-reservation": ((None, False, False, False), 0, "completed"),
    "reserved": ((RESERVED, False, False, False), 0, "completed"),
    "released": ((RESERVED, True, False, False), 3, None),
    "pending-written": ((RESERVED, True, False, False), 3, None),
    "pending-complete": ((RESERVED, True, True, False), 0, "completed-from-pending"),
    "charged": ((CHARGED, True, True, False), 0, "already-completed"),
}


def _doc(tmp_path: Path, store: str) -> dict[str, Any]:
    doc = base_doc(tmp_path, store)
    doc["job"] = {"name": "win"}
    doc["mechanism"] = {"name": "sliding-window", "last": "3D", "release": "gaussian"}
    doc["privacy"]["epsilon"] = 0.3
    doc["cluster"] = {"executor": "local"}
    return doc


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _state(ledger: Path, out: Path) -> tuple[Any, ...]:
    entry = Ledger(ledger).entry("ds", f"win@{DATE}")
    return (None if entry is None else entry.status, entry is not None and entry.first_release is not None,
            (out / ".pending" / "COMPLETE").exists(), (out / "release.json").exists())


@pytest.mark.parametrize("point", [pytest.param(p, marks=() if p in ("pending-written", "pending-complete",
                                                                      "charged") else pytest.mark.slow)
                                   for p in POINTS])
def test_a_window_job_killed_at_each_step_leaves_one_charge_and_one_release(tmp_path: Path, write_spec: Any,
                                                                            kill_at: Any, capsys: Any,
                                                                            point: str) -> None:
    store = daily_store(tmp_path / "days.zarr", days=4)
    spec = write_spec(_doc(tmp_path, store))
    ledger, out = tmp_path / "ledger.sqlite", tmp_path / "out" / "win" / DATE
    args = ["run", str(spec), "--date", DATE]
    kill_at(point, args, tmp_path)
    left, code, status = STATES[point]
    assert _state(ledger, out) == left  # the order: nothing published before the charge
    pending = _digest(out / ".pending" / "release.json")

    assert main([*args, "--json"]) == code
    captured = capsys.readouterr()
    entry = Ledger(ledger).entry("ds", f"win@{DATE}")
    assert entry.status == CHARGED and entry.partitions == ("t:2026-11-02", "t:2026-11-03", "t:2026-11-04")
    if code == 3:  # released in the killed process, nothing complete left: never released again
        assert entry.outcome == "failed" and "second release" in captured.err
        assert not (out / "release.json").exists()
        return
    assert json.loads(captured.out)["status"] == status and entry.outcome == "succeeded"
    if pending is not None and point in ("pending-complete", "charged"):
        assert _digest(out / "release.json") == pending  # the pending result, published: no new noise
    assert not (out / ".pending").exists()
    assert main([*args, "--json"]) == 0  # and again: nothing more
    assert json.loads(capsys.readouterr().out)["status"] == "already-completed"
    assert Ledger(ledger).entry("ds", f"win@{DATE}").attempts == entry.attempts


def test_a_completed_window_job_id_with_a_changed_spec_is_refused(tmp_path: Path, write_spec: Any,
                                                                  capsys: Any) -> None:
    store = daily_store(tmp_path / "days.zarr", days=4)
    spec = write_spec(_doc(tmp_path, store))
    args = ["run", str(spec), "--date", DATE]
    assert main(args) == 0
    saved = (tmp_path / "out" / "win" / DATE / "release.json").read_bytes()
    capsys.readouterr()
    for change in ("privacy.epsilon=0.2", 'mechanism.last="1D"', 'mechanism.release="wishart"'):
        assert main([*args, "--set", change]) == 2, change
        assert "with other parameters" in capsys.readouterr().err
    assert (tmp_path / "out" / "win" / DATE / "release.json").read_bytes() == saved
    assert main(args) == 0 and "already completed" in capsys.readouterr().out
