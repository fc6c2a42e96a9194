"""NoiseSource: construction, the one-draw-per-release rule, the test sources, and the samplers' scale.

Statistical assertions use exact sufficient statistics at a false-failure rate of alpha = 1e-6 each (two-sided,
alpha/2 per tail): for z_i ~ N(0, s²), Σ z_i²/s² ~ χ²(n); for z_i ~ Lap(b), Σ |z_i| ~ Gamma(n, scale=b).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from dppca_dask.errors import DppcaError, InvalidParameterError, ReleaseError, NotPrivateWarning
from dppca_dask.mechanisms import NoiseSource
from dppca_dask.mechanisms.testing import ScriptedNoiseSource, ZeroNoiseSource

ALPHA = 1e-6
N_DRAWS = 20_000


def _seeded(seed: int) -> NoiseSource:
    with pytest.warns(NotPrivateWarning, match="NOT differentially private"):
        return NoiseSource.from_seed(seed)


def _two_sided_ok(dist: stats.rv_continuous, statistic: float) -> bool:
    return bool(dist.cdf(statistic) > ALPHA / 2 and dist.sf(statistic) > ALPHA / 2)


# -- construction -------------------------------------------------------------------------------------------


def test_from_seed_warns_is_not_private_and_is_reproducible(seed: int) -> None:
    a, b = _seeded(seed), _seeded(seed)
    assert a.private is False and b.private is False
    with a.release("k"):
        x = a.gaussian(1.0, size=5)
    with b.release("k"):
        y = b.gaussian(1.0, size=5)
    np.testing.assert_array_equal(x, y)
    assert a.description == f"seed={seed}"


def test_different_seeds_give_different_noise(seed: int) -> None:
    a, b = _seeded(seed), _seeded(seed + 1)
    with a.release("k"):
        x = a.laplace(1.0, size=8)
    with b.release("k"):
        y = b.laplace(1.0, size=8)
    assert not np.array_equal(x, y)


def test_from_entropy_is_private_and_two_sources_differ() -> None:
    # Unseeded by design (it tests the OS seeding); fails only if two 256-bit seeds collide (probability 2^-256).
    a, b = NoiseSource.from_entropy(), NoiseSource.from_entropy()
    assert a.private and b.private
    with a.release("k"):
        x = a.gaussian(1.0, size=4)
    with b.release("k"):
        y = b.gaussian(1.0, size=4)
    assert not np.array_equal(x, y)
    assert "seed" not in repr(a) and a.description == "os-entropy"


def test_from_entropy_uses_pcg64dxsm() -> None:
    source = NoiseSource.from_entropy()
    assert isinstance(source._rng.bit_generator, np.random.PCG64DXSM)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3", None])
def test_from_seed_rejects_bad_seeds(bad: object) -> None:
    with pytest.raises(InvalidParameterError, match="seed must be an integer >= 0"):
        NoiseSource.from_seed(bad)  # type: ignore[arg-type]


def test_constructor_rejects_non_generators() -> None:
    with pytest.raises(InvalidParameterError, match="generator must be a numpy.random.Generator"):
        NoiseSource(np.random.RandomState(0), private=False)  # type: ignore[arg-type]


@pytest.mark.parametrize("how", ["pickle", "copy", "deepcopy"])
def test_sources_cannot_be_copied(seed: int, how: str) -> None:
    import copy
    import pickle

    source = _seeded(seed)
    duplicate = {"pickle": pickle.dumps, "copy": copy.copy, "deepcopy": copy.deepcopy}[how]
    with pytest.raises(ReleaseError, match="cannot be copied or pickled"):
        duplicate(source)


# -- releases ---------------------------------------------------------------------------------------------


def test_duplicate_release_key_raises_before_drawing(seed: int) -> None:
    source = _seeded(seed)
    with source.release("component-0/iter-3/svt"):
        source.laplace(1.0)
    state = source._rng.bit_generator.state
    with pytest.raises(ReleaseError, match="already drawn from this noise source") as info:
        with source.release("component-0/iter-3/svt"):
            source.laplace(1.0)  # pragma: no cover - never reached
    assert isinstance(info.value, DppcaError)
    assert source._rng.bit_generator.state == state  # nothing was drawn
    assert source.released_keys == frozenset({"component-0/iter-3/svt"})
    assert source.current_release is None


def test_key_is_consumed_even_when_the_release_fails(seed: int) -> None:
    source = _seeded(seed)
    with pytest.raises(RuntimeError, match="boom"):
        with source.release("k"):
            source.gaussian(1.0)
            raise RuntimeError("boom")
    assert source.current_release is None
    with pytest.raises(ReleaseError, match="already drawn"):
        source.begin_release("k")


def test_nested_releases_raise(seed: int) -> None:
    source = _seeded(seed)
    with source.release("outer"):
        with pytest.raises(ReleaseError, match="inside the open release 'outer'"):
            source.begin_release("inner")
    assert "inner" not in source.released_keys


def test_drawing_outside_a_release_raises(seed: int) -> None:
    source = _seeded(seed)
    with pytest.raises(ReleaseError, match="Gaussian noise can be drawn only inside a release"):
        source.gaussian(1.0)
    with pytest.raises(ReleaseError, match="Laplace noise can be drawn only inside a release"):
        source.laplace(1.0)


def test_end_release_without_begin_raises(seed: int) -> None:
    with pytest.raises(ReleaseError, match="no open release"):
        _seeded(seed).end_release()


@pytest.mark.parametrize("key", ["", 3, None])
def test_release_keys_must_be_non_empty_strings(seed: int, key: object) -> None:
    source = _seeded(seed)
    with pytest.raises(InvalidParameterError, match="release key must be a non-empty string"):
        source.begin_release(key)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameterError, match="release key must be a non-empty string"):
        source.mark_released([key])  # type: ignore[list-item]


def test_mark_released_blocks_keys_of_a_resumed_job(seed: int) -> None:
    source = _seeded(seed)
    source.mark_released(["component-0/iter-0/svt", "component-0/iter-0/gaussian"])
    with pytest.raises(ReleaseError, match="already drawn"):
        source.begin_release("component-0/iter-0/gaussian")
    with source.release("component-0/iter-1/svt"):
        pass
    assert len(source.released_keys) == 3


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_samplers_reject_bad_scales(seed: int, bad: float) -> None:
    source = _seeded(seed)
    with source.release("k"):
        with pytest.raises(InvalidParameterError, match="scale must be finite and > 0"):
            source.laplace(bad)
        with pytest.raises(InvalidParameterError, match="std must be finite and > 0"):
            source.gaussian(bad)


def test_samplers_return_float64_of_the_requested_shape(seed: int) -> None:
    source = _seeded(seed)
    with source.release("k"):
        one = source.gaussian(2.0)
        block = source.laplace(2.0, size=(3, 4))
    assert isinstance(one, float)
    assert block.shape == (3, 4) and block.dtype == np.float64


# -- noise scale (exact sufficient statistics, alpha = 1e-6 per assertion) -----------------------------------


@pytest.mark.parametrize("std", [0.37, 1.0, 25.0])
def test_gaussian_scale_chi_square(seed: int, std: float) -> None:
    source = _seeded(seed)
    with source.release("k"):
        z = source.gaussian(std, size=N_DRAWS)
    statistic = float(np.sum((z / std) ** 2))  # Σ z²/σ² ~ χ²(n)
    assert _two_sided_ok(stats.chi2(N_DRAWS), statistic)
    assert stats.kstest(z, stats.norm(scale=std).cdf).pvalue > ALPHA  # shape only


@pytest.mark.parametrize("scale", [0.2, 1.0, 40.0])
def test_laplace_scale_gamma(seed: int, scale: float) -> None:
    source = _seeded(seed)
    with source.release("k"):
        z = source.laplace(scale, size=N_DRAWS)
    statistic = float(np.sum(np.abs(z)))  # Σ |z| ~ Gamma(n, scale=b)
    assert _two_sided_ok(stats.gamma(N_DRAWS, scale=scale), statistic)
    assert stats.kstest(z, stats.laplace(scale=scale).cdf).pvalue > ALPHA  # shape only


def test_scale_test_detects_a_wrong_scale(seed: int) -> None:
    """The statistics above have power: noise 10% too small is rejected.

    With n = 20000 the rejection bound sits 4.9 standard deviations below the mean; noise at 0.9 of the scale
    moves the statistic 10 (Laplace) and 17 (Gaussian) of its standard deviations beyond it, so this test fails
    with probability below 1e-20.
    """
    source = _seeded(seed)
    with source.release("k"):
        z = source.gaussian(0.9, size=N_DRAWS)
        w = source.laplace(0.9, size=N_DRAWS)
    assert not _two_sided_ok(stats.chi2(N_DRAWS), float(np.sum(z**2)))
    assert not _two_sided_ok(stats.gamma(N_DRAWS, scale=1.0), float(np.sum(np.abs(w))))


# -- test sources -------------------------------------------------------------------------------------------


def test_zero_noise_source_draws_zeros_and_keeps_the_rules() -> None:
    source = ZeroNoiseSource()
    assert source.private is False
    with source.release("a"):
        assert source.gaussian(3.0) == 0.0
        np.testing.assert_array_equal(source.laplace(3.0, size=(2, 3)), np.zeros((2, 3)))
    with pytest.raises(ReleaseError, match="already drawn"):
        source.begin_release("a")
    with pytest.raises(ReleaseError, match="only inside a release"):
        source.gaussian(1.0)


def test_scripted_source_returns_values_in_order() -> None:
    source = ScriptedNoiseSource([0.5, [1.0, -2.0], [[3.0]]])
    assert source.private is False and source.remaining == 3
    with source.release("a"):
        assert source.laplace(7.0) == 0.5
        np.testing.assert_array_equal(source.gaussian(1.0, size=2), [1.0, -2.0])
        np.testing.assert_array_equal(source.laplace(1.0, size=(1, 1)), [[3.0]])
    assert source.remaining == 0


def test_scripted_source_errors() -> None:
    source = ScriptedNoiseSource([[1.0, 2.0]])
    with source.release("a"):
        with pytest.raises(ReleaseError, match=r"shape \(2,\) does not match the draw of shape \(3,\)"):
            source.gaussian(1.0, size=3)
        with pytest.raises(ReleaseError, match="no values left"):
            source.gaussian(1.0, size=2)
