"""The harness itself: it sees every mechanism's exact value, and it fails on a release that moves too far."""

from __future__ import annotations

import numpy as np
import pytest

from dppca_dask.mechanisms import above_threshold, gaussian_mechanism, laplace_mechanism
from dppca_dask.mechanisms.testing import AuditingNoiseSource
from privacy_harness import assert_within_sensitivity


def _release_all(noise: AuditingNoiseSource, value: np.ndarray, counts: np.ndarray) -> None:
    gaussian_mechanism(value, l2_sensitivity=1.0, noise_multiplier=2.0, noise=noise, release="g")
    laplace_mechanism(value, l1_sensitivity=1.0, epsilon=0.5, noise=noise, release="l")
    above_threshold(counts, cutoff=3.0, epsilon=1.0, noise=noise, release="s")


def test_records_exact_values_and_calibration(seed: int) -> None:
    noise = AuditingNoiseSource(seed)
    _release_all(noise, np.array([1.0, 2.0]), np.array([5.0, 3.0, 1.0]))
    kinds = [(r.release, r.kind) for r in noise.records]
    assert kinds == [("g", "gaussian"), ("l", "laplace"), ("s", "svt")]
    np.testing.assert_array_equal(noise.records[0].exact, [1.0, 2.0])
    assert noise.records[0].scale == 2.0  # std = multiplier × sensitivity
    assert noise.records[1].scale == 2.0  # b = sensitivity / ε
    assert noise.records[2].scale == (2.0, 2.0)  # monotone-query SVT scales 2/ε, 2/ε (Lyu–Su–Li 2017)
    assert not noise.private


def test_accepts_neighbours_within_sensitivity(seed: int) -> None:
    a, b = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    _release_all(a, np.array([1.0, 2.0]), np.array([5.0, 3.0, 1.0]))
    _release_all(b, np.array([1.5, 2.5]), np.array([4.0, 3.0, 2.0]))  # L2 0.71, L1 1.0, counts 1
    ratios = assert_within_sensitivity(a.records, b.records)
    np.testing.assert_allclose(ratios, [np.sqrt(0.5), 1.0, 1.0])


def test_rejects_a_laplace_release_moving_too_far(seed: int) -> None:
    a, b = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    _release_all(a, np.array([1.0, 2.0]), np.array([5.0, 3.0, 1.0]))
    _release_all(b, np.array([1.6, 2.8]), np.array([4.0, 3.0, 2.0]))  # L2 1.0, L1 1.4 > 1 for Laplace
    with pytest.raises(AssertionError, match="l: the exact laplace value moved"):
        assert_within_sensitivity(a.records, b.records)


def test_rejects_a_count_moving_by_two(seed: int) -> None:
    a, b = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    above_threshold(np.array([5.0, 3.0]), cutoff=3.0, epsilon=1.0, noise=a, release="s")
    above_threshold(np.array([5.0, 1.0]), cutoff=3.0, epsilon=1.0, noise=b, release="s")
    with pytest.raises(AssertionError, match="moved by 2.0"):
        assert_within_sensitivity(a.records, b.records)


def test_rejects_different_release_paths(seed: int) -> None:
    a, b = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    gaussian_mechanism(1.0, l2_sensitivity=1.0, noise_multiplier=1.0, noise=a, release="g")
    gaussian_mechanism(1.0, l2_sensitivity=1.0, noise_multiplier=1.0, noise=b, release="h")
    with pytest.raises(AssertionError, match="different releases"):
        assert_within_sensitivity(a.records, b.records)


def _gram_release(noise: AuditingNoiseSource, gram: np.ndarray, kind: str) -> None:
    from dppca_dask.mechanisms.wishart import jl_gram_mechanism, wishart_mechanism

    if kind == "wishart":
        wishart_mechanism(gram, row_norm_bound=1.0, epsilon=1.0, delta=1e-6, noise=noise, release="w")
    else:
        jl_gram_mechanism(gram, row_norm_bound=1.0, epsilon=1.0, delta=1e-6, sketch_rows=4, noise=noise,
                          release="w")


@pytest.mark.parametrize("kind", ["wishart", "jl"])
def test_matrix_kinds_are_measured_in_the_frobenius_norm(seed: int, kind: str) -> None:
    """A 20×20 Gram moved by 1 in every entry (Frobenius norm 20) against sensitivity 1 fails: the largest single
    entry, which the harness used to measure, moved by 1 only. One moved by a unit row's aaᵀ passes at ratio 1."""
    base = np.eye(20) * 10.0
    a, b = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    _gram_release(a, base, kind)
    _gram_release(b, base + 1.0, kind)
    with pytest.raises(AssertionError, match="moved by 20"):
        assert_within_sensitivity(a.records, b.records)
    row = np.zeros(20)
    row[:2] = [0.6, 0.8]
    c, d = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    _gram_release(c, base, kind)
    _gram_release(d, base + np.outer(row, row), kind)
    assert assert_within_sensitivity(c.records, d.records) == [pytest.approx(1.0)]


def test_an_unknown_kind_fails(seed: int) -> None:
    a, b = AuditingNoiseSource(seed), AuditingNoiseSource(seed)
    for noise in (a, b):
        with noise.release("x"):
            noise.audit(kind="mystery", exact=np.zeros(2), sensitivity=1.0, scale=1.0)
            noise.gaussian(1.0, size=2)
    with pytest.raises(AssertionError, match="unknown release kind 'mystery'"):
        assert_within_sensitivity(a.records, b.records)


def test_draws_are_recorded_with_their_scale_and_release(seed: int) -> None:
    noise = AuditingNoiseSource(seed)
    _release_all(noise, np.array([1.0, 2.0]), np.array([5.0, 3.0, 1.0]))
    assert [(d.release, d.sampler, d.scale, d.values.shape) for d in noise.draws] == [
        ("g", "gaussian", 2.0, (2,)), ("l", "laplace", 2.0, (2,)), ("s", "laplace", 2.0, ()),
        ("s", "laplace", 2.0, (3,))]
    assert [len(r.draws) for r in noise.records] == [1, 1, 2]


def test_lattice_draws_may_share_values_but_not_whole_draws(seed: int) -> None:
    """The hardened sampler draws on a lattice, where two releases' draws may share values by chance (not a reused
    draw): its draws are compared whole, and the same whole draw in two releases fails."""
    from test_hardened_neighbours import HardenedAuditingSource

    a, b = HardenedAuditingSource(seed), HardenedAuditingSource(seed)
    for noise in (a, b):
        for key in ("g1", "g2"):
            gaussian_mechanism(np.zeros(64), l2_sensitivity=1.0, noise_multiplier=1.0, noise=noise, release=key)
    assert all(d.discrete for d in a.draws)
    assert_within_sensitivity(a.records, b.records)
    a.records[1].draws[0] = a.records[0].draws[0].__class__("g2", "gaussian", a.records[0].draws[0].scale,
                                                           a.records[0].draws[0].values, True)
    with pytest.raises(AssertionError, match="shares a draw"):
        assert_within_sensitivity(a.records, b.records)
