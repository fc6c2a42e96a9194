"""Clipping is visible: with a fixed ``row_norm_bound`` the run releases the fraction of rows the bound clips (a noisy
count over a noisy count, 2% of the budget, calibrated jointly with the other releases), puts it in the result
(``extras["clipped_fraction"]``, ``result.clipped_fraction``, ``--json``, ``result.json``, the estimator's
``clipped_fraction_``) and warns above one half (a ``ClippingWarning``; a warning line in the CLI). An automatic bound
releases the bound instead (it clips about 10% by construction)."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from dppca_dask import load_result, pca, write_matrix
from dppca_dask.methods.adaptive_power.row_norm_bound import CLIPPED_FRACTION_WARNING, DEFAULT_CLIPPED_SHARE
from dppca_dask.api import plan_release
from dppca_dask.errors import ClippingWarning, NotPrivateWarning
from dppca_dask.mechanisms.testing import AuditingNoiseSource

N, D = 20_000, 12


def _rows(seed: int, norm: float, share_long: float) -> np.ndarray:
    """Rows of norm ``norm``, a share ``share_long`` of them 4 times longer."""
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((N, D))
    rows *= (norm / np.linalg.norm(rows, axis=1))[:, None]
    rows[: int(N * share_long)] *= 4.0
    return rows


def _run(matrix: np.ndarray, seed: int, **kwargs: object):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ClippingWarning)
        warnings.simplefilter("ignore", NotPrivateWarning)
        result = pca(matrix, epsilon=1.0, delta=1e-6, n_components=2, client="local", progress=False,
                     noise=AuditingNoiseSource(seed), **kwargs)
    return result, [w for w in caught if issubclass(w.category, ClippingWarning)]


def _tolerance(result: object) -> float:
    """Error of the released fraction at alpha = 1e-6: (z_clipped − f·z_count)/n to first order, each z of std
    m·√2, a normal of std ≤ m·√2·√2, beyond 4.9 of its stds with probability 1e-6 (and 10% for the second order)."""
    std = result.provenance["calibration"]["clipped_noise_multiplier"] * np.sqrt(2.0)  # type: ignore[attr-defined]
    return 1.1 * 4.9 * std * np.sqrt(2.0) / N


@pytest.mark.parametrize("mechanism", ["adaptive-power-block", "analyze-gauss", "auto"])
def test_the_clipped_fraction_is_released_and_warns_above_one_half(seed: int, mechanism: str) -> None:
    # 30% of the rows have norm 2 > c = 1: released about 0.3, no warning
    result, caught = _run(_rows(seed, 0.5, 0.3), seed, mechanism=mechanism, center="private")
    assert result.clipped_fraction == result.extras["clipped_fraction"]
    assert abs(result.clipped_fraction - 0.3) < _tolerance(result) < 0.2 and not caught
    # every row above the bound: released about 1, one warning naming the bound and the fraction
    result, caught = _run(_rows(seed, 3.0, 0.0), seed, mechanism=mechanism, center="private")
    assert result.clipped_fraction > 1.0 - _tolerance(result) and len(caught) == 1
    assert "row_norm_bound=1 clipped about " in str(caught[0].message)
    assert result.clipped_fraction > CLIPPED_FRACTION_WARNING


def test_the_release_is_one_gaussian_event_of_its_share_and_an_automatic_bound_does_not_make_it(seed: int) -> None:
    noise = AuditingNoiseSource(seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClippingWarning)
        warnings.simplefilter("ignore", NotPrivateWarning)
        result = pca(_rows(seed, 3.0, 0.0), epsilon=1.0, delta=1e-6, n_components=2, client="local",
                     progress=False, noise=noise, mechanism="adaptive-power-block", center=False)
    record = noise.records[0]
    assert record.release == "clipped-fraction" and record.sensitivity == pytest.approx(np.sqrt(2.0), rel=1e-15)
    np.testing.assert_array_equal(record.exact, [float(N), float(N)])  # (clipped rows, rows): nothing else
    calibration = result.provenance["calibration"]
    assert calibration["shares"]["clipped_fraction"] == DEFAULT_CLIPPED_SHARE
    assert record.scale == pytest.approx(calibration["clipped_noise_multiplier"] * np.sqrt(2.0), rel=1e-15)
    assert 0.99 <= result.privacy.epsilon <= 1.0  # calibrated jointly with the iterations and the variance
    auto, caught = _run(_rows(seed, 3.0, 0.0), seed, mechanism="adaptive-power-block", row_norm_bound="auto")
    assert auto.clipped_fraction is None and "clipped_fraction" not in auto.extras and not caught
    plan = plan_release(D, mechanism="analyze-gauss", epsilon=1.0, delta=1e-6, center="private",
                        row_norm_bound="auto")
    assert "clipped_fraction" not in plan.calibration["shares"]


def test_the_estimator_after_standard_scaling_warns_and_keeps_the_fraction(seed: int) -> None:
    from sklearn.preprocessing import StandardScaler

    from dppca_dask import DPPCA

    rng = np.random.default_rng(seed)
    data = StandardScaler().fit_transform(rng.standard_normal((N, D)) @ rng.standard_normal((D, D)))
    with pytest.warns(ClippingWarning, match="clipped about .* of the rows"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotPrivateWarning)
            model = DPPCA(3, epsilon=4.0, delta=1e-6, seed=seed, progress=False).fit(data, client="local")
    assert model.clipped_fraction_ > CLIPPED_FRACTION_WARNING


def test_the_cli_prints_saves_and_warns(tmp_path: Path, seed: int) -> None:
    store = tmp_path / "m.zarr"
    write_matrix(store, _rows(seed, 3.0, 0.0), rows_per_partition=5_000)
    out = tmp_path / "out"
    # the command as a user runs it: a warning line on stderr, the fraction in the summary and in result.json
    done = subprocess.run([sys.executable, "-m", "dppca_dask", "pca", str(store), "--epsilon", "1", "--delta", "1e-6",
                           "--executor", "local", "--out", str(out)], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "dppca-dask: warning: row_norm_bound=1 clipped about " in done.stderr
    fraction = load_result(out).clipped_fraction
    assert fraction is not None and fraction > CLIPPED_FRACTION_WARNING
    assert json.loads((out / "result.json").read_text())["extras"]["clipped_fraction"] == fraction
    assert f"rows clipped by the row norm bound (released): {fraction:.1%}" in done.stdout
