"""Gaussian and Laplace mechanisms: noise scale, events, shapes, validation.

Statistical assertions: alpha = 1e-6 each, two-sided, on exact sufficient statistics (Σz²/σ² ~ χ²(n) for
Gaussian noise, Σ|z| ~ Gamma(n, scale=b) for Laplace noise), with the mechanism applied to an all-zero value so
that the release is pure noise.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from dp_accounting import GaussianDpEvent, LaplaceDpEvent
from scipy import stats

from dppca_dask.errors import InvalidInputError, InvalidParameterError, ReleaseError, NotPrivateWarning
from dppca_dask.mechanisms import NoiseSource, gaussian_mechanism, laplace_mechanism
from dppca_dask.mechanisms.noise import Shape
from dppca_dask.mechanisms.testing import ScriptedNoiseSource, ZeroNoiseSource

ALPHA = 1e-6
N = 20_000


class RecordingSource(ZeroNoiseSource):
    """Zero noise, remembering the scale of every draw."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, float, Shape]] = []

    def _laplace(self, scale: float, size: Shape) -> Any:
        self.calls.append(("laplace", scale, size))
        return super()._laplace(scale, size)

    def _gaussian(self, std: float, size: Shape) -> Any:
        self.calls.append(("gaussian", std, size))
        return super()._gaussian(std, size)


def _seeded(seed: int) -> NoiseSource:
    with pytest.warns(NotPrivateWarning):
        return NoiseSource.from_seed(seed)


def test_gaussian_std_is_multiplier_times_sensitivity() -> None:
    source = RecordingSource()
    noisy, event = gaussian_mechanism(
        np.ones(4), l2_sensitivity=0.25, noise_multiplier=15.26, noise=source, release="g"
    )
    assert source.calls == [("gaussian", 15.26 * 0.25, (4,))]
    assert event == GaussianDpEvent(15.26)
    np.testing.assert_array_equal(noisy, np.ones(4))


def test_laplace_scale_is_sensitivity_over_epsilon() -> None:
    source = RecordingSource()
    noisy, event = laplace_mechanism(3, l1_sensitivity=2.0, epsilon=0.5, noise=source, release="l")
    assert source.calls == [("laplace", 4.0, None)]  # b = l1_sensitivity / epsilon
    assert event == LaplaceDpEvent(2.0)  # noise_multiplier = b / l1_sensitivity = 1/epsilon
    assert isinstance(noisy, np.float64) and noisy == 3.0


def test_gaussian_noise_scale_on_zeros(seed: int) -> None:
    sensitivity, multiplier = 0.3, 7.0
    noisy, _ = gaussian_mechanism(
        np.zeros(N), l2_sensitivity=sensitivity, noise_multiplier=multiplier, noise=_seeded(seed), release="g"
    )
    sigma = sensitivity * multiplier
    statistic = float(np.sum((noisy / sigma) ** 2))  # ~ χ²(N)
    assert stats.chi2(N).cdf(statistic) > ALPHA / 2 and stats.chi2(N).sf(statistic) > ALPHA / 2


def test_laplace_noise_scale_on_zeros(seed: int) -> None:
    sensitivity, epsilon = 2.0, 0.8
    noisy, _ = laplace_mechanism(
        np.zeros((100, N // 100)), l1_sensitivity=sensitivity, epsilon=epsilon, noise=_seeded(seed), release="l"
    )
    dist = stats.gamma(N, scale=sensitivity / epsilon)  # Σ|z| ~ Gamma(N, b)
    statistic = float(np.sum(np.abs(noisy)))
    assert dist.cdf(statistic) > ALPHA / 2 and dist.sf(statistic) > ALPHA / 2


@pytest.mark.parametrize("value", [1.5, 7, np.float32(2.5), np.array(4.0)])
def test_scalars_give_float64_scalars(value: Any) -> None:
    noisy, _ = gaussian_mechanism(value, l2_sensitivity=1, noise_multiplier=1, noise=ZeroNoiseSource(), release="s")
    assert isinstance(noisy, np.float64) and noisy == float(value)


def test_arrays_give_new_float64_arrays_and_inputs_are_untouched() -> None:
    value = np.arange(6, dtype=np.int32).reshape(2, 3)
    source = ScriptedNoiseSource([np.full((2, 3), 0.5)])
    noisy, _ = gaussian_mechanism(value, l2_sensitivity=1, noise_multiplier=1, noise=source, release="a")
    assert noisy.dtype == np.float64 and noisy.shape == (2, 3)
    np.testing.assert_array_equal(noisy, value + 0.5)
    np.testing.assert_array_equal(value, np.arange(6).reshape(2, 3))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"l2_sensitivity": 0.0}, "l2_sensitivity must be finite and > 0"),
        ({"l2_sensitivity": float("inf")}, "l2_sensitivity must be finite and > 0"),
        ({"noise_multiplier": -1.0}, "noise_multiplier must be finite and > 0"),
        ({"noise_multiplier": "x"}, "noise_multiplier must be a finite number > 0"),
    ],
)
def test_gaussian_validation(kwargs: dict[str, Any], message: str) -> None:
    params = {"l2_sensitivity": 1.0, "noise_multiplier": 1.0} | kwargs
    with pytest.raises(InvalidParameterError, match=message):
        gaussian_mechanism(1.0, noise=ZeroNoiseSource(), release="g", **params)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"l1_sensitivity": -2.0}, "l1_sensitivity must be finite and > 0"),
        ({"epsilon": 0.0}, "epsilon must be finite and > 0"),
    ],
)
def test_laplace_validation(kwargs: dict[str, Any], message: str) -> None:
    params = {"l1_sensitivity": 1.0, "epsilon": 1.0} | kwargs
    with pytest.raises(InvalidParameterError, match=message):
        laplace_mechanism(1.0, noise=ZeroNoiseSource(), release="l", **params)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_values_raise_without_consuming_the_key(bad: float) -> None:
    source = ZeroNoiseSource()
    with pytest.raises(InvalidInputError, match=r"release 'g' \(shape \(2,\)\) has NaN or infinite entries"):
        gaussian_mechanism([1.0, bad], l2_sensitivity=1, noise_multiplier=1, noise=source, release="g")
    with pytest.raises(InvalidInputError, match="has NaN or infinite entries"):
        laplace_mechanism([bad], l1_sensitivity=1, epsilon=1, noise=source, release="l")
    assert source.released_keys == frozenset()


def test_the_same_release_cannot_be_drawn_twice() -> None:
    source = ZeroNoiseSource()
    gaussian_mechanism(1.0, l2_sensitivity=1, noise_multiplier=1, noise=source, release="component-0/iter-0/gaussian")
    with pytest.raises(ReleaseError, match="already drawn"):
        gaussian_mechanism(
            1.0, l2_sensitivity=1, noise_multiplier=1, noise=source, release="component-0/iter-0/gaussian"
        )
    laplace_mechanism(1.0, l1_sensitivity=1, epsilon=1, noise=source, release="count")
    with pytest.raises(ReleaseError, match="already drawn"):
        laplace_mechanism(1.0, l1_sensitivity=1, epsilon=1, noise=source, release="count")
