"""The ledger reserves exactly what a run spends: for every mechanism a job can run (centred or not, and the topic
model), the events reserved before the run compose to the same privacy profile as the events the run emits (its
privacy report), through a real LocalCluster; the reservation is the same on neighbouring stores (it depends on
public parameters and the declared shape only); and the planner's events under both calibrations match what the
noise actually gives.

Deterministic (no statistical assertion): the runs use seeded noise only to be reproducible."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import pytest

from dppca_dask.accounting import epsilon_for, event_from_json
from dppca_dask.ledger import CHARGED, Ledger

#: (mechanism, parameters) of each job mechanism, small enough for seconds per run.
JOB_MECHANISMS = [
    ("adaptive-power", {"n_iter": 3, "center": "none"}),
    ("adaptive-power", {"n_iter": 2, "n_components": 2}),  # a job's default: centred (mean and variance events)
    ("adaptive-power", {"n_iter": 2, "center": "private", "row_norm_bound": "auto"}),
    ("analyze-gauss", {"center": "none"}),
    ("analyze-gauss", {}),  # centred by default
    ("auto", {"n_iter": 2}),  # centred by default: the mean, the pilot and the chosen release
    ("auto", {"n_iter": 2, "center": "none"}),
    ("adaptive-power-block", {"n_iter": 2, "n_components": 2}),
    ("private-power", {"n_iter": 3, "coherence": 400.0}),
    ("private-power", {"n_iter": 2, "c_doubling": True}),
    ("private-low-rank", {"rank": 2}),
    ("private-low-rank", {"rank": 2, "projection": "tight", "row_norm_bound": 2.0}),
    ("randomized-response", {"rank": 2}),
]
DELTAS = (1e-9, 1e-7, 1e-6, 1e-5)


@pytest.fixture(scope="module")
def reservation_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A 3,000 x 120 store with a declared width (its root group's "schema" attribute)."""
    import zarr

    from dppca_dask.datasets import PlantedSpec, write_low_coherence

    path = tmp_path_factory.mktemp("reservations") / "store.zarr"
    write_low_coherence(path, PlantedSpec(n_rows=3_000, n_cols=120, nnz_per_row=12, support=30, signal_share=0.02,
                                          seed=4), rows_per_partition=1_000, progress=False)
    zarr.open_group(str(path), mode="r+").attrs["schema"] = "declared"
    return str(path)


def _same_profile(reserved: list, emitted: list) -> None:
    for delta in DELTAS:
        a, b = epsilon_for(reserved, delta=delta), epsilon_for(emitted, delta=delta)
        assert math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12), (delta, a, b)


@pytest.mark.parametrize("mechanism, parameters", JOB_MECHANISMS)
def test_reserved_events_equal_the_events_the_run_emits(tmp_path: Path, reservation_store: str, local_client,
                                                        seed: int, mechanism: str, parameters: dict) -> None:
    from dppca_dask.jobs import parse_job, run_job
    from dppca_dask.mechanisms import NoiseSource

    doc = {
        "job": {"name": "reservation"},
        "data": {"store": reservation_store},
        "mechanism": {"name": mechanism, **parameters},
        "privacy": {"epsilon": 0.7, "delta": 1e-7},
        "budget": {"ledger": str(tmp_path / "ledger.sqlite"), "dataset": "ds"},
        "output": {"path": str(tmp_path / "out")},
    }
    ledger = Ledger.create(tmp_path / "ledger.sqlite")
    ledger.init_dataset("ds", total_epsilon=5.0, total_delta=1e-5)
    spec = parse_job(doc, base_dir=str(tmp_path))
    with warnings.catch_warnings():
        from dppca_dask.errors import NotPrivateWarning
        warnings.simplefilter("ignore", NotPrivateWarning)  # seeded noise: reproducible, not private
        warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
        outcome = run_job(spec, date="2026-01-01", client=local_client, noise=NoiseSource.from_seed(seed))
    entry = ledger.entry("ds", "reservation@2026-01-01")
    assert entry.status == CHARGED and entry.group_size == 1
    assert entry.neighbouring == outcome.result.privacy.neighbouring
    emitted = [event_from_json(e) for e in outcome.result.privacy.events]
    _same_profile(list(entry.events), emitted)
    assert ledger.budget("ds").spent_epsilon == pytest.approx(
        epsilon_for(emitted, delta=1e-5), rel=5e-3)  # the ledger's bounded grid: within 0.5%, never below
    assert ledger.budget("ds").spent_epsilon >= epsilon_for(emitted, delta=1e-5) * (1 - 1e-9)


