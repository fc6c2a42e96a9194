"""Release diagnostics (``result.diagnostics``) and feasible released variances.

The figures are checked against the random-matrix laws they invert, on seeded spiked matrices; every pca and
lowrank mechanism run on an all-zero matrix (every release pure noise) must say it is not reliable, and on a strong
planted direction at a large ε that it is. Deterministic (seeded noise); the tolerances on the predicted sines
are the finite-size spread of those laws at the sizes used (measured over seeds 0-99: at most 0.06).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dppca_dask import diagnostics as D
from dppca_dask import lowrank, pca
from dppca_dask.errors import NotPrivateWarning, UnreliableReleaseWarning

pytestmark = pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")

W8A = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "w8a.svm"
needs_w8a = pytest.mark.skipif(not W8A.exists(), reason="shared/data/w8a.svm is not beside the project")


# ------------------------------------------------------------------------------------------------ the contract
def test_to_dict_has_exactly_the_shared_contract_keys_and_round_trips() -> None:
    diag = D.diagnostics([0.1, 0.7])
    out = diag.to_dict()
    assert sorted(out) == ["noise_to_signal", "reliable", "rule", "threshold"]
    assert out["reliable"] is False and out["noise_to_signal"] == [0.1, 0.7] and out["threshold"] == 0.4
    assert isinstance(out["rule"], str) and out["rule"].count(";") == 1  # one sentence
    assert json.loads(json.dumps(out)) == out
    assert D.Diagnostics.from_dict(out) == diag


def test_figures_are_clipped_to_0_1_and_nan_counts_as_noise() -> None:
    diag = D.diagnostics([-0.5, 0.2, 7.0, float("nan"), float("inf")], threshold=0.3)
    assert diag.noise_to_signal == (0.0, 0.2, 1.0, 1.0, 1.0) and not diag.reliable and diag.worst == 1.0
    assert D.diagnostics([0.3, 0.2], threshold=0.3).reliable  # at the threshold: reliable
    assert D.diagnostics([]).reliable and D.diagnostics([]).worst == 0.0
    assert "components 2, 3, 4" in diag.warning() and "0.2" not in diag.warning()


# ------------------------------------------------------------------------------------------------ the laws
def _spike(rng: np.random.Generator, d: int) -> np.ndarray:
    v = rng.standard_normal(d)
    return v / np.linalg.norm(v)


@pytest.mark.parametrize("strength", [2.0, 3.0, 6.0])
def test_the_symmetric_figure_is_the_sine_of_a_spiked_wigner_matrix(seed: int, strength: float) -> None:
    rng = np.random.default_rng(seed)
    d, sigma = 300, 0.5
    v = _spike(rng, d)
    noise = np.triu(rng.standard_normal((d, d))) * sigma
    noise = noise + noise.T - np.diag(np.diag(noise))
    lam = strength * sigma * math.sqrt(d)  # 1/strength = the law's sine
    values, vectors = np.linalg.eigh(lam * np.outer(v, v) + noise)
    (figure,) = D.symmetric_noise_to_signal(values[-1:], sigma=sigma, dim=d)
    true_sin2 = 1.0 - float(vectors[:, -1] @ v) ** 2
    assert figure**2 == pytest.approx(true_sin2, abs=0.08)
    assert figure == pytest.approx(1.0 / strength, abs=0.08)


def test_pure_noise_figures_are_near_one(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d, sigma = 200, 2.0
    noise = np.triu(rng.standard_normal((d, d))) * sigma
    noise = noise + noise.T - np.diag(np.diag(noise))
    assert np.all(D.symmetric_noise_to_signal(np.linalg.eigvalsh(noise)[::-1][:3], sigma=sigma, dim=d) > 0.8)
    block = rng.standard_normal((d, 3)) * sigma
    assert np.all(D.block_noise_to_signal(block, sigma=sigma, n_components=3) > 0.8)
    assert D.vector_noise_to_signal([np.linalg.norm(block[:, 0])], sigma=sigma, dim=d)[0] > 0.9
    rows = rng.standard_normal((500, d)) * sigma
    singular = np.linalg.svd(rows, compute_uv=False)[:2]
    assert np.all(D.rectangular_noise_to_signal(singular, sigma=sigma, n_rows=500, n_cols=d) > 0.8)
    sample = rows[:, :50]
    cov = sample.T @ sample / 500
    assert np.all(D.sample_covariance_noise_to_signal(np.linalg.eigvalsh(cov)[::-1][:2], noise_level=sigma**2,
                                                      dim=50, n_samples=500) > 0.8)
    assert D.block_noise_to_signal(np.zeros((d, 2)), sigma=sigma, n_components=2).tolist() == [1.0, 1.0]


def test_the_rectangular_and_sample_covariance_figures_follow_their_laws(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, d = 800, 200
    u, v = _spike(rng, n), _spike(rng, d)
    theta = 2.5 * (n * d) ** 0.25  # above the detection edge (nd)^(1/4)
    _, s, vt = np.linalg.svd(theta * np.outer(u, v) + rng.standard_normal((n, d)), full_matrices=False)
    (figure,) = D.rectangular_noise_to_signal(s[:1], sigma=1.0, n_rows=n, n_cols=d)
    assert figure**2 == pytest.approx(1.0 - float(vt[0] @ v) ** 2, abs=0.06)
    m, ell = 400, 4.0
    root = np.eye(d) + (math.sqrt(1.0 + ell) - 1.0) * np.outer(v, v)
    z = rng.standard_normal((m, d)) / math.sqrt(m)
    values, vectors = np.linalg.eigh(root @ z.T @ z @ root)
    (figure,) = D.sample_covariance_noise_to_signal(values[-1:], noise_level=1.0, dim=d, n_samples=m)
    assert figure**2 == pytest.approx(1.0 - float(vectors[:, -1] @ v) ** 2, abs=0.06)


# ------------------------------------------------------------------------------------------------ every release
def _planted(seed: int, n: int = 4_000, d: int = 20, strength: float = 3.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    v = _spike(rng, d)
    rows = strength * rng.standard_normal((n, 1)) * v + rng.standard_normal((n, d)) / math.sqrt(d)
    return rows / math.sqrt(1.0 + strength**2)


PCA_RUNS: dict[str, dict[str, Any]] = {
    "adaptive-power": {"mechanism": "adaptive-power"},
    "adaptive-power-block": {"mechanism": "adaptive-power-block"},
    "adaptive-power-centred": {"mechanism": "adaptive-power", "center": "private"},
    "analyze-gauss": {"mechanism": "analyze-gauss"},
    "analyze-gauss-centred": {"mechanism": "analyze-gauss", "center": "private"},
    "auto": {"mechanism": "auto", "center": "private"},
    "auto-bound": {"mechanism": "auto", "row_norm_bound": "auto"},
}


@pytest.mark.parametrize("name", sorted(PCA_RUNS))
def test_every_pca_mechanism_says_pure_noise_is_unreliable_and_a_strong_signal_reliable(seed: int, name: str) -> None:
    options = {"epsilon": 1.0, "delta": 1e-6, "n_components": 2, "client": "local", "progress": False,
               "seed": seed, **PCA_RUNS[name]}
    noise_only = pca(np.zeros((2_000, 20)), **options)
    assert noise_only.diagnostics is not None and not noise_only.diagnostics.reliable
    # pure noise: every figure far above the reliability threshold (0.4); 0.80-1.00 measured over the mechanisms
    assert min(noise_only.diagnostics.noise_to_signal) > 0.6
    strong = pca(_planted(seed), **{**options, "epsilon": 4.0, "n_components": 1})
    assert strong.diagnostics.reliable and strong.diagnostics.noise_to_signal[0] < 0.2
    assert strong.to_dict()["diagnostics"] == strong.diagnostics.to_dict()


def test_the_exact_baseline_has_no_noise_and_private_power_is_diagnosed(seed: int) -> None:
    exact = pca(_planted(seed), epsilon=1.0, delta=1e-6, n_components=2, mechanism="exact", client="local",
                progress=False)
    assert exact.diagnostics.noise_to_signal == (0.0, 0.0) and exact.diagnostics.reliable
    square = np.zeros((60, 60))
    options = {"epsilon": 1.0, "delta": 1e-6, "mechanism": "private-power", "symmetric": True, "client": "local",
               "progress": False, "seed": seed}
    assert not pca(square, **options).diagnostics.reliable
    v = _spike(np.random.default_rng(seed), 60)
    strong = pca(400.0 * np.outer(v, v), **{**options, "epsilon": 4.0})
    assert strong.diagnostics.reliable


@pytest.mark.parametrize("mechanism", ["randomized-response", "private-low-rank", "private-power"])
def test_every_lowrank_mechanism_is_diagnosed(seed: int, mechanism: str) -> None:
    options: dict[str, Any] = {"rank": 1, "delta": 1e-6, "mechanism": mechanism, "client": "local", "seed": seed}
    if mechanism == "private-power":
        options["symmetric"] = True
        v = _spike(np.random.default_rng(seed), 60)
        zero, strong = np.zeros((60, 60)), 400.0 * np.outer(v, v)
    else:
        zero, strong = np.zeros((600, 20)), _planted(seed, n=600) * 3.0
    assert not lowrank(zero, epsilon=1.0, **options).diagnostics.reliable
    result = lowrank(strong, epsilon=8.0, **options)
    assert result.diagnostics.reliable and len(result.diagnostics.noise_to_signal) == 1
    assert result.to_dict()["diagnostics"] == result.diagnostics.to_dict()


def test_diagnostics_survive_save_and_load(tmp_path: Path, seed: int) -> None:
    from dppca_dask import load_lowrank, load_result

    result = pca(_planted(seed), epsilon=1.0, delta=1e-6, client="local", progress=False, seed=seed)
    assert load_result(result.save(tmp_path / "pca")).diagnostics == result.diagnostics
    low = lowrank(_planted(seed, n=600), rank=1, epsilon=1.0, delta=1e-6, client="local", seed=seed)
    assert load_lowrank(low.save(tmp_path / "lowrank")).diagnostics == low.diagnostics


# ------------------------------------------------------------------------------------------------ feasibility
def test_private_variances_are_projected_onto_their_feasible_set() -> None:
    from dppca_dask.methods.adaptive_power.explained_variance import sort_by_variance
    from dppca_dask.mechanisms.centred import private_variances
    from dppca_dask.mechanisms.testing import ScriptedNoiseSource

    # released sums (1, 4), a total of 2 (below their sum) and a negative variance: the total becomes their sum
    noise = ScriptedNoiseSource([np.array([0.0, 0.0, -3.0, 0.0, 0.0])])
    variance, _ = private_variances([1.0, 4.0, 0.0], 5.0, 100, row_norm_bound=1.0, noise_multiplier=1.0,
                                    noise=noise)
    assert variance.explained_variance_ratio.tolist() == [0.2, 0.8, 0.0]
    components = np.eye(3)
    ordered, sorted_variance, order = sort_by_variance(components, variance)
    assert order.tolist() == [1, 0, 2] and ordered.tolist() == components[[1, 0, 2]].tolist()
    assert sorted_variance.explained_variance_ratio.tolist() == [0.8, 0.2, 0.0]
    assert np.all(np.diff(sorted_variance.singular_values) <= 0)
    assert np.all(np.diff(sorted_variance.explained_variance) <= 0)


@pytest.mark.parametrize("mechanism", ["adaptive-power-block", "analyze-gauss", "auto"])
def test_released_ratios_are_sorted_in_0_1_and_sum_to_at_most_1_even_when_noise_dominates(
        seed: int, mechanism: str) -> None:
    for run in range(3):
        result = pca(_planted(seed + run, n=800), epsilon=0.1, delta=1e-6, n_components=5, mechanism=mechanism,
                     center="private", client="local", progress=False, seed=seed + run)
        ratio = result.explained_variance_ratio
        assert np.all(np.diff(ratio) <= 0) and np.all((ratio >= 0) & (ratio <= 1)) and ratio.sum() <= 1 + 1e-12
        assert np.all(np.diff(result.explained_variance) <= 0) and np.all(np.diff(result.singular_values) <= 0)
        assert not result.diagnostics.reliable


# ------------------------------------------------------------------------------------------------ entry points
def test_the_estimator_warns_and_keeps_the_diagnostics(seed: int) -> None:
    pytest.importorskip("sklearn")
    from dppca_dask.estimator import DPPCA

    model = DPPCA(3, epsilon=0.1, seed=seed, center="private", mechanism="adaptive-power-block")
    with pytest.warns(UnreliableReleaseWarning, match="dominated by its privacy noise") as caught:
        model.fit(_planted(seed, n=500), client="local")
    assert issubclass(UnreliableReleaseWarning, UserWarning) and caught
    assert model.diagnostics_ is model.result_.diagnostics and not model.diagnostics_.reliable
    assert np.all(np.diff(model.explained_variance_ratio_) <= 0)
    strong = DPPCA(1, epsilon=4.0, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnreliableReleaseWarning)
        warnings.simplefilter("ignore", NotPrivateWarning)
        strong.fit(_planted(seed), client="local")
    assert strong.diagnostics_.reliable


def test_pp_pca_stores_the_diagnostics_in_uns(seed: int) -> None:
    anndata = pytest.importorskip("anndata")
    from dppca_dask import pp

    adata = anndata.AnnData(_planted(seed, n=500))
    with pytest.warns(UnreliableReleaseWarning):
        pp.pca(adata, n_components=3, epsilon=0.1, delta=1e-6, seed=seed, client="local")
    stored = adata.uns["pca"]["diagnostics"]
    assert stored["reliable"] is False and len(stored["noise_to_signal"]) == 3
    assert np.all(np.diff(adata.uns["pca"]["variance_ratio"]) <= 0)


def _cli_pca(store: str, epsilon: float, k: int, capsys: Any) -> tuple[dict[str, Any], str]:
    from dppca_dask.cli import main

    code = main(["pca", store, "--epsilon", str(epsilon), "--delta", "1e-6", "--n-components", str(k), "--json",
                 "--executor", "local", "--seed", "7"])
    assert code == 0
    captured = capsys.readouterr()
    return json.loads(captured.out), captured.err


def _feasible(obj: dict[str, Any]) -> None:
    ratio = np.asarray(obj["explained_variance_ratio"])
    assert np.all(np.diff(ratio) <= 0) and np.all((ratio >= 0) & (ratio <= 1)) and ratio.sum() <= 1 + 1e-12


def test_pca_json_on_a_small_real_dataset_at_epsilon_0_1_is_not_reliable(tmp_path: Path, capsys: Any) -> None:
    """scikit-learn's digits (1,797 rows × 64): 5 components at ε = 0.1 are noise, and the CLI says so."""
    datasets = pytest.importorskip("sklearn.datasets")
    from dppca_dask import ingest

    rows = datasets.load_digits().data / 16.0
    store = ingest(rows, tmp_path / "digits.zarr", n_features=64, progress=False)
    obj, err = _cli_pca(str(store.path), 0.1, 5, capsys)
    assert obj["diagnostics"]["reliable"] is False and len(obj["diagnostics"]["noise_to_signal"]) == 5
    _feasible(obj)
    warning_lines = [line for line in err.splitlines() if "dominated by its privacy noise" in line]
    assert len(warning_lines) == 1 and warning_lines[0].startswith("dppca-dask: warning:")


