"""The neighbouring-datasets harness (DESIGN.md, privacy invariant 10).

A mechanism is run on two neighbouring datasets, each with an :class:`AuditingNoiseSource` of the same seed, so
both runs draw identical noise. ``assert_within_sensitivity`` then checks, release by release, that

- both runs made the same releases, in the same order, of the same kinds and shapes;
- each mechanism calibrated its noise to the same sensitivity and scale on both neighbours (a scale that moved
  with the data would itself be a leak unless it was released);
- the exact, pre-noise values moved by at most that sensitivity: L2 for Gaussian releases, L1 for Laplace
  releases, at most the per-count sensitivity for each query of a sparse-vector step, and the Frobenius norm for
  the matrix kinds (``wishart``, ``jl``: the Gram moves by ``aaᵀ``); an unknown kind fails;
- on each side, the noise drawn is the noise recorded (:func:`assert_draws_as_recorded`): every release drew, at
  the scale its record names, and no two releases share a draw (a reused draw is no fresh noise).

``assert_sensitivity`` checks recorded sensitivities against their closed forms (a halved sensitivity moves no
neighbour past itself when the neighbours are far from the worst case); ``assert_same_execution`` compares what
an observer sees of neighbour runs (task names with their counts, log lines).

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


#: The norm each kind's sensitivity is stated in.
NORMS = {"gaussian": "L2", "laplace": "L1", "svt": "each count", "wishart": "Frobenius", "jl": "Frobenius"}


def movement(a: AuditRecord, b: AuditRecord) -> float:
    """How far the exact value of one release moved between neighbours, in the norm its sensitivity uses."""
    assert a.kind in NORMS, f"{a.release}: unknown release kind {a.kind!r}; the harness knows {sorted(NORMS)}"
    diff = np.ravel(a.exact - b.exact)
    if a.kind in ("gaussian", "wishart", "jl"):  # L2 of the vector, Frobenius of the matrix
        return float(np.linalg.norm(diff))
    if a.kind == "laplace":
        return float(np.abs(diff).sum())
    return float(np.abs(diff).max(initial=0.0))  # svt: each count


def _expected_scales(record: AuditRecord) -> list[tuple[str, float]]:
    """The (sampler, scale) of each draw the record's kind makes, the last one repeated for any further draw."""
    kind = record.kind
    if kind == "gaussian":
        return [("gaussian", float(record.scale))]
    if kind == "laplace":
        return [("laplace", float(record.scale))]
    if kind == "svt":
        rho, nu = record.scale
        return [("laplace", float(rho)), ("laplace", float(nu))]
    if kind == "wishart":  # R = GᵀG, G of ⌈τ⌉ standard normal rows
        return [("gaussian", 1.0)]
    if kind == "jl":  # Z of m rows with N(0, 1/m) entries
        rows = record.draws[0].values.shape[0] if record.draws and record.draws[0].values.ndim else 1
        return [("gaussian", 1.0 / float(np.sqrt(rows)))]
    raise AssertionError(f"{record.release}: unknown release kind {kind!r}; the harness knows {sorted(NORMS)}")


