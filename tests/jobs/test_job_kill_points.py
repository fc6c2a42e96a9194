"""Fault injection: the job process is killed (``os._exit``, no cleanup) at each point between two steps of a job,
for each mechanism; the re-run must leave exactly one charge and at most one released result per charge.

Before this, re-runs of analyze-gauss and lowrank jobs killed after their result was written to ``.pending/`` but
before the charge computed a new release each time (four distinct results for one charge)."""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from jobs_helpers import base_doc, released_results

from dppca_dask.cli import main
from dppca_dask.ledger import CHARGED, Ledger

DATE = "2026-04-01"

MECHANISMS = {
    "analyze-gauss": {"name": "analyze-gauss"},
    "adaptive-power": {"name": "adaptive-power", "n_iter": 2, "center": "none"},  # sequential: resumes
    "adaptive-power-block": {"name": "adaptive-power-block", "n_iter": 2, "n_components": 2},  # centred block
    "private-low-rank": {"name": "private-low-rank", "rank": 2},
    "randomized-response": {"name": "randomized-response", "rank": 2},
    "private-power": {"name": "private-power", "n_iter": 2, "coherence": 300.0},
}
POINTS = ("reserved", "computed", "noted", "pending-written", "pending-complete", "charged")
#: Run by default (about 10 s); the whole matrix (about 1 minute on 2 cores) is marked slow.
FAST = {("analyze-gauss", "computed"), ("analyze-gauss", "pending-complete"), ("private-low-rank", "pending-written"),
        ("adaptive-power-block", "noted")}
CASES = [pytest.param(m, p, marks=() if (m, p) in FAST else pytest.mark.slow)
         for m in MECHANISMS for p in POINTS] + [pytest.param(m, "checkpoint", marks=pytest.mark.slow)
                                                 for m in ("adaptive-power", "adaptive-power-block")]


def _identity(directory: Path, lowrank: bool) -> str | None:
    """A digest of the released values in a result directory (None if there is no result; "unreadable" for a
    half-written one, which still counts as released)."""
    if not (directory / "result.json").exists():
        return None
    try:
        if lowrank:
            from dppca_dask.results import load_lowrank

            result = load_lowrank(directory)
            arrays = [np.asarray(result.left), np.asarray(result.right)]
        else:
            from dppca_dask.results import load_result

            arrays = [np.asarray(load_result(directory).components)]
    except Exception:  # a partial write: released bytes of unknown content
        return "unreadable"
    return hashlib.sha256(b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)).hexdigest()


@pytest.mark.parametrize("mechanism, point", CASES)
def test_a_kill_at_every_point_leaves_one_release_per_charge(tmp_path: Path, small_store: str, local_client,
                                                             write_spec, kill_at, capsys, mechanism: str,
                                                             point: str) -> None:
    doc = base_doc(tmp_path, small_store)
    doc["mechanism"] = dict(MECHANISMS[mechanism])
    doc["privacy"]["epsilon"] = 0.5
    spec = write_spec(doc)
    lowrank = "rank" in doc["mechanism"]
    identity = functools.partial(_identity, lowrank=lowrank)
    args = ["run", str(spec), "--scheduler", local_client.scheduler.address, "--date", DATE]
    kill_at(point, args, tmp_path)
    out = tmp_path / "out" / "test-job" / DATE
    released = released_results(out, identity)

    code = main([*args, "--json"])
    captured = capsys.readouterr()
    # Killed after the release was recorded but before the result was complete: the re-run refuses (exit 3)
    # rather than release again, and the ledger keeps the charge; adaptive power iteration instead resumes from
    # its checkpoint of released iterates (no new noise for them). Otherwise the re-run completes.
    resumes = mechanism.startswith("adaptive-power") and point in ("checkpoint", "computed", "noted", "pending-written")
    expected = 3 if point in ("noted", "pending-written") and not resumes else 0
    assert code == expected, captured.err
    if code == 0:
        status = json.loads(captured.out)["status"]
        assert status == {"pending-complete": "completed-from-pending", "charged": "already-completed"}.get(
            point, "resumed-and-completed" if resumes else "completed"), status
        assert not (out / ".pending").exists()
    released |= released_results(out, identity)
    assert len(released) <= 1, released  # at most one release ...

    budget = Ledger(tmp_path / "ledger.sqlite").budget("ds")
    assert [e.status for e in budget.entries] == [CHARGED]  # ... for exactly one charge
    assert budget.sum_epsilon == pytest.approx(0.5)
    assert main([*args]) in (0, 3)  # a third run changes nothing
    capsys.readouterr()
    assert released_results(out, identity) <= released
    assert Ledger(tmp_path / "ledger.sqlite").budget("ds").sum_epsilon == pytest.approx(0.5)
