"""Calibration: reference multipliers, never overshooting (property test), the budget split, errors, the cache."""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path

import pytest
from dp_accounting import GaussianDpEvent, get_sigma_gaussian
from hypothesis import given, settings
from hypothesis import strategies as st

from dppca_dask.accounting import (
    CACHE_DIR_ENV,
    EpsilonDeltaDpEvent,
    cache_path,
    calibrate_gaussian,
    clear_memory_cache,
    epsilon_for,
    gaussian_delta,
    zcdp_rho_for,
)
from dppca_dask.methods.adaptive_power.calibration import AdaptivePowerCalibration, calibrate_adaptive_power
from dppca_dask.accounting import calibration as calibration_module
from dppca_dask.methods.adaptive_power import calibration as adaptive_calibration_module
from dppca_dask.errors import CalibrationError, InvalidParameterError

RTOL = 1e-4  # the relative precision the calibration promises
SMALL = {"epsilon": 1.0, "delta": 1e-5, "n_iter": 4}  # a quick calibration for the cache tests


def _search_forbidden(*args: object, **kwargs: object) -> tuple[float, float]:
    raise AssertionError("the calibration search ran although the answer should have come from the cache")


# -- reference values ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference() -> AdaptivePowerCalibration:
    # specs/accounting.md: ε_svt = 0.05, T = 30, target (2, 1e-6) → m ≈ 15.26 (PLD, worst-case SVT); the
    # reference has no second-pass reserve, so the share is 0 here
    return calibrate_adaptive_power(epsilon=2.0, delta=1e-6, n_iter=30, epsilon_svt=0.05, cache=False,
                                    failure_delta_share=0.0)


def test_second_pass_reserve_is_in_the_events_and_within_the_target() -> None:
    cal = calibrate_adaptive_power(epsilon=2.0, delta=1e-6, n_iter=30, epsilon_svt=0.05, cache=False)
    # default share 1%: failure_delta = 1e-8 = (1 + e^0.05)·pass_delta, spread over the 30 SVT events
    assert cal.failure_delta == pytest.approx(1e-8, rel=1e-15)
    assert cal.pass_delta == pytest.approx(1e-8 / (1 + math.exp(0.05)), rel=1e-15)
    assert cal.svt_delta == pytest.approx(1e-8 / 30, rel=1e-12)
    emitted = [EpsilonDeltaDpEvent(0.05, cal.svt_delta), GaussianDpEvent(cal.noise_multiplier)] * 30
    assert epsilon_for(emitted, delta=1e-6) == cal.achieved_epsilon <= 2.0
    assert cal.achieved_epsilon >= 2.0 * (1 - 0.01)  # within 1% of the target
    # the reserve costs little noise: 15.26 without it
    assert 15.26 < cal.noise_multiplier < 15.26 * 1.005
    with pytest.raises(InvalidParameterError, match=r"failure_delta_share must be in \[0, 1\); got 1.0"):
        calibrate_adaptive_power(epsilon=2.0, delta=1e-6, n_iter=30, failure_delta_share=1.0)


def test_reference_pld_multiplier(reference: AdaptivePowerCalibration) -> None:
    assert reference.noise_multiplier == pytest.approx(15.26, abs=5e-3)
    assert reference.epsilon_svt == 0.05 and reference.svt_share is None
    assert reference.achieved_epsilon <= 2.0
    # the achieved figure is what the privacy report of such a run computes from its events
    emitted = [EpsilonDeltaDpEvent(0.05), GaussianDpEvent(reference.noise_multiplier)] * 30
    assert epsilon_for(emitted, delta=1e-6) == reference.achieved_epsilon
    assert epsilon_for(reference.events, delta=1e-6) == reference.achieved_epsilon


def test_reference_is_minimal(reference: AdaptivePowerCalibration) -> None:
    less = [EpsilonDeltaDpEvent(0.05), GaussianDpEvent(reference.noise_multiplier / (1 + 2 * RTOL))] * 30
    assert epsilon_for(less, delta=1e-6) > 2.0


def test_reference_rdp_multiplier() -> None:
    # same target, RDP with the SVT as ZCDpEvent(ε²/2): m ≈ 17.22
    cal = calibrate_adaptive_power(epsilon=2.0, delta=1e-6, n_iter=30, epsilon_svt=0.05, accountant="rdp",
                                   failure_delta_share=0.0)
    assert cal.noise_multiplier == pytest.approx(17.22, abs=5e-3)
    assert cal.achieved_epsilon <= 2.0 and cal.accountant == "rdp"