@pytest.mark.parametrize("calibration", ["standard", "paper"])
@pytest.mark.parametrize("mechanism, parameters", [
    ("private-low-rank", {"rank": 2}),
    ("randomized-response", {"rank": 2}),
    ("private-power", {"rank": 1, "n_iter": 3, "coherence": 400.0}),
])
def test_planned_events_are_what_the_noise_gives_under_either_calibration(
        reservation_store: str, seed: int, calibration: str, mechanism: str, parameters: dict) -> None:
    """Under calibration="paper" the noise does not meet the requested (ε, δ) (seed 003): the plan reserves what
    the noise gives, not the request."""
    from dppca_dask.jobs.plan import planned_events
    from dppca_dask.api import lowrank

    plan = planned_events(mechanism, n_rows=3_000, n_cols=120, epsilon=0.7, delta=1e-7,
                          parameters={**parameters, "calibration": calibration})
    with warnings.catch_warnings():
        from dppca_dask.errors import NotPrivateWarning
        warnings.simplefilter("ignore", NotPrivateWarning)
        warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
        result = lowrank(reservation_store, epsilon=0.7, delta=1e-7, mechanism=mechanism, calibration=calibration,
                         client="local", seed=seed, **parameters)
    assert plan.neighbouring == result.privacy.neighbouring
    _same_profile(list(plan.events), [event_from_json(e) for e in result.privacy.events])


