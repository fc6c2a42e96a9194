"""The joint calibration of a run's releases: one common factor on every noise scale, found by the accountant, never
overshooting the total and spending it to within its precision; cached and re-checked like the other calibrations."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from dp_accounting.dp_event import GaussianDpEvent, SelfComposedDpEvent
from hypothesis import given, settings
from hypothesis import strategies as st

from dppca_dask.accounting import (
    EpsilonDeltaDpEvent,
    calibrate_gaussian,
    calibrate_noise_scale,
    clear_memory_cache,
    epsilon_for,
)
from dppca_dask.errors import CalibrationError, InvalidParameterError

#: The search's relative precision on the scale.
RTOL = 1e-4


def _parts(gaussians: list[tuple[float, int]], pure: list[tuple[float, int]], delta_each: float = 0.0):
    """events_at(s): Gaussians (multiplier·s, count) and pure (ε/s, count) events."""

    def events_at(scale: float) -> list:
        out: list = [SelfComposedDpEvent(GaussianDpEvent(m * scale), n) for m, n in gaussians]
        out += [SelfComposedDpEvent(EpsilonDeltaDpEvent(e / scale, delta_each), n) for e, n in pure]
        return out

    return events_at


@settings(max_examples=8, deadline=None, derandomize=True)
@given(
    epsilon=st.floats(0.3, 4.0),
    log10_delta=st.floats(-9.0, -4.0),
    multipliers=st.lists(st.tuples(st.floats(1.0, 60.0), st.integers(1, 10)), min_size=1, max_size=3),
    pure=st.lists(st.tuples(st.floats(0.002, 0.2), st.integers(1, 6)), max_size=2),
)
def test_the_joint_calibration_never_overshoots_and_spends_the_total(
    epsilon: float, log10_delta: float, multipliers: list[tuple[float, int]], pure: list[tuple[float, int]]
) -> None:
    delta = 10.0**log10_delta
    events_at = _parts(multipliers, pure)
    cal = calibrate_noise_scale(events_at, epsilon=epsilon, delta=delta, cache=False)
    assert cal.achieved_epsilon <= epsilon
    assert epsilon_for(events_at(cal.scale), delta=delta) == cal.achieved_epsilon <= epsilon
    # tight: a scale smaller by twice the precision overshoots, and the achieved figure is within 1% of the target
    assert epsilon_for(events_at(cal.scale / (1 + 2 * RTOL)), delta=delta) > epsilon
    assert cal.achieved_epsilon >= 0.99 * epsilon


def test_gaussian_parts_scale_to_the_one_gaussian_of_the_total() -> None:
    # Gaussians compose exactly into one of multiplier (Σ n/m²)^(-1/2): the scale is that of calibrate_gaussian
    events_at = _parts([(10.0, 1), (20.0, 4)], [])
    cal = calibrate_noise_scale(events_at, epsilon=1.0, delta=1e-6)
    merged = 1.0 / math.sqrt(1 / 10.0**2 + 4 / 20.0**2)
    assert cal.scale * merged == pytest.approx(calibrate_gaussian(epsilon=1.0, delta=1e-6), rel=2 * RTOL)
    assert cal.scale * merged >= calibrate_gaussian(epsilon=1.0, delta=1e-6) * (1 - 1e-9)


def test_a_scale_is_cached_and_a_damaged_entry_costs_time_not_privacy(isolated_cache: Path) -> None:
    events_at = _parts([(30.0, 5)], [(0.02, 5)], delta_each=1e-9)
    first = calibrate_noise_scale(events_at, epsilon=1.0, delta=1e-6)
    assert not first.from_cache and calibrate_noise_scale(events_at, epsilon=1.0, delta=1e-6) is first  # memo
    clear_memory_cache()
    again = calibrate_noise_scale(events_at, epsilon=1.0, delta=1e-6)
    assert again.from_cache and again.scale == first.scale and again.achieved_epsilon == first.achieved_epsilon
    # an entry edited to a scale that overshoots is re-checked, ignored and replaced by a fresh search
    path = isolated_cache / "calibration.json"
    data = json.loads(path.read_text())
    (key,) = [k for k in data["entries"] if '"noise_scale"' in k]
    data["entries"][key]["scale"] = first.scale / 2
    path.write_text(json.dumps(data))
    clear_memory_cache()
    fresh = calibrate_noise_scale(events_at, epsilon=1.0, delta=1e-6)
    assert not fresh.from_cache and fresh.scale == first.scale


def test_an_unreachable_target_and_bad_targets_are_refused() -> None:
    # the pure ε-DP part does not shrink with the scale here: no scale meets a target below it
    def events_at(scale: float) -> list:
        return [EpsilonDeltaDpEvent(2.0, 0.0), GaussianDpEvent(5.0 * scale)]

    with pytest.raises(CalibrationError, match="no common noise scale up to 1e\\+07 meets epsilon=1"):
        calibrate_noise_scale(events_at, epsilon=1.0, delta=1e-6, cache=False)
    with pytest.raises(InvalidParameterError, match="epsilon must be finite and > 0; got 0"):
        calibrate_noise_scale(events_at, epsilon=0.0, delta=1e-6)
    with pytest.raises(InvalidParameterError, match="delta must be in \\(0, 1\\); got 1"):
        calibrate_noise_scale(events_at, epsilon=1.0, delta=1.0)
    with pytest.raises(InvalidParameterError, match="accountant must be 'pld' or 'rdp'; got 'x'"):
        calibrate_noise_scale(events_at, epsilon=1.0, delta=1e-6, accountant="x")  # type: ignore[arg-type]
