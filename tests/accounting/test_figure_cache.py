"""Privacy figures are cached by their public inputs (the events, δ, the accountant): the cached value equals a
fresh one, a damaged entry is recomputed, and a report built from the cache equals one built without it."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from dp_accounting import dp_event

from dppca_dask.accounting import EpsilonDeltaDpEvent, build_report, clear_memory_cache
from dppca_dask.accounting import calibration as calibration_module
from dppca_dask.accounting.calibration import cached_epsilon_for
from dppca_dask.accounting.composition import epsilon_for

EVENTS = [
    dp_event.SelfComposedDpEvent(EpsilonDeltaDpEvent(0.01, 1e-9), 10),
    dp_event.SelfComposedDpEvent(dp_event.GaussianDpEvent(12.5), 10),
    dp_event.GaussianDpEvent(40.0),
]


def _forbidden(*args: object, **kwargs: object) -> float:
    raise AssertionError("the figure should have come from the cache")


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_a_cached_figure_equals_a_fresh_one(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch,
                                            accountant: str) -> None:
    fresh = epsilon_for(EVENTS, delta=1e-6, accountant=accountant)  # type: ignore[arg-type]
    first = cached_epsilon_for(EVENTS, delta=1e-6, accountant=accountant)  # type: ignore[arg-type]
    assert first == fresh
    clear_memory_cache()
    monkeypatch.setattr(calibration_module, "epsilon_for", _forbidden)
    assert cached_epsilon_for(EVENTS, delta=1e-6, accountant=accountant) == fresh  # type: ignore[arg-type]
    # other inputs are other keys
    monkeypatch.undo()
    assert cached_epsilon_for(EVENTS, delta=1e-7, accountant=accountant) == epsilon_for(  # type: ignore[arg-type]
        EVENTS, delta=1e-7, accountant=accountant)  # type: ignore[arg-type]


def test_a_report_from_the_cache_equals_a_fresh_report(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    kwargs = {"target_epsilon": 2.0, "target_delta": 1e-6, "neighbouring": "add/remove one row"}
    fresh = build_report(EVENTS, **kwargs)
    clear_memory_cache()
    monkeypatch.setattr(calibration_module, "epsilon_for", _forbidden)
    assert build_report(EVENTS, **kwargs) == fresh


def test_a_damaged_entry_is_recomputed(isolated_cache: Path, caplog: pytest.LogCaptureFixture) -> None:
    honest = cached_epsilon_for(EVENTS, delta=1e-6)
    path = isolated_cache / "calibration.json"
    data = json.loads(path.read_text())
    (key,) = data["entries"]
    data["entries"][key]["epsilon"] = honest / 2  # the checksum no longer matches
    path.write_text(json.dumps(data))
    clear_memory_cache()
    with caplog.at_level(logging.WARNING, logger="dppca_dask.accounting.calibration"):
        assert cached_epsilon_for(EVENTS, delta=1e-6) == honest
    assert "malformed privacy figure cache entry" in caplog.text


def test_non_private_figures_are_cached_as_infinite(isolated_cache: Path) -> None:
    events = [dp_event.NonPrivateDpEvent()]
    assert cached_epsilon_for(events, delta=1e-6) == float("inf")
    clear_memory_cache()
    assert cached_epsilon_for(events, delta=1e-6) == float("inf")
