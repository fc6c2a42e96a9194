"""``pca(center=..., row_norm_bound="auto")``: the released mean and explained variance on the result, in its JSON
and on disk; centred runs through ``pca`` against scikit-learn; the options' errors, before anything is drawn."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.decomposition import PCA

from dppca_dask import load_result, pca
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms.testing import AuditingNoiseSource, ZeroNoiseSource


@pytest.fixture
def rows(rng: np.random.Generator) -> np.ndarray:
    scales = np.array([3.0, 1.5, 1.0] + [0.2] * 27) / np.sqrt(30)
    return rng.standard_normal((6_000, 30)) * scales + 0.25


class _StartOnly(ZeroNoiseSource):
    def __init__(self) -> None:
        super().__init__()
        self.start = np.random.default_rng(0)

    def _gaussian(self, std, size):
        if self.current_release == "block/init":
            return self.start.standard_normal(size)
        return super()._gaussian(std, size)


def test_centred_noise_off_through_pca_equals_scikit_learn(rows: np.ndarray) -> None:
    """(The block run's noise-off equality, where the SVT's zero-noise filtering must be avoided, is tested on the
    algorithm itself in test_block_power_algorithm.py.)"""
    mechanism = "analyze-gauss"
    result = pca(sp.csr_array(rows), epsilon=1.0, delta=1e-6, n_components=2, center=True, mechanism=mechanism,
                 client="local", noise=_StartOnly(), progress=False)
    norms = np.linalg.norm(rows, axis=1)
    clipped = rows * np.minimum(1.0, 1.0 / norms)[:, None]
    reference = PCA(n_components=2).fit(clipped)
    for i in range(2):
        assert 1 - float(result.components[i] @ reference.components_[i]) ** 2 < 1e-6
    np.testing.assert_allclose(result.mean, reference.mean_, atol=1e-12)
    np.testing.assert_allclose(result.explained_variance, reference.explained_variance_, rtol=1e-5)
    np.testing.assert_allclose(result.explained_variance_ratio, reference.explained_variance_ratio_, rtol=1e-5)
    assert result.mechanism == mechanism


def test_released_statistics_in_json_and_on_disk(rows: np.ndarray, tmp_path, seed: int) -> None:
    result = pca(rows, epsilon=1.0, delta=1e-6, n_components=3, center="private", row_norm_bound="auto",
                 client="local", noise=AuditingNoiseSource(seed), progress=False, mechanism="adaptive-power")
    out = json.loads(json.dumps(result.to_dict()))
    for key in ("explained_variance", "explained_variance_ratio", "singular_values", "mean"):
        assert len(out[key]) == (30 if key == "mean" else 3)
    assert out["mechanism"] == "adaptive-power-block"
    assert out["provenance"]["parameters"]["center"] == "private"
    assert out["provenance"]["parameters"]["row_norm_bound"] == "auto"
    assert out["extras"]["row_norm_bound"] > 0
    shares = out["provenance"]["calibration"]["shares"]
    assert shares == {"row_norm_quantile_epsilon": 0.05, "mean": 0.1, "explained_variance": 0.05,
                      "iterations_epsilon": pytest.approx(0.8), "iterations_delta": pytest.approx(0.85)}
    assert result.privacy.epsilon <= 1.0
    result.save(tmp_path / "r")
    back = load_result(tmp_path / "r")
    np.testing.assert_array_equal(back.explained_variance, result.explained_variance)
    np.testing.assert_array_equal(back.mean, result.mean)
    plain = pca(rows, epsilon=1.0, delta=1e-6, client="local", noise=AuditingNoiseSource(seed), progress=False,
                mechanism="adaptive-power")
    assert plain.mean is None and plain.explained_variance is None and "mean" not in plain.to_dict()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"center": "median"}, "center must be False, True, 'private' or a public mean vector; got 'median'"),
    ({"center": np.zeros((2, 2))}, r"a given center must be a finite 1-D vector \(a public mean\); got shape"),
    ({"center": np.zeros(3)}, r"a given center must have one entry per column \(30\); got shape \(3,\)"),
    ({"row_norm_bound": "max"}, "row_norm_bound must be a number or 'auto'; got 'max'"),
    ({"center": True, "mechanism": "exact"}, "center and row_norm_bound='auto' apply to mechanism in"),
    ({"row_norm_bound": "auto", "mechanism": "private-power"}, "apply to mechanism in adaptive-power"),
])
def test_option_errors_before_any_draw(rows: np.ndarray, kwargs: dict, message: str) -> None:
    noise = AuditingNoiseSource(0)
    with pytest.raises(InvalidParameterError, match=message):
        pca(rows, epsilon=1.0, delta=1e-6, client="local", noise=noise, progress=False, **kwargs)
    assert noise.records == [] and noise.released_keys == frozenset()


def test_cli_centres_by_default_and_writes_a_scree_plot(rows: np.ndarray, tmp_path, capsys) -> None:
    from dppca_dask.cli import main
    from dppca_dask.ingest import ingest

    store = tmp_path / "rows.zarr"
    ingest(rows, str(store))
    plot = tmp_path / "scree.png"
    code = main(["pca", str(store), "--epsilon", "1", "--delta", "1e-6", "--n-components", "3", "--json",
                 "--scheduler", "local", "--row-norm-bound", "auto", "--plot", str(plot)])
    assert code == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # the default mechanism, auto, releases the components of the one it chose, centred, with their variance
    assert out["mechanism"] in ("adaptive-power-block", "analyze-gauss") and len(out["explained_variance_ratio"]) == 3
    assert out["provenance"]["parameters"]["center"] == "private" and len(out["mean"]) == 30
    assert out["provenance"]["parameters"]["mechanism"] == "auto"
    assert out["extras"]["auto"]["chosen"] == out["mechanism"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["pca", str(store), "--epsilon", "1", "--delta", "1e-6", "--center", "none", "--json",
                 "--mechanism", "adaptive-power", "--scheduler", "local"]) == 0
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert plain["mechanism"] == "adaptive-power" and "explained_variance" not in plain


@pytest.mark.parametrize(("argv", "message"), [
    (["--center", "none", "--plot", "x.png"], "--plot needs a released explained variance"),
    (["--plot", "x.txt"], "--plot must name a .png file"),
    (["--plot", "no/such/dir/x.png"], "does not exist; create it first"),
])
def test_cli_plot_errors_before_the_run(rows: np.ndarray, tmp_path, capsys, argv, message, monkeypatch) -> None:
    from dppca_dask.cli import main
    from dppca_dask.ingest import ingest

    store = tmp_path / "rows.zarr"
    ingest(rows[:200], str(store))
    monkeypatch.chdir(tmp_path)
    assert main(["pca", str(store), "--epsilon", "1", "--delta", "1e-6", "--scheduler", "local", *argv]) == 2
    assert message in capsys.readouterr().err


def test_cli_plot_never_replaces_a_directory(rows: np.ndarray, tmp_path, capsys) -> None:
    """The plot replaces a file of its name, never a directory (refused before the run; the directory is intact)."""
    from dppca_dask.cli import main
    from dppca_dask.ingest import ingest

    store = tmp_path / "rows.zarr"
    ingest(rows[:200], str(store))
    (tmp_path / "d.png").mkdir()
    (tmp_path / "d.png" / "kept").write_text("x")
    assert main(["pca", str(store), "--epsilon", "1", "--delta", "1e-6", "--scheduler", "local",
                 "--plot", str(tmp_path / "d.png")]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert (tmp_path / "d.png" / "kept").read_text() == "x"


def test_cli_row_norm_bound_must_be_a_number_or_auto(capsys) -> None:
    from dppca_dask.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["pca", "store.zarr", "--epsilon", "1", "--delta", "1e-6", "--row-norm-bound", "max"])
    assert exit_info.value.code == 2
    assert "must be a number or 'auto'; got 'max'" in capsys.readouterr().err