# -- never overshoots ---------------------------------------------------------------------------------------


@settings(max_examples=6, deadline=None, derandomize=True)
@given(
    epsilon=st.floats(0.2, 6.0),
    log10_delta=st.floats(-10.0, -3.0),
    n_iter=st.integers(1, 40),
    n_components=st.integers(1, 2),
    svt_share=st.floats(0.02, 0.6),
)
def test_calibration_never_overshoots(
    epsilon: float, log10_delta: float, n_iter: int, n_components: int, svt_share: float
) -> None:
    delta = 10.0**log10_delta
    cal = calibrate_adaptive_power(
        epsilon=epsilon, delta=delta, n_iter=n_iter, n_components=n_components, svt_share=svt_share, cache=False
    )
    assert epsilon_for(cal.events, delta=delta) <= epsilon
    assert cal.achieved_epsilon <= epsilon
    # and it is within the promised precision of the smallest multiplier
    less = AdaptivePowerCalibration(**{**cal.to_dict(), "noise_multiplier": cal.noise_multiplier / (1 + 2 * RTOL)})
    assert epsilon_for(less.events, delta=delta) > epsilon


@settings(max_examples=10, deadline=None, derandomize=True)
@given(epsilon=st.floats(0.05, 20.0), log10_delta=st.floats(-12.0, -2.0), count=st.integers(1, 1000))
def test_gaussian_calibration_never_overshoots(epsilon: float, log10_delta: float, count: int) -> None:
    delta = 10.0**log10_delta
    m = calibrate_gaussian(epsilon=epsilon, delta=delta, count=count)
    assert epsilon_for([GaussianDpEvent(m)] * count, delta=delta) <= epsilon
    assert gaussian_delta(m / math.sqrt(count), epsilon * (1 - 1e-6)) > delta  # and is tight


def test_gaussian_calibration_is_balle_wang() -> None:
    # one release: the analytic Gaussian (Balle–Wang 2018); count releases: sqrt(count) times it
    sigma = get_sigma_gaussian(1.0, 1e-6)
    assert calibrate_gaussian(epsilon=1.0, delta=1e-6) == pytest.approx(sigma, rel=1e-8)
    assert calibrate_gaussian(epsilon=1.0, delta=1e-6, count=30) == pytest.approx(sigma * math.sqrt(30), rel=1e-8)
    assert calibrate_gaussian(epsilon=50.0, delta=0.4) < 1.0  # tiny noise for a huge budget


# -- the budget split ---------------------------------------------------------------------------------------


def test_svt_share_definition() -> None:
    cal = calibrate_adaptive_power(epsilon=1.0, delta=1e-6, n_iter=5, svt_share=0.2, n_components=2)
    rho = zcdp_rho_for(1.0, delta=1e-6)
    # ε_svt = sqrt(2·share·ρ_total/(T·k))
    assert cal.rho_total == rho
    assert cal.epsilon_svt == pytest.approx(math.sqrt(2 * 0.2 * rho / 10), rel=1e-15)
    assert cal.n_releases == 10 and cal.svt_share == 0.2
    assert cal.achieved_epsilon <= 1.0
    assert json.loads(json.dumps(cal.to_dict()))["noise_multiplier"] == cal.noise_multiplier


def test_explicit_epsilon_svt_overrides_the_share() -> None:
    a = calibrate_adaptive_power(epsilon=1.0, delta=1e-6, n_iter=5, svt_share=0.9, epsilon_svt=0.01)
    b = calibrate_adaptive_power(epsilon=1.0, delta=1e-6, n_iter=5, svt_share=0.1, epsilon_svt=0.01)
    assert a.epsilon_svt == b.epsilon_svt == 0.01
    assert a.noise_multiplier == b.noise_multiplier


def test_more_svt_budget_means_more_gaussian_noise() -> None:
    small = calibrate_adaptive_power(epsilon=1.0, delta=1e-6, n_iter=5, svt_share=0.1)
    large = calibrate_adaptive_power(epsilon=1.0, delta=1e-6, n_iter=5, svt_share=0.5)
    assert large.epsilon_svt > small.epsilon_svt and large.noise_multiplier > small.noise_multiplier


# -- errors -------------------------------------------------------------------------------------------------


def test_svt_alone_exceeding_the_target_raises() -> None:
    with pytest.raises(CalibrationError, match=r"the 30 SVT steps alone spend epsilon=.* already reaches"):
        calibrate_adaptive_power(epsilon=1.0, delta=1e-6, n_iter=30, epsilon_svt=0.5)


