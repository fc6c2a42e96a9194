"""float32 stores through a real LocalCluster: every pre-noise value equals the one computed from a float64 store of
the same values, and neighbours move each release by at most its sensitivity.

The privacy analysis assumes the released sums, scores and counts are computed accurately. A float32 store is read
as float64 (each value converted exactly) and every kernel accumulates in float64, so a float32 store releases the
same exact values as a float64 store holding the same numbers; the neighbour tests written for float64 stores then
cover float32 stores too. The equality is exact (same data, same seeded auditing noise, same reduction tree):
these checks are deterministic, with no false-failure rate.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

import dppca_dask
from dppca_dask.storage import write_matrix
from privacy_harness import assert_sensitivity, assert_within_sensitivity


def _rows(rng: np.random.Generator, n_rows: int = 240, n_cols: int = 8) -> np.ndarray:
    """float32-representable rows of norm < 1, about half the entries nonzero."""
    dense = rng.uniform(-0.3, 0.3, (n_rows, n_cols)) * (rng.random((n_rows, n_cols)) < 0.5)
    return dense.astype(np.float32).astype(np.float64)


@pytest.mark.parametrize("mechanism", ["analyze-gauss", "adaptive-power"])
def test_a_float32_store_releases_what_a_float64_store_of_the_same_values_does(
    tmp_path: Path, rng: np.random.Generator, auditing_pair, local_client, mechanism: str
) -> None:
    base = _rows(rng)
    extra = np.zeros((1, base.shape[1]))
    extra[0, [1, 5]] = [40.0, -3.5]  # far above the bound: clipped
    with_row = sp.csr_array(np.vstack([base, extra]))
    stores = {
        "f32": write_matrix(tmp_path / "a32.zarr", with_row, rows_per_partition=60, dtype=np.float32,
                            schema="declared"),
        "f64": write_matrix(tmp_path / "a64.zarr", with_row, rows_per_partition=60, dtype=np.float64,
                            schema="declared"),
        "neighbour": write_matrix(tmp_path / "n32.zarr", sp.csr_array(base), rows_per_partition=60,
                                  dtype=np.float32, schema="declared"),
    }
    assert stores["f32"].dtype == stores["neighbour"].dtype == "float32"
    a, b = auditing_pair()
    c, _ = auditing_pair()
    results = {}
    for name, noise in (("f32", a), ("neighbour", b), ("f64", c)):
        results[name] = dppca_dask.pca(stores[name].path, epsilon=1.0, delta=1e-6, mechanism=mechanism,
                                       row_norm_bound=1.0, client=local_client, noise=noise)
    assert a.records and [r.release for r in a.records] == [r.release for r in c.records]
    for got, want in zip(a.records, c.records):
        np.testing.assert_array_equal(got.exact, want.exact, err_msg=got.release)
        assert (got.kind, got.sensitivity) == (want.kind, want.sensitivity)
    ratios = assert_within_sensitivity(a.records, b.records)
    if mechanism == "analyze-gauss":
        # the Gram's upper triangle moves by aaᵀ of the clipped row: c² = 1 in the closed form, and the row, almost
        # along one coordinate, nearly attains it (√(a₁⁴ + a₅⁴ + a₁²a₅²) = 0.996)
        assert_sensitivity(a.records, 1.0)
        assert ratios == [pytest.approx(0.9962, abs=1e-4)]
    else:
        # each AboveThreshold count moves by exactly 1 (the worst case); each Gaussian step is given the threshold
        # its AboveThreshold step released (the row above it is filtered out: it moves nothing)
        thetas = np.ravel(results["f32"].thresholds)
        gaussian = [r for r in a.records if r.kind == "gaussian"]
        assert [r.sensitivity for r in gaussian] == [float(t) for t in thetas]
        assert [ratio for r, ratio in zip(a.records, ratios) if r.kind == "svt"] == [1.0] * len(thetas)
