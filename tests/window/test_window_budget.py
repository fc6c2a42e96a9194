"""Partition-scoped budget: a window release charges the partitions it reads, and is refused as a whole."""

from __future__ import annotations

import pytest

from dppca_dask import window
from dppca_dask.accounting import event_to_json
from dppca_dask.errors import BudgetExceededError, InvalidParameterError, LedgerError
from dppca_dask.ledger import Ledger, compose_epsilon
from dppca_dask.mechanisms.testing import ZeroNoiseSource
from dppca_dask.methods.window.budget import partition_key

pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")


def _ledger(tmp_path, total: float = 1.2) -> Ledger:
    ledger = Ledger.create(tmp_path / "ledger.sqlite")
    ledger.init_dataset("nightly", total_epsilon=total, total_delta=1e-5)
    return ledger


def _one(ledger: Ledger, store, index: int, job_id: str) -> float:
    """ε of one release's events composed alone at the key's total δ."""
    entry = ledger.entry("nightly", job_id)
    assert partition_key("nightly", store, index) in entry.partitions
    return compose_epsilon(entry.counted_events, 1e-5)


def _spent(ledger: Ledger, store, index: int) -> float:
    """The composed ε of partition ``index``'s books (0 when nothing is charged to it)."""
    name = partition_key("nightly", store, index)
    return next((p.spent_epsilon for p in ledger.budget("nightly").partitions if p.partition == name), 0.0)


def _charged(ledger: Ledger, store, job_id: str) -> set[int]:
    """The indices of ``store``'s partitions that ``job_id``'s entry is charged to."""
    entry = ledger.entry("nightly", job_id)
    names = set(() if entry is None else entry.partitions)
    return {i for i in range(len(store.partitions)) if partition_key("nightly", store, i) in names}


def test_a_release_charges_the_partitions_it_reads(tmp_path, ten_days):
    ledger = _ledger(tmp_path)
    result = window(ten_days, last="2D", epsilon=1, delta=1e-6, client="local", noise=ZeroNoiseSource(),
                    ledger=ledger, dataset="nightly", job_id="night-1")
    entry = ledger.entry("nightly", "night-1")  # one entry of the dataset key, on the partitions it read
    assert entry.status == "charged" and entry.mechanism == "sliding-window"
    assert entry.partitions == ("t:2026-11-09", "t:2026-11-10") and entry.store_id == ten_days.store_id
    # the reservation is exactly the events the release emitted
    assert [event_to_json(e) for e in entry.counted_events] == list(result.privacy.events)
    for i in (8, 9):
        assert _spent(ledger, ten_days, i) == pytest.approx(_one(ledger, ten_days, i, "night-1"))
        assert _spent(ledger, ten_days, i) > 0.5
    assert _charged(ledger, ten_days, "night-1") == {8, 9}
    budget = ledger.budget("nightly")  # the worst-off partition's figure
    assert budget.spent_epsilon == pytest.approx(_one(ledger, ten_days, 9, "night-1"))
    assert {p.partition for p in budget.partitions} == {"t:2026-11-09", "t:2026-11-10"}


def test_a_release_over_any_partition_is_refused_and_returns_the_others(tmp_path, ten_days):
    ledger = _ledger(tmp_path)
    window(ten_days, last="1D", epsilon=1, delta=1e-6, client="local", noise=ZeroNoiseSource(), ledger=ledger,
           dataset="nightly", job_id="night-1")
    noise = ZeroNoiseSource()
    with pytest.raises(BudgetExceededError, match="on partition 't:2026-11-10'"):
        window(ten_days, last="3D", epsilon=1, delta=1e-6, client="local", noise=noise, ledger=ledger,
               dataset="nightly", job_id="night-2")
    assert noise.released_keys == frozenset()  # refused before any noise
    assert ledger.entry("nightly", "night-2").status == "refused"  # recorded, counted nowhere
    for i in (7, 8):
        assert _spent(ledger, ten_days, i) == 0
    assert _spent(ledger, ten_days, 9) == pytest.approx(_one(ledger, ten_days, 9, "night-1"))
    # an older window that avoids the spent partition still fits
    window(ten_days, last="2D", end="2026-11-09", epsilon=1, delta=1e-6, client="local",
           noise=ZeroNoiseSource(), ledger=ledger, dataset="nightly", job_id="night-3")
    assert _spent(ledger, ten_days, 8) == pytest.approx(_one(ledger, ten_days, 8, "night-3"))


def test_failure_before_noise_returns_the_reservation(tmp_path, ten_days, monkeypatch):
    ledger = _ledger(tmp_path)
    from dppca_dask.methods.window import release as module

    def broken(*args, **kwargs):
        raise RuntimeError("lost before the noise")

    monkeypatch.setattr(module, "_mechanism", broken)
    with pytest.raises(RuntimeError):
        window(ten_days, last="1D", epsilon=1, delta=1e-6, client="local", noise=ZeroNoiseSource(),
               ledger=ledger, dataset="nightly", job_id="night-1")
    assert ledger.entry("nightly", "night-1").status == "released"