def test_target_too_close_to_the_svt_part_raises() -> None:
    svt_alone = epsilon_for([EpsilonDeltaDpEvent(0.05)] * 10, delta=1e-6)
    with pytest.raises(CalibrationError, match="no Gaussian noise multiplier up to 1e\\+07 meets"):
        calibrate_adaptive_power(epsilon=svt_alone + 1e-9, delta=1e-6, n_iter=10, epsilon_svt=0.05,
                                 failure_delta_share=0.0)


def test_a_search_result_that_fails_the_check_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(adaptive_calibration_module, "_search", lambda *args: (1.0, 1.5))  # claims ε = 1.5 > 1
    with pytest.raises(CalibrationError, match="calibration failed its check: epsilon=1.5 exceeds the target 1.0"):
        calibrate_adaptive_power(**SMALL)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epsilon": 0.0}, "epsilon must be finite and > 0"),
        ({"epsilon": math.inf}, "epsilon must be finite and > 0"),
        ({"delta": 0.0}, r"delta must be in \(0, 1\)"),
        ({"delta": 1.0}, r"delta must be in \(0, 1\)"),
        ({"n_iter": 0}, "n_iter must be an integer >= 1"),
        ({"n_iter": 2.0}, "n_iter must be an integer >= 1"),
        ({"n_iter": True}, "n_iter must be an integer >= 1"),
        ({"n_components": 0}, "n_components must be an integer >= 1"),
        ({"svt_share": 0.0}, r"svt_share must be in \(0, 1\)"),
        ({"svt_share": 1.0}, r"svt_share must be in \(0, 1\)"),
        ({"epsilon_svt": -0.1}, r"epsilon_svt must be in \(0, 700\]; got -0.1"),
        ({"delta": 1e-15}, r"delta must be >= 1e-14 for adaptive power iteration"),
        ({"n_iter": 10_001}, r"n_iter × n_components must be <= 10000; got 10001 × 1 = 10001"),
        ({"accountant": "gdp"}, "accountant must be 'pld' or 'rdp'"),
    ],
)
def test_parameter_errors(kwargs: dict[str, object], message: str) -> None:
    params: dict[str, object] = {"epsilon": 1.0, "delta": 1e-6, "n_iter": 5} | kwargs
    with pytest.raises(InvalidParameterError, match=message):
        calibrate_adaptive_power(**params)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"epsilon": -1.0}, "epsilon must be finite and > 0"),
        ({"delta": 0.0}, r"delta must be in \(0, 1\)"),
        ({"count": 0}, "count must be an integer >= 1"),
    ],
)
def test_gaussian_parameter_errors(kwargs: dict[str, object], message: str) -> None:
    params: dict[str, object] = {"epsilon": 1.0, "delta": 1e-6} | kwargs
    with pytest.raises(InvalidParameterError, match=message):
        calibrate_gaussian(**params)  # type: ignore[arg-type]


# -- the cache ----------------------------------------------------------------------------------------------