def assert_draws_as_recorded(records: Sequence[AuditRecord]) -> None:
    """On one side of a neighbour run: every release drew noise, each draw at the scale its record names (a
    Wishart release ⌈τ⌉ rows), and no two releases share a draw (standardised values compared)."""
    seen: dict[tuple[str, Any], str] = {}
    for record in records:
        assert record.draws, f"{record.release}: the release recorded no draw (its noise was not drawn fresh)"
        expected = _expected_scales(record)
        for i, draw in enumerate(record.draws):
            sampler, scale = expected[min(i, len(expected) - 1)]
            assert draw.sampler == sampler and draw.scale == scale, (
                f"{record.release}: draw {i} was {draw.sampler} noise of scale {draw.scale!r}; the release recorded "
                f"{sampler} noise of scale {scale!r} (the noise drawn is not the noise recorded)"
            )
        if record.kind == "wishart":
            rows = record.draws[0].values.shape[0]
            assert rows == int(record.scale), f"{record.release}: {rows} Wishart rows drawn for tau={record.scale}"
        for draw in record.draws:
            standard = np.round(np.ravel(draw.values) / draw.scale, 12)
            # continuous draws: no value twice; lattice (hardened) draws repeat values, so whole draws are compared
            keys = [("array", standard.tobytes())] if draw.discrete else [("value", float(v)) for v in standard]
            for key in keys:
                if key == ("value", 0.0) or (draw.discrete and not np.any(standard)):
                    continue
                other = seen.setdefault(key, record.release)  # type: ignore[arg-type]
                assert other == record.release, (
                    f"{record.release} shares a draw with {other} (standardised {key[0]} equal): noise is drawn "
                    "fresh for every release"
                )


def assert_sensitivity(records: Sequence[AuditRecord], closed_form: Mapping[str, float] | float, *,
                       rel: float = 1e-12) -> None:
    """Every recorded sensitivity equals its closed form: one number for all, or one per release key prefix
    (the first prefix that a key starts with)."""
    for record in records:
        if isinstance(closed_form, Mapping):
            expected = next((v for k, v in closed_form.items() if record.release.startswith(k)), None)
            assert expected is not None, f"{record.release}: no closed form given for this release"
        else:
            expected = closed_form
        assert abs(record.sensitivity - expected) <= rel * abs(expected), (
            f"{record.release}: sensitivity {record.sensitivity!r} recorded, the closed form is {expected!r}"
        )


def assert_within_sensitivity(
    records_a: Sequence[AuditRecord], records_b: Sequence[AuditRecord], *, slack: float = FLOAT_SLACK
) -> list[float]:
    """Check neighbour runs release by release; return each release's movement / sensitivity."""
    keys_a = [(r.release, r.kind, r.exact.shape) for r in records_a]
    keys_b = [(r.release, r.kind, r.exact.shape) for r in records_b]
    assert keys_a == keys_b, "the neighbours made different releases (a data-dependent path)"
    assert_draws_as_recorded(records_a)
    assert_draws_as_recorded(records_b)
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


def assert_same_execution(runs: Sequence[tuple[Any, Any, list[str], list[str]]]) -> None:
    """What an observer sees of each neighbour run (:func:`traced_neighbour_runs`) is the same: the task names
    with their counts, and the log lines; and the runs did run tasks on the cluster."""
    first = runs[0]
    assert first[2], "no task ran on the cluster: the run did not go through it"
    for other in runs[1:]:
        assert other[2] == first[2], (
            f"the neighbours ran different tasks ({len(first[2])} against {len(other[2])}): "
            f"{sorted(set(first[2]) ^ set(other[2]))[:5] or 'the same names, other counts'}"
        )
        assert other[3] == first[3], "the neighbours logged different lines"


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


def watch_publication(monkeypatch: Any, output: str, name: str = "result.json") -> list[bool]:
    """Record, at every ledger charge from now on, whether the job's result ``output/name`` was already in place
    (published): the list :func:`assert_charged_before_published` checks."""
    import os

    from dppca_dask.ledger import Ledger

    seen: list[bool] = []
    original = Ledger.charge

    def charge(self: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(os.path.exists(os.path.join(output, name)))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Ledger, "charge", charge)
    return seen


def assert_charged_before_published(seen: Sequence[bool], output: str, name: str = "result.json") -> None:
    """The job was charged, its result was not in place at the charge, and it is now (DESIGN.md: the charge is
    recorded after a pending result is written and before the result is returned)."""
    import os

    assert seen, "the job was never charged"
    assert not any(seen), f"the result '{name}' was published before its charge"
    assert os.path.exists(os.path.join(output, name)), f"the result '{name}' was not published after the charge"
