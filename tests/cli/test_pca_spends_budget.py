"""``dppca-dask pca`` on the sample data with the default centring, 2 components, at a target of (1, 1e-6), reports an
epsilon in [0.99, 1] for every mechanism whose default centres the rows: the mean, the quantile, the variance, the
pilot and the main release are calibrated jointly to the total by the accountant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dppca_dask.cli import main

_HERE = Path(__file__).resolve()
#: The sample data (LIBSVM's w8a) in the shared folder beside the repository (or beside its parent folder).
W8A = next((p for p in (_HERE.parents[2].parent / "shared" / "data" / "w8a.svm",
                        _HERE.parents[3].parent / "shared" / "data" / "w8a.svm") if p.exists()),
           _HERE.parents[2].parent / "shared" / "data" / "w8a.svm")

pytestmark = pytest.mark.skipif(not W8A.exists(), reason="shared/data/w8a.svm is not beside the project")


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    store = tmp_path_factory.mktemp("sample") / "w8a.zarr"
    assert main(["ingest", str(W8A), "--out", str(store), "--n-features", "300", "--rows-per-partition", "10000",
                 "--no-progress"]) == 0
    return store


@pytest.mark.parametrize("mechanism", ["auto", "analyze-gauss", "adaptive-power", "adaptive-power-block"])
def test_the_default_centred_run_reports_its_whole_budget(sample_store: Path, mechanism: str, capsys,
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPPCA_DASK_CACHE_DIR", str(tmp_path / "cache"))
    capsys.readouterr()
    assert main(["pca", str(sample_store), "--epsilon", "1", "--delta", "1e-6", "--n-components", "2",
                 "--mechanism", mechanism, "--executor", "local", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["provenance"]["calibration"]["center"] == "private"  # the default centring
    assert 0.99 <= out["privacy"]["epsilon"] <= 1.0 and out["privacy"]["delta"] == 1e-6