@needs_w8a
def test_pca_json_on_w8a_first_1500_rows_at_epsilon_0_1_is_not_reliable(tmp_path: Path, capsys: Any) -> None:
    from dppca_dask import ingest

    head = tmp_path / "w8a-1500.svm"
    with open(W8A, encoding="utf-8") as source:
        head.write_text("".join(next(source) for _ in range(1500)), encoding="utf-8")
    store = ingest(head, tmp_path / "small.zarr", n_features=300, progress=False)
    obj, err = _cli_pca(str(store.path), 0.1, 5, capsys)
    assert obj["diagnostics"]["reliable"] is False and "dominated by its privacy noise" in err
    _feasible(obj)


@needs_w8a
def test_pca_json_on_w8a_at_epsilon_1_with_one_component_is_reliable(tmp_path: Path, capsys: Any) -> None:
    from dppca_dask import ingest

    store = ingest(W8A, tmp_path / "w8a.zarr", n_features=300, progress=False)
    obj, err = _cli_pca(str(store.path), 1.0, 1, capsys)
    assert obj["diagnostics"]["reliable"] is True and obj["diagnostics"]["noise_to_signal"][0] < 0.2
    assert "dominated" not in err
    _feasible(obj)


def test_lowrank_json_has_diagnostics_and_the_cli_warns_once(tmp_path: Path, capsys: Any) -> None:
    from dppca_dask import ingest
    from dppca_dask.cli import main

    store = ingest(np.zeros((400, 20)) + 1e-3, tmp_path / "flat.zarr", n_features=20, progress=False)
    code = main(["lowrank", str(store.path), "--rank", "2", "--epsilon", "0.5", "--delta", "1e-6", "--out",
                 str(tmp_path / "out"), "--json", "--executor", "local", "--seed", "5"])
    assert code == 0
    captured = capsys.readouterr()
    obj = json.loads(captured.out)
    assert obj["diagnostics"]["reliable"] is False and len(obj["diagnostics"]["noise_to_signal"]) == 2
    assert json.loads((tmp_path / "out" / "result.json").read_text())["diagnostics"] == obj["diagnostics"]
    assert sum("dominated by its privacy noise" in line for line in captured.err.splitlines()) == 1


def test_private_power_values_of_a_symmetric_matrix_are_non_negative_and_non_increasing(seed: int) -> None:
    rng = np.random.default_rng(seed)
    basis, _ = np.linalg.qr(rng.standard_normal((40, 3)))
    matrix = basis @ np.diag([30.0, 1.0, 0.5]) @ basis.T  # two weak directions: their released norms are noise
    for run in range(4):
        result = lowrank(matrix, rank=3, epsilon=0.3, delta=1e-6, mechanism="private-power", symmetric=True,
                         client="local", seed=seed + run)
        values = np.asarray(result.extras["values"])
        assert np.all(values >= 0) and np.all(np.diff(values) <= 0)
        assert len(result.extras["coherence"]) == len(result.diagnostics.noise_to_signal) == 3
        right = np.asarray(result.right)  # rows σ̂_i·v_i, in the order of the values
        np.testing.assert_allclose(np.linalg.norm(right, axis=1), values, rtol=1e-12, atol=1e-12)
