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
``traced_neighbour_runs`` runs a mechanism on each neighbour through a cluster and collects what an observer of
the run sees besides the result (privacy invariant 8): the names of the tasks and the library's log lines.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

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


#: A run's token in a task name (each run names its tasks ``...-<8 hex digits>-...``).
_RUN_TOKEN = re.compile(r"-[0-9a-f]{8}-")
#: A released threshold in a log line.
_RELEASED_THETA = re.compile(r"theta=[0-9.e+-]+")


def task_names(stream: Iterable[Mapping[str, Any]]) -> list[str]:
    """The keys of a task stream's tasks, sorted, with each run's token replaced by ``-<run>-``."""
    return sorted(_RUN_TOKEN.sub("-<run>-", str(t["key"])) for t in stream)


def log_lines(records: Iterable[logging.LogRecord], *, mask_theta: bool = True) -> list[str]:
    """The messages of the library's log records; with ``mask_theta`` each released ``theta=...`` reads
    ``theta=<released>`` (a released value may differ between neighbours; everything else must not)."""
    lines = [r.getMessage() for r in records if r.name.startswith("dppca_dask")]
    return [_RELEASED_THETA.sub("theta=<released>", line) for line in lines] if mask_theta else lines


def traced_run(client: Any, caplog: Any, run: Callable[[], Any], *, mask_theta: bool = True
               ) -> tuple[Any, list[str], list[str]]:
    """``run()`` with every DEBUG log line of the library captured and ``client``'s task stream recorded: the
    result, the task names (:func:`task_names`) and the log lines (:func:`log_lines`)."""
    from distributed import get_task_stream

    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="dppca_dask"), get_task_stream(client) as stream:
        result = run()
    return result, task_names(stream.data), log_lines(caplog.records, mask_theta=mask_theta)


def traced_neighbour_runs(client: Any, caplog: Any, datasets: Iterable[Any], run: Callable[[Any, Any], Any],
                          make_noise: Callable[[], Any], *, mask_theta: bool = True
                          ) -> list[tuple[Any, Any, list[str], list[str]]]:
    """``run(dataset, noise)`` on each neighbour, each with a fresh ``make_noise()`` (the same seed, so the same
    draws), through :func:`traced_run`: per neighbour the result, its noise source, task names and log lines."""
    runs = []
    for dataset in datasets:
        noise = make_noise()
        result, tasks, logs = traced_run(client, caplog, lambda: run(dataset, noise), mask_theta=mask_theta)
        runs.append((result, noise, tasks, logs))
    return runs
