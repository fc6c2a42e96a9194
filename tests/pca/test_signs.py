"""The sign convention: each released component's largest-magnitude coordinate is positive (scikit-learn's
``svd_flip`` on V), so that two runs, and a run and scikit-learn, are comparable coordinate by coordinate."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils.extmath import svd_flip

from dppca_dask import load_result, pca
from dppca_dask.signs import flip_signs


def test_flip_signs_matches_scikit_learn_svd_flip(rng: np.random.Generator) -> None:
    v = rng.standard_normal((6, 30))
    u = rng.standard_normal((50, 6))
    _u, expected = svd_flip(u, v.copy(), u_based_decision=False)
    np.testing.assert_array_equal(flip_signs(v), expected)
    np.testing.assert_array_equal(flip_signs(v[0]), expected[0])  # one vector
    np.testing.assert_array_equal(flip_signs(flip_signs(v)), flip_signs(v))  # idempotent
    np.testing.assert_array_equal(flip_signs(-v), flip_signs(v))
    assert flip_signs(np.zeros((0, 4))).shape == (0, 4)


@pytest.mark.parametrize("mechanism", ["adaptive-power", "analyze-gauss", "exact"])
def test_signs_are_stable_across_runs_with_different_noise(rng: np.random.Generator, mechanism, tmp_path) -> None:
    # a clear top direction whose largest coordinate is well separated: different noise, same signs
    direction = np.zeros(20)
    direction[:4] = [0.8, 0.5, 0.3, 0.1]
    direction /= np.linalg.norm(direction)
    rows = rng.standard_normal((4_000, 1)) * direction + 0.02 * rng.standard_normal((4_000, 20))
    rows /= np.maximum(1.0, np.linalg.norm(rows, axis=1))[:, None]
    runs = [{"epsilon": 0.0, "delta": 0.0}] * 2 if mechanism == "exact" else [
        {"epsilon": 50.0, "delta": 1e-6, "seed": s} for s in (1, 2)]
    results = [pca(rows, client="local", progress=False, mechanism=mechanism, **kw) for kw in runs]
    for r in results:
        top = r.components[0]
        assert top[np.argmax(np.abs(top))] > 0
        assert top @ direction > 0.99  # same sign as the reference, not merely the same line
    assert results[0].components[0] @ results[1].components[0] > 0.98
    results[0].save(tmp_path / "r")
    np.testing.assert_array_equal(load_result(tmp_path / "r").components, results[0].components)