def test_cache_is_written_and_used(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    t0 = time.perf_counter()
    first = calibrate_adaptive_power(**SMALL)
    cold = time.perf_counter() - t0
    assert not first.from_cache
    path = isolated_cache / "calibration.json"
    assert cache_path() == path and path.is_file()
    assert len(json.loads(path.read_text())["entries"]) == 1

    clear_memory_cache()
    monkeypatch.setattr(adaptive_calibration_module, "_search", _search_forbidden)
    t0 = time.perf_counter()
    second = calibrate_adaptive_power(**SMALL)
    cached = time.perf_counter() - t0
    assert second.from_cache
    assert second.noise_multiplier == first.noise_multiplier
    assert second.achieved_epsilon == first.achieved_epsilon
    assert cached < cold  # one PLD evaluation (the re-check) instead of a search
    # a third call in the same process does not even read the file
    path.unlink()
    assert calibrate_adaptive_power(**SMALL) is second


def test_corrupted_cache_file_is_ignored_and_replaced(
    isolated_cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    isolated_cache.mkdir()
    path = isolated_cache / "calibration.json"
    path.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="dppca_dask.accounting.calibration"):
        cal = calibrate_adaptive_power(**SMALL)
    assert not cal.from_cache and cal.achieved_epsilon <= 1.0
    assert "ignoring the unreadable calibration cache" in caplog.text
    assert len(json.loads(path.read_text())["entries"]) == 1  # rewritten as a valid cache

    path.write_text(json.dumps({"something": "else"}))
    clear_memory_cache()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dppca_dask.accounting.calibration"):
        assert not calibrate_adaptive_power(**SMALL).from_cache
    assert "no 'entries' table" in caplog.text


def test_cache_entries_that_miss_the_target_or_are_malformed_are_ignored(
    isolated_cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    honest = calibrate_adaptive_power(**SMALL)
    path = isolated_cache / "calibration.json"
    data = json.loads(path.read_text())
    (key,) = data["entries"]
    data["entries"][key]["noise_multiplier"] = honest.noise_multiplier / 2  # an edited, overspending entry
    path.write_text(json.dumps(data))
    clear_memory_cache()
    with caplog.at_level(logging.WARNING, logger="dppca_dask.methods.adaptive_power.calibration"):
        again = calibrate_adaptive_power(**SMALL)
    assert not again.from_cache and again.noise_multiplier == honest.noise_multiplier
    assert "does not meet its target" in caplog.text

    data["entries"][key] = "garbage"
    path.write_text(json.dumps(data))
    clear_memory_cache()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dppca_dask.methods.adaptive_power.calibration"):
        assert not calibrate_adaptive_power(**SMALL).from_cache
    assert "malformed calibration cache entry" in caplog.text


def test_unwritable_cache_is_logged_and_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(CACHE_DIR_ENV, str(blocker / "cache"))  # a directory inside a regular file
    with caplog.at_level(logging.WARNING, logger="dppca_dask.accounting.calibration"):
        cal = calibrate_adaptive_power(**SMALL)
    assert cal.achieved_epsilon <= 1.0
    assert "could not write the calibration cache" in caplog.text


def test_cache_can_be_disabled(isolated_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calibrate_adaptive_power(**SMALL, cache=False)
    assert not isolated_cache.exists()
    monkeypatch.setenv(CACHE_DIR_ENV, "")
    assert cache_path() is None
    calibrate_adaptive_power(**SMALL)
    assert not isolated_cache.exists()


def test_default_cache_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(CACHE_DIR_ENV)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_path() == tmp_path / ".cache" / "dppca_dask" / "calibration.json"


def test_cache_key_includes_the_dp_accounting_version(monkeypatch: pytest.MonkeyPatch) -> None:
    calibrate_adaptive_power(**SMALL)
    clear_memory_cache()
    monkeypatch.setattr(calibration_module, "_dp_accounting_version", lambda: "9.9.9")
    assert not calibrate_adaptive_power(**SMALL).from_cache


def test_cache_key_includes_every_parameter() -> None:
    base = calibrate_adaptive_power(**SMALL)
    for change in ({"n_iter": 5}, {"delta": 1e-6}, {"svt_share": 0.3}, {"n_components": 2}):
        clear_memory_cache()
        other = calibrate_adaptive_power(**(SMALL | change))  # type: ignore[arg-type]
        assert not other.from_cache and other.noise_multiplier != base.noise_multiplier


def test_svt_step_delta_closed_form_and_errors() -> None:
    from dppca_dask.methods.adaptive_power.calibration import pass_delta_for, svt_step_delta

    # (1 + e^ε)·δ_pass/K
    assert svt_step_delta(0.5, 1e-9, 4) == pytest.approx((1 + math.exp(0.5)) * 1e-9 / 4, rel=1e-15)
    assert svt_step_delta(0.5, 0.0, 4) == 0.0
    assert svt_step_delta(800.0, 1e-9, 4) == 1.0  # no meaningful δ for such an ε
    assert svt_step_delta(5.0, 0.5, 1) == 1.0  # capped at 1
    # pass_delta_for inverts the K-fold sum: K·svt_step_delta(ε, pass_delta_for(F, ε), K) = F
    assert 7 * svt_step_delta(0.2, pass_delta_for(1e-8, 0.2), 7) == pytest.approx(1e-8, rel=1e-14)
    with pytest.raises(InvalidParameterError, match="epsilon_svt must be finite and > 0; got 0.0"):
        svt_step_delta(0.0, 1e-9, 1)
    with pytest.raises(InvalidParameterError, match=r"pass_delta must be in \[0, 1\); got 1.0"):
        svt_step_delta(0.1, 1.0, 1)
    with pytest.raises(InvalidParameterError, match="n_releases must be an integer >= 1; got 0"):
        svt_step_delta(0.1, 1e-9, 0)
    with pytest.raises(InvalidParameterError, match=r"epsilon_svt must be in \(0, 700\]; got 701"):
        pass_delta_for(1e-8, 701)
