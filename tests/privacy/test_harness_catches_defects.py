"""The harness stays honest: each defect a mutation of the product once slipped past the privacy tests is planted
here (a monkeypatch of the real code, inside the test) and the harness's check must fail on it; the same check on
the unchanged code passes (the control). Deterministic.

Planted: a standard-normal draw reused for every release; half the noise drawn while the full scale is recorded;
a sensitivity halved; a task named from the data; a job's result published before its charge.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.ingest import ingest
from dppca_dask.mechanisms.noise import NoiseSource, shape_of
from dppca_dask.api import window
from dppca_dask.methods.window import tree_window
from dppca_dask.methods.window.selection import parse_timestamp
from dppca_dask.storage import append_partition
from privacy_harness import (
    assert_charged_before_published,
    assert_same_execution,
    assert_sensitivity,
    assert_within_sensitivity,
    traced_neighbour_runs,
    watch_publication,
)

pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")

D = 4
C = 1.0


def _stores(tmp_path) -> tuple[Any, Any]:
    """Four stamped days; the neighbour has one more row at the clip bound on day 4."""
    out = []
    for name, extra in (("a", False), ("b", True)):
        rng = np.random.default_rng(7)
        blocks = [rng.standard_normal((12, D)) * 0.4 for _ in range(4)]
        if extra:
            edge = np.zeros((1, D))
            edge[0, 1] = 9.0  # clipped to norm C on one coordinate
            blocks[3] = np.vstack([blocks[3], edge])
        store = ingest(sp.csr_array(blocks[0]), tmp_path / name / "store", n_features=D, timestamp="2026-11-01")
        for n, block in enumerate(blocks[1:], start=2):
            store = append_partition(store.path, sp.csr_array(block),
                                     timestamp=parse_timestamp(f"2026-11-0{n}"))
        out.append(store)
    return out[0], out[1]


def _tree_pair(tmp_path, auditing_pair) -> tuple[Any, Any]:
    """Neighbour runs of the binary tree (three nodes: three Gaussian releases on each side)."""
    a, b = _stores(tmp_path)
    na, nb = auditing_pair()
    for store, noise in ((a, na), (b, nb)):
        tree_window(store, last="3D", epsilon=1.0, delta=1e-6, horizon=4, row_norm_bound=C, client="local",
                    noise=noise)
    assert len(na.records) == 2  # nodes (0, 1) and (1, 1) cover partitions 1..3
    return na, nb


def test_control_the_unchanged_tree_passes(tmp_path, auditing_pair):
    na, nb = _tree_pair(tmp_path, auditing_pair)
    ratios = assert_within_sensitivity(na.records, nb.records)
    assert_sensitivity(na.records, C * C)
    assert max(ratios) == pytest.approx(1.0, rel=1e-9)  # the added row at the bound moves node (1, 1) by c²


def test_a_reused_draw_is_caught(tmp_path, auditing_pair, monkeypatch):
    fixed = np.random.default_rng(0).standard_normal(10_000)

    def reused(self: NoiseSource, std: float, size: Any) -> Any:
        n = int(np.prod(shape_of(size)))
        values = std * fixed[:n].reshape(shape_of(size))
        return float(values) if size is None else values

    monkeypatch.setattr(NoiseSource, "_gaussian", reused)
    na, nb = _tree_pair(tmp_path, auditing_pair)
    with pytest.raises(AssertionError, match="shares a draw"):
        assert_within_sensitivity(na.records, nb.records)


def test_half_the_noise_with_the_full_scale_recorded_is_caught(tmp_path, auditing_pair, monkeypatch):
    original = NoiseSource.gaussian

    def halved(self: NoiseSource, std: float, size: Any = None, *, lattice: Any = None) -> Any:
        return original(self, std / 2, size, lattice=lattice)

    monkeypatch.setattr(NoiseSource, "gaussian", halved)
    na, nb = _tree_pair(tmp_path, auditing_pair)
    with pytest.raises(AssertionError, match="not the noise recorded"):
        assert_within_sensitivity(na.records, nb.records)


def test_a_halved_sensitivity_is_caught(tmp_path, auditing_pair, monkeypatch):
    """The window's Gaussian release given half its sensitivity: its worst-case neighbour moves past it, and the
    recorded sensitivity is not the closed form c²."""
    from dppca_dask.methods.window import release as release_module

    original = release_module.symmetric_gaussian_mechanism

    def halved(gram: Any, *, row_norm_bound: float, **kwargs: Any) -> Any:
        return original(gram, row_norm_bound=row_norm_bound / np.sqrt(2.0), **kwargs)

    a, b = _stores(tmp_path)
    runs = []
    for patched in (False, True):
        if patched:
            monkeypatch.setattr(release_module, "symmetric_gaussian_mechanism", halved)
        na, nb = auditing_pair()
        for store, noise in ((a, na), (b, nb)):
            window(store, last="2D", epsilon=1.0, delta=1e-6, row_norm_bound=C, client="local", noise=noise)
        runs.append((na, nb))
    (ca, cb), (ha, hb) = runs
    assert assert_within_sensitivity(ca.records, cb.records) == [pytest.approx(1.0, rel=1e-9)]
    assert_sensitivity(ca.records, C * C)
    with pytest.raises(AssertionError, match="moved by"):
        assert_within_sensitivity(ha.records, hb.records)
    with pytest.raises(AssertionError, match="the closed form is"):
        assert_sensitivity(ha.records, C * C)


def test_a_task_named_from_the_data_is_caught(tmp_path, local_client, caplog, seed, monkeypatch):
    from dppca_dask.coordinator import driver
    from dppca_dask.mechanisms.testing import AuditingNoiseSource

    a, b = _stores(tmp_path)

    def run(store: Any, noise: Any) -> Any:
        return window(store, last="2D", epsilon=1.0, delta=1e-6, row_norm_bound=C, client=local_client,
                      noise=noise)

    control = traced_neighbour_runs(local_client, caplog, (a, b), run, lambda: AuditingNoiseSource(seed))
    assert_same_execution(control)
    original = driver.Coordinator._run

    def leaking(self: Any, prefix: str, *args: Any) -> Any:
        aggregate = original(self, prefix, *args)
        trace = int(np.trace(np.asarray(aggregate[0] if isinstance(aggregate, tuple) else aggregate)))
        self.client.submit(lambda: None, key=f"{prefix}-trace-{trace}").result()  # a name from the data
        return aggregate

    monkeypatch.setattr(driver.Coordinator, "_run", leaking)
    planted = traced_neighbour_runs(local_client, caplog, (a, b), run, lambda: AuditingNoiseSource(seed))
    with pytest.raises(AssertionError, match="ran different tasks"):
        assert_same_execution(planted)


def _job(tmp_path) -> Any:
    from dppca_dask.jobs import parse_job
    from dppca_dask.ledger import Ledger

    Ledger.create(tmp_path / "ledger.sqlite").init_dataset("ds", total_epsilon=1.0, total_delta=1e-6)
    store = ingest(sp.csr_array(np.random.default_rng(3).standard_normal((60, D)) * 0.3), tmp_path / "store",
                   n_features=D)
    doc = {
        "job": {"name": "nightly"},
        "data": {"store": store.path},
        "mechanism": {"name": "analyze-gauss", "n_components": 1, "center": "none"},
        "privacy": {"epsilon": 0.5, "delta": 1e-7},
        "budget": {"ledger": str(tmp_path / "ledger.sqlite"), "dataset": "ds", "total_epsilon": 1.0,
                   "total_delta": 1e-6},
        "output": {"path": str(tmp_path / "out" / "{name}" / "{date}")},
    }
    return parse_job(doc, source="job.toml", base_dir=str(tmp_path))


def test_a_result_published_before_its_charge_is_caught(tmp_path, monkeypatch):
    from dppca_dask.jobs import run_job
    from dppca_dask.jobs import steps

    spec = _job(tmp_path)
    output = spec.output_dir("2026-11-01")
    seen = watch_publication(monkeypatch, output)
    assert run_job(spec, date="2026-11-01").status == "completed"
    assert_charged_before_published(seen, output)

    planted = _job(tmp_path / "planted")
    output = planted.output_dir("2026-11-01")

    def publish_early(name: str) -> None:
        if name == "pending-complete":
            steps._finalise(output)  # the result in place before the charge

    monkeypatch.setattr(steps, "_kill_point", publish_early)
    seen = watch_publication(monkeypatch, output)
    run_job(planted, date="2026-11-01")
    with pytest.raises(AssertionError, match="published before"):
        assert_charged_before_published(seen, output)
    assert os.path.exists(os.path.join(output, "result.json"))
