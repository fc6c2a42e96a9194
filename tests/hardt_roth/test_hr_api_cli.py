"""The public entry points of the Hardt–Roth mechanisms: ``pca(mechanism="private-power")``, ``lowrank`` and the CLI."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dppca_dask import load_lowrank, pca, write_matrix
from dppca_dask.accounting import ENTRY_CHANGE, ROW_CHANGE
from dppca_dask.cli import main
from dppca_dask.datasets import gaussian_factor_matrix, incoherent_psd
from dppca_dask.errors import InvalidParameterError
from dppca_dask.mechanisms.testing import ZeroNoiseSource
from dppca_dask.metrics import sin2


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("hr-stores")
    tall = gaussian_factor_matrix(400, 60, 2, scale=0.05, seed=1).matrix
    psd = incoherent_psd(120, [2000.0, 1000.0, 100.0], seed=2).matrix
    return {
        "tall": str(write_matrix(root / "tall.zarr", tall, rows_per_partition=90).path),
        "psd": str(write_matrix(root / "psd.zarr", psd, rows_per_partition=50).path),
    }


def _quiet_pca(data: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        from dppca_dask.errors import NotPrivateWarning
        warnings.simplefilter("ignore", NotPrivateWarning)
        warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
        return pca(data, client="local", **kwargs)


# ------------------------------------------------------------------------------------------------ pca()


def test_pca_private_power_on_a_store(stores: dict[str, str], seed: int) -> None:
    result = _quiet_pca(stores["psd"], epsilon=1.0, delta=1e-6, mechanism="private-power", symmetric=True,
                        n_components=2, coherence=40.0, seed=seed)
    assert result.components.shape == (2, 120)
    assert result.privacy.neighbouring == ENTRY_CHANGE
    assert result.privacy.epsilon <= 1.0
    assert result.provenance["parameters"]["n_iter"] == 20  # private power's default T
    assert result.provenance["parameters"]["coherence"] == 40.0
    truth = incoherent_psd(120, [2000.0, 1000.0, 100.0], seed=2).left
    assert sin2(result.components[0], truth[:, 0]) < 0.05


def test_pca_private_power_embedding_and_paper_figure(stores: dict[str, str], seed: int) -> None:
    result = _quiet_pca(stores["tall"], epsilon=2.0, delta=1e-6, mechanism="private-power", entry_bound=0.5,
                        calibration="paper", seed=seed)
    assert result.components.shape == (1, 60)
    assert result.privacy.neighbouring == "one entry changes by at most 0.5"
    paper = result.privacy.figures["paper"]
    assert paper["epsilon"] == 2.0 and paper["gdp_mu"] > 0
    assert result.privacy.epsilon < 2.0  # the paper's σ is conservative under exact composition
    noise_off = pca(stores["tall"], epsilon=2.0, delta=1e-6, mechanism="private-power", client="local",
                    noise=ZeroNoiseSource(), n_iter=60)
    truth = gaussian_factor_matrix(400, 60, 2, scale=0.05, seed=1).right[:, 0]
    assert sin2(noise_off.components[0], truth) < 1e-8


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mechanism": "adaptive-power", "coherence": 10.0}, "apply only to mechanism='private-power'"),
        ({"mechanism": "analyze-gauss", "symmetric": True}, "apply only"),
        ({"mechanism": "private-power", "coherence": 0.5}, "coherence must be >= 1"),
        ({"mechanism": "private-power", "coherence": "many"}, "coherence must be a number"),
        ({"mechanism": "private-power", "entry_bound": -1.0}, "entry_bound"),
        ({"mechanism": "private-power", "c_doubling": "yes"}, "c_doubling must be True or False"),
        ({"mechanism": "private-power", "n_components": 2}, "needs symmetric=True"),
        ({"mechanism": "private-power", "row_norm_bound": 3.0}, "row_norm_bound does not apply"),
    ],
)
def test_pca_validates_private_power_parameters(kwargs: dict, match: str) -> None:
    with pytest.raises(InvalidParameterError, match=match):
        pca(np.eye(8), epsilon=1.0, delta=1e-6, client="local", **kwargs)


def test_pca_private_power_cannot_resume() -> None:
    with pytest.raises(InvalidParameterError, match="cannot resume"):
        pca(np.eye(8), epsilon=1.0, delta=1e-6, mechanism="private-power", client="local", resume=object())


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_lowrank_json(stores: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "factors"
    code = main(["lowrank", stores["tall"], "--rank", "2", "--epsilon", "1", "--delta", "1e-6", "--out", str(out),
                 "--scheduler", "local", "--json", "--truncate", "--projection", "tight"])
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["rank"] == 2 and printed["output"] == str(out)
    assert printed["privacy"]["neighbouring"] == ROW_CHANGE and printed["private"]
    assert "left" not in printed and "right" not in printed  # factors go to the directory only
    loaded = load_lowrank(out)
    assert loaded.left.shape == (400, 2) and loaded.right.shape == (2, 60)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--mechanism", "randomized-response", "--rank", "2"], "rank: 2"),
        (["--mechanism", "private-low-rank", "--rank", "2", "--oversampling", "3", "--row-norm-bound", "2"],
         "one row changes by a vector of L2 norm at most 2"),
        (["--mechanism", "private-power", "--rank", "1", "--c-doubling"], "one entry changes by at most 1"),
    ],
)
def test_cli_lowrank_text(
    stores: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    out = tmp_path / "factors"
    code = main(["lowrank", stores["tall"], "--epsilon", "1", "--delta", "1e-6", "--out", str(out),
                 "--scheduler", "local", *args])
    assert code == 0
    text = capsys.readouterr().out
    assert expected in text and "neighbouring:" in text and f"factors written to {out}" in text
    assert (out / "factors.zarr").is_dir() and (out / "result.json").is_file()


@pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")
def test_cli_lowrank_private_power_on_a_symmetric_store(
    stores: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["lowrank", stores["psd"], "--mechanism", "private-power", "--symmetric", "--rank", "2",
                 "--coherence", "40", "--epsilon", "1", "--delta", "1e-6", "--out", str(tmp_path / "b"),
                 "--scheduler", "local", "--seed", "3"])
    assert code == 0
    text = capsys.readouterr().out
    assert "NOT differentially private" in text and ENTRY_CHANGE in text
    loaded = load_lowrank(tmp_path / "b")
    dense = loaded.left @ loaded.right
    np.testing.assert_allclose(dense, dense.T, atol=1e-9)


@pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")
def test_cli_pca_private_power(stores: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["pca", stores["psd"], "--mechanism", "private-power", "--symmetric", "--n-components", "2",
                 "--coherence", "40", "--epsilon", "1", "--delta", "1e-6", "--scheduler", "local", "--json",
                 "--seed", "3"])
    # Seeded: unseeded, the exit code depends on the start vector (exit 4 when an iterate passes the coherence
    # bound), which happened in none of 8,000 runs (below 4e-4 at 95% confidence)
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["privacy"]["neighbouring"] == ENTRY_CHANGE
    assert np.asarray(printed["components"]).shape == (2, 120)


def test_cli_public_failures_and_refusals(stores: dict[str, str], tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["pca", stores["tall"], "--mechanism", "private-power", "--coherence", "2", "--epsilon", "1",
                 "--delta", "1e-6", "--scheduler", "local"])
    assert code == 4
    assert "failed its coherence check" in capsys.readouterr().err
    code = main(["lowrank", stores["tall"], "--mechanism", "randomized-response", "--rank", "2", "--epsilon", "1",
                 "--delta", "1e-6", "--out", str(tmp_path / "x"), "--max-dense-bytes", "1000",
                 "--scheduler", "local"])
    assert code == 2
    assert "would need about" in capsys.readouterr().err
    code = main(["lowrank", stores["tall"], "--mechanism", "randomized-response", "--rank", "2", "--epsilon", "1",
                 "--delta", "1e-6", "--out", str(tmp_path / "x"), "--max-dense-bytes", "1KiB",
                 "--scheduler", "local"])  # a size with a unit, as --memory-limit takes
    assert code == 2
    assert "more than max_dense_bytes=1024" in capsys.readouterr().err
    code = main(["pca", stores["tall"], "--mechanism", "adaptive-power", "--coherence", "4", "--epsilon", "1",
                 "--delta", "1e-6", "--scheduler", "local"])
    assert code == 2
    assert "apply only to mechanism='private-power'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["lowrank", "{tall}", "--rank", "2", "--epsilon", "1e308", "--delta", "1e-6"], "epsilon must be <= 100"),
        (["lowrank", "{tall}", "--rank", "2", "--epsilon", "1", "--delta", "1e-320"], "delta must be in"),
        (["lowrank", "{tall}", "--rank", "1000000000", "--epsilon", "1", "--delta", "1e-6"], "rank must be"),
        (["lowrank", "{tall}", "--rank", "2", "--epsilon", "1", "--delta", "1e-6", "--row-norm-bound", "1e300"],
         "row_norm_bound must be in"),
        (["lowrank", "{tall}", "--rank", "1", "--mechanism", "private-power", "--epsilon", "1", "--delta", "1e-6",
          "--entry-bound", "1e300"], "entry_bound must be in"),
        (["lowrank", "{tall}", "--rank", "1", "--mechanism", "private-power", "--epsilon", "1", "--delta", "1e-6",
          "--n-iter", "1000000"], "n_iter must be an integer <= 1000"),
        (["pca", "{tall}", "--mechanism", "private-power", "--epsilon", "1", "--delta", "1e-6",
          "--entry-bound", "1e300"], "entry_bound must be in"),
    ],
)
def test_cli_parameter_abuse_exits_2_before_reading(stores: dict[str, str], tmp_path: Path, argv: list[str],
                                                    message: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = [a.format(**stores) for a in argv] + ["--scheduler", "local"]
    if args[0] == "lowrank":
        args += ["--out", str(tmp_path / "out")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.filterwarnings("ignore:calibration='paper'")
@pytest.mark.parametrize(("calibration", "said"), [("standard", "it stays at most the target"),
                                                   ("paper", "it exceeds the target 1 (the warning above says why)")])
def test_cli_lowrank_says_whether_the_run_meets_its_target(
    stores: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], calibration: str, said: str
) -> None:
    """The paper's constants miss the target (erratum): the summary must not say the run's epsilon is within it."""
    out = tmp_path / "factors"
    code = main(["lowrank", stores["tall"], "--rank", "2", "--epsilon", "1", "--delta", "1e-6", "--out", str(out),
                 "--scheduler", "local", "--calibration", calibration])  # unseeded: a seeded run is not private
    # and prints no privacy line; what is checked (the report's epsilon against its target) is not random
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    meets = json.loads((out / "result.json").read_text())["privacy"]["meets_target"]
    assert meets is (calibration == "standard")
    assert any(said in line for line in lines), lines
    assert not any("stays at most the target" in line for line in lines) or meets


@pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")
def test_cli_lowrank_prints_timings_when_asked(stores: dict[str, str], tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """As ``pca --timings``: the text output says the total and that it is outside the guarantee; never unasked."""
    for flag, shown in (([], False), (["--timings"], True)):
        code = main(["lowrank", stores["tall"], "--rank", "2", "--epsilon", "1", "--delta", "1e-6", "--seed", "2",
                     "--out", str(tmp_path / f"f{len(flag)}"), "--scheduler", "local", *flag])
        assert code == 0
        text = capsys.readouterr().out
        assert ("timings (not covered by the privacy guarantee): total " in text) is shown, text
