"""Neighbouring values under hardened noise: rounding to the lattice can add one lattice step per coordinate to
the movement between neighbours, and the mechanisms hand the audit hook a sensitivity that covers it.

The values are built so that rounding pushes the neighbours apart as far as it can (one value just below a half
step rounds down, its neighbour just above rounds up), and the harness is run with no slack: the exact movement
of the rounded values exceeds the caller's sensitivity and stays within the inflated one.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from privacy_harness import assert_within_sensitivity

from dppca_dask.mechanisms import NoiseSource, gaussian_mechanism, laplace_mechanism
from dppca_dask.mechanisms.hardened import inflated_sensitivity, lattice_exponent
from dppca_dask.mechanisms.testing import AuditingNoiseSource


class HardenedAuditingSource(AuditingNoiseSource):
    """Records each release like :class:`AuditingNoiseSource`, drawing hardened noise (not private)."""

    def __init__(self, seed: int) -> None:
        NoiseSource.__init__(self, np.random.default_rng(seed), private=False, description="hardened audit (test)",
                             sampler="hardened")
        self.records = []


def _worst_case_pair(n: int, k: int, whole_steps: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    step = math.ldexp(1.0, k)
    points = rng.integers(-1000, 1000, n).astype(np.float64)
    below = (points + 0.5) * step - step / 8  # rounds down by 3/8 of a step
    above = below + (whole_steps + 0.25) * step  # = (points + whole_steps + 0.5)·step + step/8: rounds up
    return below, above


@pytest.mark.parametrize("mechanism", ["gaussian", "laplace"])
def test_rounding_moves_neighbours_beyond_the_sensitivity_but_within_the_inflated_one(
    mechanism: str, seed: int, rng: np.random.Generator
) -> None:
    n = 16
    if mechanism == "gaussian":
        multiplier = 2.0
        # choose Δ so that the release's lattice is 2^k with Δ ≈ (whole_steps + 0.25)·step·√n
        k = -30
        whole_steps = 3 * 2**36  # m·Δ ≈ 1536: lattice 2^(10 - 40)
        sensitivity = (whole_steps + 0.25) * math.ldexp(1.0, k) * math.sqrt(n)
        assert lattice_exponent(multiplier * sensitivity) == k
        norm = "l2"
    else:
        epsilon = 0.5
        k = -30
        whole_steps = 3 * 2**34  # Δ/ε ≈ 1536: lattice 2^(10 - 40)
        sensitivity = (whole_steps + 0.25) * math.ldexp(1.0, k) * n
        assert lattice_exponent(sensitivity / epsilon) == k
        norm = "l1"
    x, x_prime = _worst_case_pair(n, k, whole_steps, rng)
    a, b = HardenedAuditingSource(seed), HardenedAuditingSource(seed)
    for source, value in ((a, x), (b, x_prime)):
        if mechanism == "gaussian":
            gaussian_mechanism(value, l2_sensitivity=sensitivity, noise_multiplier=multiplier, noise=source,
                               release="r")
        else:
            laplace_mechanism(value, l1_sensitivity=sensitivity, epsilon=epsilon, noise=source, release="r")
    (ratio,) = assert_within_sensitivity(a.records, b.records, slack=0.0)
    inflated = inflated_sensitivity(sensitivity, k, n, norm=norm)
    assert a.records[0].sensitivity == inflated
    moved = ratio * inflated
    assert moved > sensitivity  # rounding added movement the caller's sensitivity does not cover ...
    assert moved <= inflated  # ... and the inflation does: here one full step per coordinate less 1/4
