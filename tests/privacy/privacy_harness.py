"""The neighbouring-datasets harness (DESIGN.md, privacy invariant 10).

A mechanism is run on two neighbouring datasets, each with an :class:`AuditingNoiseSource` of the same seed, so
both runs draw identical noise. ``assert_within_sensitivity`` then checks, release by release, that

- both runs made the same releases, in the same order, of the same kinds and shapes;
- each mechanism calibrated its noise to the same sensitivity and scale on both neighbours (a scale that moved
  with the data would itself be a leak unless it was released);
- the exact, pre-noise values moved by at most that sensitivity: L2 for Gaussian releases, L1 for Laplace
  releases, and at most the per-count sensitivity for each query of a sparse-vector step.

Tests build worst-case neighbours for each mechanism (a row on the filter boundary, duplicate entries, an entry
change, a symmetric pair, ...) and run through the real ``local_client`` LocalCluster as well as in-process.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from dppca_dask.mechanisms.testing import AuditRecord

#: Relative slack for floating-point sums (exact arithmetic would give equality at worst-case neighbours).
FLOAT_SLACK = 1e-9


def movement(a: AuditRecord, b: AuditRecord) -> float:
    """How far the exact value of one release moved between neighbours, in the norm its sensitivity uses."""
    diff = np.ravel(a.exact - b.exact)
    if a.kind == "gaussian":
        return float(np.linalg.norm(diff))
    if a.kind == "laplace":
        return float(np.abs(diff).sum())
    return float(np.abs(diff).max(initial=0.0))  # svt: each count


def assert_within_sensitivity(
    records_a: Sequence[AuditRecord], records_b: Sequence[AuditRecord], *, slack: float = FLOAT_SLACK
) -> list[float]:
    """Check neighbour runs release by release; return each release's movement / sensitivity."""
    keys_a = [(r.release, r.kind, r.exact.shape) for r in records_a]
    keys_b = [(r.release, r.kind, r.exact.shape) for r in records_b]
    assert keys_a == keys_b, "the neighbours made different releases (a data-dependent path)"
    ratios = []
    for a, b in zip(records_a, records_b):
        assert a.sensitivity == b.sensitivity, f"{a.release}: sensitivity moved with the data"
        assert np.all(np.asarray(a.scale) == np.asarray(b.scale)), f"{a.release}: noise scale moved with the data"
        moved = movement(a, b)
        assert moved <= a.sensitivity * (1 + slack) + slack, (
            f"{a.release}: the exact {a.kind} value moved by {moved!r} > sensitivity {a.sensitivity!r}"
        )
        ratios.append(moved / a.sensitivity)
    return ratios
