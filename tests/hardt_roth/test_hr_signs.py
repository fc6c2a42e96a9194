"""The sign convention of factored low-rank releases: each row of ``right`` has its largest-magnitude entry
positive (scikit-learn's ``svd_flip`` on V) and the matching column of ``left`` carries the sign, so ``left @ right``
is unchanged and two runs are comparable factor by factor."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils.extmath import svd_flip

from dppca_dask.api import load_lowrank, lowrank
from dppca_dask.signs import flip_factor_signs


def test_flip_factor_signs_keeps_the_product_and_matches_svd_flip(rng: np.random.Generator) -> None:
    left, right = rng.standard_normal((40, 3)), rng.standard_normal((3, 12))
    flipped_left, flipped_right = flip_factor_signs(left, right)
    np.testing.assert_array_equal(flipped_left @ flipped_right, left @ right)  # negation is exact
    expected_left, expected_right = svd_flip(left.copy(), right.copy(), u_based_decision=False)
    np.testing.assert_array_equal(flipped_right, expected_right)
    np.testing.assert_array_equal(flipped_left, expected_left)
    again = flip_factor_signs(*flip_factor_signs(-left, -right))
    np.testing.assert_array_equal(again[1], flipped_right)  # idempotent, whatever the input's signs
    empty = flip_factor_signs(np.zeros((5, 0)), np.zeros((0, 4)))
    assert empty[0].shape == (5, 0) and empty[1].shape == (0, 4)


@pytest.mark.parametrize(("mechanism", "kwargs"), [("randomized-response", {}),
                                                  ("private-low-rank", {"oversampling": 0})])
def test_signs_are_stable_across_runs_with_different_noise(rng: np.random.Generator, tmp_path, mechanism: str,
                                                           kwargs: dict) -> None:
    # a clear rank-1 matrix whose largest coordinate is well separated: different noise, same signs
    direction = np.zeros(20)
    direction[:4] = [-0.8, 0.5, 0.3, 0.1]
    direction /= np.linalg.norm(direction)
    rows = np.abs(rng.standard_normal((3_000, 1))) * direction + 0.01 * rng.standard_normal((3_000, 20))
    rows /= np.maximum(1.0, np.linalg.norm(rows, axis=1))[:, None]
    results = [lowrank(rows, rank=1, epsilon=50.0, delta=1e-6, mechanism=mechanism, client="local", seed=s,
                       **kwargs) for s in (1, 2)]
    for r in results:
        top = r.right[0]
        assert top[np.argmax(np.abs(top))] > 0
        assert top @ -direction > 0.99 * np.linalg.norm(top)  # the largest entry of -direction is positive
        assert np.median(r.left[:, 0]) < 0  # the left factor carries the sign: B ≈ rows, not -rows
    assert results[0].right[0] @ results[1].right[0] > 0
    results[0].save(tmp_path / "r")
    np.testing.assert_array_equal(load_lowrank(tmp_path / "r").right, results[0].right)
