"""Python calls given a ledger keep the same books as jobs: `pca`, the estimator, `lowrank` and window releases on
the same dataset key compose on the partitions they share; a job id stands for one release."""

from __future__ import annotations

import datetime as _dt
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask import pca, window
from dppca_dask.errors import BudgetExceededError, InvalidParameterError, LedgerError
from dppca_dask.estimator import DPPCA
from dppca_dask.ledger import CHARGED, Ledger
from dppca_dask.api import lowrank
from dppca_dask.mechanisms.testing import ZeroNoiseSource

DAYS = ("t:2026-11-01", "t:2026-11-02", "t:2026-11-03")


def _store(path: Path) -> str:
    from dppca_dask.ingest import ingest
    from dppca_dask.storage import append_partition

    rng = np.random.default_rng(5)
    blocks = [sp.csr_array(rng.standard_normal((20, 6)) * (rng.random((20, 6)) < 0.5) * 0.3) for _ in range(3)]
    ingest(blocks[0], path, n_features=6, timestamp="2026-11-01")
    for n, block in enumerate(blocks[1:], start=2):
        append_partition(str(path), block, timestamp=_dt.datetime(2026, 11, n, tzinfo=_dt.timezone.utc))
    return str(path)


@pytest.fixture
def books(tmp_path: Path) -> tuple[str, str]:
    ledger = str(tmp_path / "ledger.sqlite")
    Ledger.create(ledger).init_dataset("ds", total_epsilon=0.8, total_delta=1e-5)
    return ledger, _store(tmp_path / "days.zarr")


def test_pca_the_estimator_lowrank_and_window_share_the_books(books: tuple[str, str]) -> None:
    ledger, store = books
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)  # seeded/zero-noise runs say they are not private
        pca(store, epsilon=0.4, delta=1e-7, mechanism="analyze-gauss", executor="local", noise=ZeroNoiseSource(),
            ledger=ledger, dataset="ds", job_id="pca-1")
        entry = Ledger(ledger).entry("ds", "pca-1")
        assert entry.status == CHARGED and entry.partitions == DAYS and entry.mechanism == "analyze-gauss"
        with pytest.raises(LedgerError, match="already charged"):  # a job id is one release
            pca(store, epsilon=0.4, delta=1e-7, mechanism="analyze-gauss", executor="local",
                noise=ZeroNoiseSource(), ledger=ledger, dataset="ds", job_id="pca-1")
        DPPCA(epsilon=0.4, delta=1e-7, mechanism="analyze-gauss", center=False, executor="local").fit(
            store, noise=ZeroNoiseSource(), ledger=ledger, dataset="ds", job_id="fit-1")
        assert Ledger(ledger).entry("ds", "fit-1").partitions == DAYS
        noise = ZeroNoiseSource()
        with pytest.raises(BudgetExceededError, match="on partition 't:2026-11-0"):  # the same rows: over
            window(store, last="1D", epsilon=1.0, delta=1e-7, client="local", noise=noise, ledger=ledger,
                   dataset="ds", job_id="night")
        assert noise.released_keys == frozenset()  # refused before any noise
        with pytest.raises(LedgerError, match="implies nothing about the key's relation"):  # a row-change release
            lowrank(store, rank=2, epsilon=1.0, delta=1e-7, executor="local", noise=ZeroNoiseSource(),
                    ledger=ledger, dataset="ds", job_id="lr-1")
    budget = Ledger(ledger).budget("ds")
    assert [e.job_id for e in budget.entries if e.status == CHARGED] == ["pca-1", "fit-1"]
    assert budget.spent_epsilon <= 0.8


def test_a_ledger_needs_its_three_arguments_and_a_private_release(books: tuple[str, str]) -> None:
    ledger, store = books
    with pytest.raises(InvalidParameterError, match="ledger, dataset and job_id together"):
        pca(store, epsilon=0.4, delta=1e-7, mechanism="analyze-gauss", executor="local", ledger=ledger,
            dataset="ds")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=UserWarning)
        with pytest.raises(InvalidParameterError, match="releases nothing private"):
            pca(store, epsilon=0.4, delta=1e-7, mechanism="exact", executor="local", ledger=ledger, dataset="ds",
                job_id="x")
    assert Ledger(ledger).entries(["ds"]) == []


def test_a_failure_after_the_noise_keeps_the_charge(books: tuple[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    ledger, store = books
    from dppca_dask.api import _pca as api

    def broken(*args, **kwargs):
        noise.mark_released(["drawn"])  # as a release that drew its noise and then failed
        raise RuntimeError("lost after the noise")

    noise = ZeroNoiseSource()
    monkeypatch.setattr(api, "_execute", broken)
    with pytest.raises(RuntimeError):
        pca(store, epsilon=0.4, delta=1e-7, mechanism="analyze-gauss", executor="local", noise=noise,
            ledger=ledger, dataset="ds", job_id="lost")
    entry = Ledger(ledger).entry("ds", "lost")
    assert (entry.status, entry.outcome) == (CHARGED, "failed")  # invariant 6: never refunded