@pytest.fixture(scope="module")
def corpus_neighbours(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A generated corpus store (2,000 documents × 50 words) and its neighbour without its document 1,234 (the
    relation of the topic model: add/remove one row), both with a declared width."""
    import zarr

    import dppca_dask
    from dppca_dask.methods.tensor.corpora import lda_corpus

    counts = lda_corpus(2_000, 50, 3, doc_length=30, topic_concentration=0.1, seed=8).counts
    keep = [i for i in range(counts.shape[0]) if i != 1_234]
    base = tmp_path_factory.mktemp("corpus-neighbours")
    paths = []
    for name, matrix in (("a.zarr", counts), ("b.zarr", counts[keep])):
        dppca_dask.write_matrix(base / name, matrix, rows_per_partition=700)
        group = zarr.open_group(str(base / name), mode="r+")
        meta = dict(group.attrs["dppca_dask"])
        meta["schema"] = "declared"
        group.attrs["dppca_dask"] = meta
        paths.append(str(base / name))
    return paths[0], paths[1]


def _run_topics_job(tmp_path: Path, store: str, client, seed: int):
    from dppca_dask.jobs import parse_job, run_job
    from dppca_dask.mechanisms import NoiseSource

    doc = {
        "job": {"name": "topics"},
        "data": {"store": store},
        "mechanism": {"name": "topics", "n_topics": 3, "n_restarts": 2, "n_iter": 2, "pca_iter": 2, "alpha0": 0.3},
        "privacy": {"epsilon": 0.7, "delta": 1e-7},
        "budget": {"ledger": str(tmp_path / "ledger.sqlite"), "dataset": "ds"},
        "output": {"path": str(tmp_path / "out")},
    }
    ledger = Ledger.create(tmp_path / "ledger.sqlite")
    ledger.init_dataset("ds", total_epsilon=5.0, total_delta=1e-5)
    with warnings.catch_warnings():
        from dppca_dask.errors import NotPrivateWarning
        warnings.simplefilter("ignore", NotPrivateWarning)
        warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
        outcome = run_job(parse_job(doc, base_dir=str(tmp_path)), date="2026-01-01", client=client,
                          noise=NoiseSource.from_seed(seed))
    return ledger.entry("ds", "topics@2026-01-01"), outcome


def test_topics_job_reserves_its_events_and_the_same_on_neighbours(tmp_path: Path, corpus_neighbours, local_client,
                                                                   seed: int) -> None:
    reserved = []
    for name, store in zip("ab", corpus_neighbours):
        (tmp_path / name).mkdir()
        entry, outcome = _run_topics_job(tmp_path / name, store, local_client, seed)
        assert entry.status == CHARGED and entry.neighbouring == outcome.result.privacy.neighbouring
        assert entry.neighbouring == "add/remove one row"
        emitted = [event_from_json(e) for e in outcome.result.privacy.events]
        _same_profile(list(entry.events), emitted)
        reserved.append(entry.events)
    assert reserved[0] == reserved[1]  # the reservation does not depend on the data


@pytest.mark.parametrize("mechanism, parameters", [
    *JOB_MECHANISMS,
    ("topics", {"n_topics": 3}),
    ("topics", {"n_topics": 2, "alpha0": 1.0, "n_restarts": 4, "pca_share": 0.3}),
])
def test_the_plan_is_the_same_on_neighbouring_stores(tmp_path: Path, corpus_neighbours, mechanism: str,
                                                     parameters: dict) -> None:
    """Neighbours differ by one row, so by n_rows: every planner's events must not depend on it."""
    from dppca_dask.jobs import parse_job
    from dppca_dask.jobs.plan import plan_job
    from dppca_dask.storage import open_matrix

    doc = {"job": {"name": "p"}, "data": {"store": "s.zarr"}, "mechanism": {"name": mechanism, **parameters},
           "privacy": {"epsilon": 0.7, "delta": 1e-7}, "budget": {"ledger": "l.sqlite", "dataset": "ds"},
           "output": {"path": "out"}}
    spec = parse_job(doc, base_dir=str(tmp_path))
    plans = [plan_job(spec, open_matrix(store)) for store in corpus_neighbours]
    assert plans[0].neighbouring == plans[1].neighbouring
    assert plans[0].events == plans[1].events and plans[0].describe() == plans[1].describe()
    if parameters.get("center", "private") == "private" and mechanism in ("adaptive-power", "analyze-gauss"):
        assert plans[0].describe()[0].startswith("center: private (the mean of the clipped rows")


def test_plan_release_plans_centring_as_pca_runs_it() -> None:
    """plan_release takes center (default: pca's) and row_norm_bound="auto": the private mean, quantile and
    explained variance are events of the plan, as a centred run emits them (checked against runs above)."""
    import inspect

    from dppca_dask.accounting import EpsilonDeltaDpEvent
    from dppca_dask.api import pca, plan_release

    plain = plan_release(120, mechanism="analyze-gauss", epsilon=0.7, delta=1e-7, center="none")
    centred = plan_release(120, mechanism="analyze-gauss", epsilon=0.7, delta=1e-7, center="private")
    auto = plan_release(120, mechanism="analyze-gauss", epsilon=0.7, delta=1e-7, center="private",
                        row_norm_bound="auto")
    # quantile (an automatic bound) or clipped fraction (a fixed one), mean, Gram matrix, variance
    assert len(plain.events) == 1 and len(centred.events) == 4 and len(auto.events) == 4
    assert isinstance(auto.events[0], EpsilonDeltaDpEvent)
    assert centred.calibration["center"] == "private" and centred.calibration["mean_noise_multiplier"] > 0
    default = plan_release(120, mechanism="analyze-gauss", epsilon=0.7, delta=1e-7)
    expected = centred if inspect.signature(pca).parameters["center"].default in (True, "private") else plain
    assert default.events == expected.events
    for mechanism in ("adaptive-power", "analyze-gauss"):
        for plan in (plan_release(120, mechanism=mechanism, epsilon=0.7, delta=1e-7, center=c) for c in
                     ("private", "none")):
            assert epsilon_for(list(plan.events), delta=1e-7) <= 0.7 * (1 + 1e-9)
