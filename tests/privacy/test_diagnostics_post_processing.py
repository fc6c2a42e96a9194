"""The diagnostics of a release are a function of released values and public parameters only.

The check couples the noise of two neighbouring runs as the privacy proofs do: the run on D records every
Gaussian release (exact value + noise); the run on D' (one row added) draws, for each release, exactly the noise
that makes its released value equal to D's. Every released value is then identical on both neighbours while the
exact values are not, so anything that reads an un-noised value (an exact norm, eigenvalue or count) would differ
between the two runs. The diagnostics must come out identical, with the same fields. Deterministic: no statistical
assertion.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from dppca_dask import lowrank, pca
from dppca_dask.mechanisms.testing import AuditingNoiseSource

D = 12


class RecordingSource(AuditingNoiseSource):
    """Records every audited Gaussian release's released value (exact + drawn)."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.released: dict[str, Any] = {}
        self._exact: Any = None

    def audit(self, *, kind: str, exact: Any, sensitivity: float, scale: Any) -> None:
        super().audit(kind=kind, exact=exact, sensitivity=sensitivity, scale=scale)
        self._exact = (self.current_release, kind, np.array(exact, dtype=np.float64, copy=True))

    def _gaussian(self, std: float, size: Any) -> Any:
        drawn = super()._gaussian(std, size)
        if self._exact is not None and self._exact[0] == self.current_release and self._exact[1] == "gaussian":
            self.released[self._exact[0]] = self._exact[2] + drawn
        self._exact = None
        return drawn


class CoupledSource(AuditingNoiseSource):
    """Draws, for every release recorded in ``target``, the noise that gives the recorded released value (the
    generator still advances as an ordinary draw would, so later draws stay aligned with the recording run)."""

    def __init__(self, seed: int, target: dict[str, Any]) -> None:
        super().__init__(seed)
        self.target = target
        self.coupled = 0
        self._exact: Any = None

    def audit(self, *, kind: str, exact: Any, sensitivity: float, scale: Any) -> None:
        super().audit(kind=kind, exact=exact, sensitivity=sensitivity, scale=scale)
        self._exact = (self.current_release, np.array(exact, dtype=np.float64, copy=True))

    def _gaussian(self, std: float, size: Any) -> Any:
        drawn = super()._gaussian(std, size)
        exact, self._exact = self._exact, None
        if exact is not None and exact[0] == self.current_release and exact[0] in self.target:
            target = np.asarray(self.target[exact[0]])
            if target.shape != exact[1].shape:
                return drawn
            wanted = target - exact[1]
            if wanted.shape == np.shape(drawn):
                self.coupled += 1
                return wanted if np.ndim(drawn) else float(wanted)
        return drawn


def _rows(seed: int, size: float, relation: str) -> tuple[np.ndarray, np.ndarray]:
    """Neighbours: D, and D with one row of norm ``size`` on one coordinate added (``"add"``) or put in place of
    row 50 (``"change"``: the relation of the low-rank mechanisms, whose releases have a row per individual)."""
    rng = np.random.default_rng(seed)
    direction = rng.standard_normal(D)
    direction /= np.linalg.norm(direction)
    if relation == "entry":  # a square PSD matrix and the same with one entry changed by ``size``
        square = 40.0 * np.outer(direction, direction) + np.eye(D)
        changed = square.copy()
        changed[2, 5] += size
        return square, changed
    rows = 0.6 * rng.standard_normal((2_000, 1)) * direction + 0.3 * rng.standard_normal((2_000, D)) / np.sqrt(D)
    extra = np.zeros(D)
    extra[3] = size
    if relation == "change":
        changed = rows.copy()
        changed[50] = extra
        return rows, changed
    return rows, np.vstack([rows[:50], extra[None, :], rows[50:]])


def _pca(options: dict[str, Any]) -> Any:
    def run(matrix: np.ndarray, noise: Any) -> Any:
        return pca(matrix, epsilon=1.0, delta=1e-6, client="local", noise=noise, progress=False, **options)

    return run


