"""AboveThreshold: the decision logic with injected noise, the sampling wrapper, the event, and an empirical
privacy smoke test (Clopper–Pearson at alpha = 1e-6 per bound)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy import stats

from dppca_dask.accounting import EpsilonDeltaDpEvent
from dppca_dask.errors import InvalidParameterError, ReleaseError, NotPrivateWarning
from dppca_dask.mechanisms import (
    NoiseSource,
    SvtResult,
    above_threshold,
    svt_cutoff,
    svt_event,
    svt_first_below,
    svt_replace_one_epsilon,
    svt_scales,
)
from dppca_dask.mechanisms.noise import Shape
from dppca_dask.mechanisms.testing import ScriptedNoiseSource, ZeroNoiseSource

ALPHA = 1e-6

# -- the decision, with injected noise ----------------------------------------------------------------------


def test_first_below_is_the_first_index_at_or_under_the_noisy_cutoff() -> None:
    counts = [40, 25, 12, 6, 2, 0]  # filtered rows, non-increasing in search order
    assert svt_first_below(counts, cutoff=10, threshold_noise=0.0, query_noise=np.zeros(6)) == 3
    # ρ raises the bar: 12 + 0 ≤ 10 + 3
    assert svt_first_below(counts, cutoff=10, threshold_noise=3.0, query_noise=np.zeros(6)) == 2
    # a query's own noise decides it: 25 − 20 ≤ 10, earlier than the noiseless answer
    assert svt_first_below(counts, cutoff=10, threshold_noise=0.0, query_noise=[0, -20, 0, 0, 0, 0]) == 1
    # positive noise pushes the answer later
    assert svt_first_below(counts, cutoff=10, threshold_noise=0.0, query_noise=[0, 0, 0, 5, 0, 0]) == 4


def test_none_below_returns_none() -> None:
    assert svt_first_below([50, 40, 30], cutoff=10, threshold_noise=-1.0, query_noise=[0, 0, 0]) is None
    assert svt_first_below([5, 4], cutoff=10, threshold_noise=-20.0, query_noise=[0, 0]) is None


def test_ties_count_as_below() -> None:
    # F_j + ν_j = c + ρ exactly (values representable in binary, so no rounding)
    assert svt_first_below([9.5, 8.0], cutoff=8.0, threshold_noise=0.5, query_noise=[0.5, 0.0]) == 1
    assert svt_first_below([9.5, 8.0], cutoff=8.0, threshold_noise=0.5, query_noise=[-1.0, 0.0]) == 0


def test_monotone_queries_without_noise_stop_at_the_first_crossing() -> None:
    counts = np.array([100, 80, 55, 31, 30, 29, 3, 0])
    for cutoff in range(0, 101, 7):
        expected = int(np.argmax(counts <= cutoff))
        got = svt_first_below(counts, cutoff=cutoff, threshold_noise=0.0, query_noise=np.zeros(8))
        assert got == expected


def test_noise_after_the_answer_does_not_matter() -> None:
    counts = [20, 10, 5, 1]
    for tail in ([0.0, 0.0], [-100.0, 100.0], [100.0, -100.0]):
        assert svt_first_below(counts, cutoff=10, threshold_noise=0.0, query_noise=[0.0, 0.0, *tail]) == 1


def test_first_below_validates_shapes() -> None:
    with pytest.raises(InvalidParameterError, match=r"same length; got shapes \(3,\) and \(2,\)"):
        svt_first_below([1, 2, 3], cutoff=1, threshold_noise=0, query_noise=[0, 0])
    with pytest.raises(InvalidParameterError, match="must be 1-D"):
        svt_first_below([[1, 2]], cutoff=1, threshold_noise=0, query_noise=[[0, 0]])


# -- the mechanism: draws, event, validation ----------------------------------------------------------------


def test_above_threshold_uses_rho_then_one_nu_per_query() -> None:
    source = ScriptedNoiseSource([2.0, [0.0, 0.0, -1.0, 0.0]])  # ρ, then ν_0..ν_3
    result = above_threshold([30, 20, 13, 5], cutoff=10, epsilon=0.5, noise=source, release="c0/t0/svt")
    assert result == SvtResult(index=2, event=EpsilonDeltaDpEvent(0.5))  # 13 − 1 ≤ 10 + 2
    assert source.remaining == 0
    assert source.released_keys == frozenset({"c0/t0/svt"})


def test_above_threshold_none_below() -> None:
    result = above_threshold([30, 20], cutoff=10, epsilon=1.0, noise=ZeroNoiseSource(), release="k")
    assert result.index is None and result.event == EpsilonDeltaDpEvent(1.0)


class _ScaleRecorder(ZeroNoiseSource):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[float, Shape]] = []

    def _laplace(self, scale: float, size: Shape) -> Any:
        self.calls.append((scale, size))
        return super()._laplace(scale, size)


def test_default_scales_are_the_monotone_form() -> None:
    source = _ScaleRecorder()
    above_threshold([3, 2, 1], cutoff=1, epsilon=0.25, noise=source, release="k")
    # Lyu–Su–Li 2017, monotonic queries, ε₁ = ε₂ = ε/2: ρ ~ Lap(1/ε₁) = Lap(2/ε), ν ~ Lap(1/ε₂) = Lap(2/ε)
    assert source.calls == [(2 / 0.25, None), (2 / 0.25, 3)]


def test_general_form_keeps_the_papers_scales() -> None:
    source = _ScaleRecorder()
    result = above_threshold([3, 2, 1], cutoff=1, epsilon=0.25, noise=source, release="k", form="general")
    assert source.calls == [(2 / 0.25, None), (4 / 0.25, 3)]  # Lap(2/ε) once, Lap(4/ε) per query
    assert result.event == EpsilonDeltaDpEvent(0.25)
    with pytest.raises(InvalidParameterError, match="form must be one of monotone, general; got 'paper'"):
        svt_scales(1.0, form="paper")


def test_svt_epsilon_matches_the_scales_exactly() -> None:
    # add/remove (monotonic): 1/b_ρ + 1/b_ν = ε/2 + ε/2 = ε for the default scales
    for eps in (0.01, 0.3, 1.0, 7.5):
        b_rho, b_nu = svt_scales(eps)
        assert 1 / b_rho + 1 / b_nu == pytest.approx(eps, rel=1e-15)
        # general form: 1/b_ρ + 2/b_ν = ε/2 + 2ε/4 = ε
        g_rho, g_nu = svt_scales(eps, form="general")
        assert 1 / g_rho + 2 / g_nu == pytest.approx(eps, rel=1e-15)
        # replace one row (not monotonic): 1/b_ρ + 2/b_ν = ε/2 + ε = 1.5ε; the paper's scales keep ε (not 2ε)
        assert svt_replace_one_epsilon(b_rho, b_nu) == pytest.approx(1.5 * eps, rel=1e-15)
        assert svt_replace_one_epsilon(g_rho, g_nu) == pytest.approx(eps, rel=1e-15)
    with pytest.raises(InvalidParameterError, match="query_scale must be finite and > 0"):
        svt_replace_one_epsilon(1.0, 0.0)
    # explicit scales in the monotone form are checked with weight 1 on the query noise
    assert svt_scales(1.0, threshold_scale=2.0, query_scale=2.0) == (2.0, 2.0)
    with pytest.raises(InvalidParameterError, match=r"1/threshold_scale \+ 1/query_scale = 1\.5 > epsilon=1"):
        svt_scales(1.0, threshold_scale=1.0, query_scale=2.0)


def test_explicit_scales_are_used_and_checked() -> None:
    source = _ScaleRecorder()
    result = above_threshold(
        [3, 2, 1], cutoff=1, epsilon=1.0, noise=source, release="k", threshold_scale=4.0, query_scale=4.0
    )
    assert source.calls == [(4.0, None), (4.0, 3)]
    assert result.event == EpsilonDeltaDpEvent(1.0)  # spends 1/4 + 2/4 ≤ 1; the event states the upper bound 1
    with pytest.raises(InvalidParameterError, match=r"spend 1/threshold_scale \+ 2/query_scale = 1\.5 > epsilon=1"):
        svt_scales(1.0, form="general", threshold_scale=1.0, query_scale=4.0)
    with pytest.raises(InvalidParameterError, match="threshold_scale must be finite and > 0"):
        svt_scales(1.0, threshold_scale=0.0)
    with pytest.raises(InvalidParameterError, match="query_scale must be finite and > 0"):
        svt_event(1.0, query_scale=-1.0)


def test_svt_scales_defaults_and_event() -> None:
    assert svt_scales(0.5) == (4.0, 4.0)
    assert svt_scales(0.5, form="general") == (4.0, 8.0)
    assert svt_event(0.05) == EpsilonDeltaDpEvent(0.05, 0.0)
    with pytest.raises(InvalidParameterError, match="epsilon must be finite and > 0"):
        svt_event(0.0)


def test_svt_cutoff_formula() -> None:
    # Algorithm 1, line 4: c = 6·ln(1/β)/ε; β = 0.05, ε = 0.05 gives 6·ln(20)/0.05 = 359.4869...
    assert svt_cutoff(0.05, 0.05) == pytest.approx(6 * math.log(20) / 0.05, rel=1e-15)
    assert svt_cutoff(1.0, math.exp(-1)) == pytest.approx(6.0, rel=1e-15)
    with pytest.raises(InvalidParameterError, match=r"beta must be in \(0, 1\)"):
        svt_cutoff(1.0, 1.0)
    with pytest.raises(InvalidParameterError, match="epsilon must be finite and > 0"):
        svt_cutoff(-1.0, 0.05)


@pytest.mark.parametrize(
    ("counts", "kwargs", "message"),
    [
        ([], {}, "counts must be a non-empty 1-D array"),
        ([[1, 2]], {}, "counts must be a non-empty 1-D array"),
        ([1.0, np.nan], {}, "counts of release 'k' must be finite"),
        ([1, 2], {"cutoff": float("inf")}, "cutoff must be finite"),
        ([1, 2], {"epsilon": float("nan")}, "epsilon must be finite and > 0"),
    ],
)
def test_above_threshold_validation(counts: Any, kwargs: dict[str, Any], message: str) -> None:
    params: dict[str, Any] = {"cutoff": 1.0, "epsilon": 1.0} | kwargs
    source = ZeroNoiseSource()
    with pytest.raises(InvalidParameterError, match=message):
        above_threshold(counts, noise=source, release="k", **params)
    assert source.released_keys == frozenset()  # validation happens before the release


def test_above_threshold_release_key_is_single_use() -> None:
    source = ZeroNoiseSource()
    above_threshold([1], cutoff=1, epsilon=1, noise=source, release="component-0/iter-0/svt")
    with pytest.raises(ReleaseError, match="already drawn"):
        above_threshold([1], cutoff=1, epsilon=1, noise=source, release="component-0/iter-0/svt")


# -- empirical privacy smoke test ---------------------------------------------------------------------------


def _clopper_pearson(k: int, n: int, alpha: float) -> tuple[float, float]:
    lower = 0.0 if k == 0 else float(stats.beta.ppf(alpha, k, n - k + 1))
    upper = 1.0 if k == n else float(stats.beta.ppf(1 - alpha, k + 1, n - k))
    return lower, upper


def _hit_bounds(source: NoiseSource, data: np.ndarray, name: str, runs: int) -> tuple[int, float, float]:
    """How often the index is 2 (the event S, fixed before sampling), with Clopper–Pearson bounds."""
    k = sum(
        above_threshold(data, cutoff=10.0, epsilon=1.0, noise=source, release=f"{name}/{i}").index == 2
        for i in range(runs)
    )
    return (k, *_clopper_pearson(k, runs, ALPHA))


# Neighbours: one more row, filtered at the first three thresholds searched (F' = F + 1 there). Without noise,
# D answers index 2 (10 ≤ 10) and D' answers index 3 (11 > 10): a noiseless mechanism fails the check below.
COUNTS = np.array([14.0, 11.0, 10.0, 4.0, 1.0])
NEIGHBOUR = COUNTS + np.array([1.0, 1.0, 1.0, 0.0, 0.0])


def test_empirical_privacy_of_above_threshold(seed: int) -> None:
    """``lower(P[M(D) ∈ S]) ≤ e^ε·upper(P[M(D') ∈ S])`` in both directions, ε = 1.

    One-sided Clopper–Pearson bounds at alpha = 1e-6 each: false-failure rate ≤ 4e-6 for the test.
    """
    runs = 4000
    with pytest.warns(NotPrivateWarning):
        source = NoiseSource.from_seed(seed)
    k_d, lo_d, up_d = _hit_bounds(source, COUNTS, "D", runs)
    k_n, lo_n, up_n = _hit_bounds(source, NEIGHBOUR, "D'", runs)
    assert lo_d <= math.e * up_n
    assert lo_n <= math.e * up_d
    assert 0 < k_d < runs and 0 < k_n < runs  # the event is neither impossible nor certain


def test_empirical_privacy_check_rejects_a_noiseless_mechanism() -> None:
    """The check above has power: without noise P[M(D) ∈ S] = 1 and P[M(D') ∈ S] = 0, and it fails."""
    runs = 200
    _, lo_d, _ = _hit_bounds(ZeroNoiseSource(), COUNTS, "D", runs)
    _, _, up_n = _hit_bounds(ZeroNoiseSource(), NEIGHBOUR, "D'", runs)
    assert lo_d > math.e * up_n