def test_budget_arguments_are_checked_before_reading(tmp_path, ten_days):
    ledger = _ledger(tmp_path)
    with pytest.raises(InvalidParameterError, match="ledger, dataset and job_id together"):
        window(ten_days, last="1D", epsilon=1, delta=1e-6, client="local", ledger=ledger, dataset="nightly")
    with pytest.raises(LedgerError, match="no dataset 'other'"):
        window(ten_days, last="1D", epsilon=1, delta=1e-6, client="local", ledger=ledger, dataset="other",
               job_id="x")
    from dppca_dask.methods.window.budget import reserve_partitions

    with pytest.raises(InvalidParameterError, match="job_id must be a non-empty string"):
        reserve_partitions(ledger, "nightly", "", store=ten_days, partitions=[1], epsilon=1, delta=1e-6,
                           events=[])
    with pytest.raises(InvalidParameterError, match="at least one partition"):
        reserve_partitions(ledger, "nightly", "j", store=ten_days, partitions=[], epsilon=1, delta=1e-6,
                           events=[])


@pytest.mark.parametrize(("release", "eta", "labels"), [
    ("gaussian", 0.2, False), ("wishart", 0.5, False), ("gaussian", 0.5, False), ("gaussian", 0.5, True)])
def test_a_spectral_histogram_is_charged_every_partition_its_released_checkpoint_covers(tmp_path, daily_store,
                                                                                         release, eta, labels):
    """Nightly spectral-histogram releases (a new structure, then the saved one with a day appended each night, the
    expiry dropping checkpoints): the partitions the released checkpoint covers are the ones the count rule gives
    from the partition table, and exactly these are charged, each with the events the release emitted. With labels,
    the labelled Gram covers the same partitions. The new structure starts at the first night's window (partition
    2). η = 0.2 keeps every checkpoint of a 4-day window (t₁ the window's first partition); η = 0.5 merges them
    (t₁ before the window on some nights: the case a charge from the window alone would miss)."""
    from dppca_dask.methods.window.histogram import partition_checkpoints
    from dppca_dask.storage import append_partition
    from window_data import day, day_block, day_labels

    ledger = _ledger(tmp_path, total=1e4)
    store = daily_store(6, labels=labels)
    args = {"last": "4D", "labels": labels, "epsilon": 1, "delta": 1e-6, "release": release, "structure": "spectral-histogram",
            "eta": eta, "client": "local", "ledger": ledger, "dataset": "nightly"}
    starts: list[int] = []
    earlier = []
    for night in range(4):
        if night:
            store = append_partition(store.path, day_block(6 + night), timestamp=day(6 + night),
                                     labels=day_labels(6 + night) if labels else None)
        newest = len(store.partitions) - 1
        added = range(2, newest + 1) if not starts else (newest,)
        starts = partition_checkpoints(starts, [(i, max(0, i - 3)) for i in added], eta)
        result = window(store, noise=ZeroNoiseSource(), job_id=f"night-{night}", **args)
        covered = result.window.partitions
        assert covered == tuple(range(starts[0], newest + 1))
        charged = _charged(ledger, store, f"night-{night}")
        assert charged == set(covered), (night, sorted(covered), sorted(charged))
        earlier.append(covered[0] < newest - 3)
        entry = ledger.entry("nightly", f"night-{night}")  # one entry of the dataset key, on the partitions covered
        assert entry.status == "charged"
        assert [event_to_json(e) for e in entry.counted_events] == list(result.privacy.events)


def _histogram_directory(store, name: str) -> str:
    from dppca_dask.methods.window.histogram import histogram_path

    return histogram_path(store.path, name)


def test_a_row_window_with_a_horizon_charges_the_horizons_partitions_only(tmp_path, ten_days):
    ledger = _ledger(tmp_path)
    result = window(ten_days, last_rows=30, last="3D", epsilon=1, delta=1e-6, client="local",
                    noise=ZeroNoiseSource(), ledger=ledger, dataset="nightly", job_id="night-1")
    assert result.window.partitions == (7, 8, 9)
    assert ledger.entry("nightly", "night-1").status == "charged"
    assert _charged(ledger, ten_days, "night-1") == {7, 8, 9}


@pytest.mark.parametrize("kwargs", [{"structure": "spectral-histogram"}, {"cache": True}],
                         ids=["spectral-histogram", "cache"])
def test_a_row_window_with_a_horizon_refuses_the_histogram_and_the_cache_before_anything(tmp_path, ten_days,
                                                                                         kwargs):
    """Which partitions a row window holds whole follows their private row counts, with a horizon as without: the
    spectral histogram and the Gram cache are refused before any reservation or noise."""
    from dppca_dask.mechanisms.testing import AuditingNoiseSource

    ledger = _ledger(tmp_path)
    noise = AuditingNoiseSource(1)
    with pytest.raises(InvalidParameterError, match="serves time windows"):
        window(ten_days, last_rows=30, last="3D", epsilon=1, delta=1e-6, client="local", noise=noise,
               ledger=ledger, dataset="nightly", job_id="night-1", **kwargs)
    assert noise.released_keys == frozenset() and ledger.find("night-1") == []


def test_a_saved_row_window_with_a_horizon_reads_back_as_released(tmp_path, ten_days):
    from dppca_dask.methods.window.release import load_release

    result = window(ten_days, last_rows=30, last="3D", end="2026-11-08", epsilon=1, delta=1e-6, client="local",
                    noise=ZeroNoiseSource())
    result.save(tmp_path / "out")
    loaded = load_release(tmp_path / "out")
    assert loaded.window == result.window.public() and loaded.window.partitions == (5, 6, 7)
    assert loaded.window.start == "last 30 rows after 2026-11-05T00:00:00+00:00" and loaded.window.last_rows == 30
    assert loaded.calibration == result.calibration and loaded.privacy == result.privacy
