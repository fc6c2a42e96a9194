"""A budgeted binary-tree release is atomic as a window job is: killed (``os._exit``, no cleanup) at each step, the
ledger and the tree's state are in the state that step leaves (seen in order: reserved before the draw, the draw
recorded at once, the new nodes pending before the charge, charged before the state is published), and the re-run
either finishes the same release from what is pending (no new node drawn, no second charge) or, when nodes were
drawn and nothing complete was written, refuses (exit 3) with the budget spent; never a second draw of a release."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from jobs_helpers import daily_store

from dppca_dask.cli import main
from dppca_dask.ledger import CHARGED, RESERVED, Ledger
from dppca_dask.methods.window.tree import PENDING_FILE, _state_path

POINTS = ("before-reservation", "reserved", "released", "pending-complete", "charged", "published")
#: What each kill leaves — (the ledger entry's status or None, its draw recorded, the state pending, the state
#: published) — and the re-run's exit code.
STATES = {
    "before-reservation": ((None, False, False, False), 0),
    "reserved": ((RESERVED, False, False, False), 0),
    "released": ((RESERVED, True, False, False), 3),
    "pending-complete": ((RESERVED, True, True, False), 0),
    "charged": ((CHARGED, True, True, False), 0),
    "published": ((CHARGED, True, False, True), 0),
}


def _state(ledger: Path, directory: str) -> tuple[Any, ...]:
    entry = Ledger(ledger).entry("ds", "night-1")
    return (None if entry is None else entry.status, entry is not None and entry.first_release is not None,
            os.path.exists(os.path.join(directory, PENDING_FILE)),
            os.path.exists(os.path.join(directory, "nodes.json")))


def _nodes(path: str) -> Any:
    with open(path) as fh:
        return json.load(fh)["nodes"]


@pytest.mark.parametrize("point", [pytest.param(p, marks=() if p in ("released", "pending-complete", "charged")
                                                else pytest.mark.slow) for p in POINTS])
def test_a_tree_release_killed_at_each_step_draws_once_and_charges_once(tmp_path: Path, kill_at: Any, capsys: Any,
                                                                        point: str) -> None:
    store = daily_store(tmp_path / "days.zarr", days=4)
    ledger = tmp_path / "ledger.sqlite"
    Ledger.create(ledger).init_dataset("ds", total_epsilon=5.0, total_delta=1e-5)
    args = ["window", store, "--tree", "--horizon", "4", "--last", "2D", "--epsilon", "1", "--delta", "1e-6",
            "--ledger", str(ledger), "--dataset", "ds", "--json"]
    directory = _state_path(store, 4, False)
    kill_at(point, [*args, "--job-id", "night-1"], tmp_path)
    left, code = STATES[point]
    assert _state(ledger, directory) == left  # the order: nothing published before the charge
    pending = os.path.join(directory, PENDING_FILE)
    written = _nodes(pending) if left[2] else _nodes(os.path.join(directory, "nodes.json")) if left[3] else None

    assert main([*args, "--job-id", "night-1"]) == code
    captured = capsys.readouterr()
    entry = Ledger(ledger).entry("ds", "night-1")
    assert entry.status == CHARGED and len(entry.partitions) == 2  # node (1,1): partitions 2 and 3, one event each
    assert all(len(Ledger(ledger).counted_on("ds", key)) == 1 for key in entry.partitions)  # charged once
    assert not os.path.exists(pending)
    if code == 3:  # drawn in the killed process, nothing complete left: never drawn again, the budget spent
        assert entry.outcome == "failed" and "second release" in captured.err
        assert not os.path.exists(os.path.join(directory, "nodes.json"))
        assert main([*args, "--job-id", "night-2"]) == 0  # another job id draws (and is charged) again
        assert all(len(Ledger(ledger).counted_on("ds", key)) == 2 for key in entry.partitions)
        return
    assert entry.outcome == "succeeded"
    released = json.loads(captured.out)
    if written is not None:  # the pending (or published) nodes: no new noise
        assert _nodes(os.path.join(directory, "nodes.json")) == written
    assert main([*args, "--job-id", "night-1"]) == 0  # and again: the same release, nothing drawn or charged
    assert json.loads(capsys.readouterr().out)["covariance"] == released["covariance"]
    assert all(len(Ledger(ledger).counted_on("ds", key)) == 1 for key in entry.partitions)
