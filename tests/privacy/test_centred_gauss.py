"""Neighbouring datasets for centred Analyze Gauss at a fixed centre μ: the upper triangle of the centred Gram
matrix moves by at most (c + ‖μ‖)², attained (up to the diagonal's weight) by a maximal row ``a' = −c·μ/‖μ‖``
whose centred norm is exactly ``c + ‖μ‖``; a huge row is clipped first. Deterministic."""

from __future__ import annotations

import numpy as np
import pytest

from dppca_dask.methods.analyze_gauss.centred import centred_gauss_run
from dppca_dask.coordinator import LocalExecutor, as_source, run_algorithm
from dppca_dask.mechanisms.testing import AuditingNoiseSource
from privacy_harness import assert_within_sensitivity

D = 15


@pytest.mark.parametrize("kind", ["maximal", "huge", "zero"])
def test_centred_gram_moves_within_the_sensitivity(seed: int, kind: str) -> None:
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((400, D)) * 0.2 + 0.1
    mu = rng.standard_normal(D)
    mu *= 0.3 / np.linalg.norm(mu)
    extra = {"maximal": -mu / 0.3, "huge": 1e8 * rng.standard_normal(D), "zero": np.zeros(D)}[kind]
    records = []
    for matrix in (rows, np.vstack([rows, extra])):
        noise = AuditingNoiseSource(seed)
        run_algorithm(LocalExecutor(as_source(matrix)), centred_gauss_run(
            n_cols=D, n_components=2, row_norm_bound=1.0, noise_multiplier=2.0, noise=noise, center=mu,
            variance_multiplier=3.0))
        records.append(noise.records)
    gram, variance = assert_within_sensitivity(*records)
    assert records[0][0].sensitivity == pytest.approx(1.3**2, rel=1e-15)
    if kind == "maximal":  # ‖upper(ããᵀ)‖ = sqrt((‖ã‖⁴ + Σã_i⁴)/2) ≥ ‖ã‖²/√2
        assert gram > 1 / np.sqrt(2) * 0.999
    if kind == "zero":  # a zero row is not zero once centred: ã = −μ
        assert 0 < gram < (0.3 / 1.3) ** 2 + 1e-12