def _lowrank(mechanism: str) -> Any:
    def run(matrix: np.ndarray, noise: Any) -> Any:
        return lowrank(matrix, rank=2, epsilon=1.0, delta=1e-6, mechanism=mechanism, client="local", noise=noise)

    return run


#: name -> (run, norm of the neighbour's row, relation). The runs with an AboveThreshold step get a small row
#: (norm 1e-3, scores at most 1e-6): it changes the exact sums but no count the threshold search can reach, so
#: both neighbours take the same released thresholds; the others get the worst-case row of norm c = 1.
RUNS = {
    "analyze-gauss": (_pca({"mechanism": "analyze-gauss", "n_components": 2}), 1.0, "add"),
    "analyze-gauss-centred": (_pca({"mechanism": "analyze-gauss", "n_components": 2, "center": "private"}), 1.0,
                              "add"),
    "adaptive-power-block-centred": (_pca({"mechanism": "adaptive-power-block", "n_components": 2,
                                           "center": "private", "n_iter": 4}), 1e-3, "add"),
    "adaptive-power": (_pca({"mechanism": "adaptive-power", "n_components": 2, "n_iter": 4}), 1e-3, "add"),
    "auto": (_pca({"mechanism": "auto", "n_components": 2, "center": "private", "n_iter": 4}), 1e-3, "add"),
    "private-power": (_pca({"mechanism": "private-power", "symmetric": True, "n_components": 2}), 1.0, "entry"),
    "randomized-response": (_lowrank("randomized-response"), 1.0, "change"),
    "private-low-rank": (_lowrank("private-low-rank"), 1.0, "change"),
}


@pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")
@pytest.mark.parametrize("name", sorted(RUNS))
def test_diagnostics_are_the_same_function_of_the_same_released_values(seed: int, name: str) -> None:
    run, size, relation = RUNS[name]
    first, second = _rows(seed, size, relation)
    recording = RecordingSource(seed)
    ra = run(first, recording)
    coupled = CoupledSource(seed, recording.released)
    rb = run(second, coupled)
    assert coupled.coupled == len(recording.released) > 0  # every Gaussian release was coupled
    moved = [float(np.max(np.abs(a.exact - b.exact))) for a, b in zip(recording.records, coupled.records)
             if a.kind == "gaussian" and a.exact.shape == b.exact.shape]
    assert max(moved) > 0  # the exact values differ between the neighbours ...
    da, db = ra.diagnostics, rb.diagnostics
    assert da is not None and db is not None
    assert sorted(da.to_dict()) == sorted(db.to_dict()) == ["noise_to_signal", "reliable", "rule", "threshold"]
    # ... and the diagnostics, a function of released values, do not (up to the rounding of exact' + (released −
    # exact'), about 1e-16 relative; the exact values' own effect is far larger: checked by the test below)
    assert (da.reliable, da.threshold, da.rule) == (db.reliable, db.threshold, db.rule)
    np.testing.assert_allclose(da.noise_to_signal, db.noise_to_signal, rtol=1e-12, atol=1e-15)
    assert len(da.noise_to_signal) == 2  # one per requested component
    assert sorted(ra.to_dict()) == sorted(rb.to_dict())  # the same fields on both neighbours


@pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")
def test_the_exact_values_would_move_the_figures_beyond_the_tolerance(seed: int) -> None:
    """The control of the test above: without the coupling (the same seeded noise on both neighbours, so the
    released values differ by the exact values' difference), the figures differ far beyond its tolerance."""
    run, size, relation = RUNS["analyze-gauss"]
    first, second = _rows(seed, size, relation)
    da = run(first, AuditingNoiseSource(seed)).diagnostics
    db = run(second, AuditingNoiseSource(seed)).diagnostics
    assert not np.allclose(da.noise_to_signal, db.noise_to_signal, rtol=1e-9, atol=0)
