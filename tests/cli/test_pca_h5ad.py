"""``dppca-dask pca FILE.h5ad [--layer NAME]`` reads an AnnData file directly (in row blocks), and
``--executor`` forces where it runs; the JSON output states the executor."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.cli import main

anndata = pytest.importorskip("anndata")


@pytest.fixture
def h5ad(tmp_path: Path) -> str:
    x = sp.csr_matrix(sp.random(80, 6, density=0.4, format="csr", random_state=np.random.RandomState(2)) * 0.4)
    layer = np.random.default_rng(3).uniform(-0.3, 0.3, (80, 6))
    path = tmp_path / "cells.h5ad"
    anndata.AnnData(X=x, layers={"scaled": layer}).write_h5ad(path)
    return str(path)


def test_pca_on_an_h5ad_layer(h5ad: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["pca", h5ad, "--layer", "scaled", "--epsilon", "1", "--delta", "1e-6", "--n-iter", "3", "--json",
            "--executor", "local"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["provenance"]["executor"] == "in-process"
    assert len(out["components"][0]) == 6
    assert "feature_names" not in out  # the file's width and names are not declared


def test_a_missing_layer_exits_2(h5ad: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pca", h5ad, "--layer", "counts", "--epsilon", "1", "--delta", "1e-6"]) == 2
    assert "has no layer 'counts'; its layers: scaled" in capsys.readouterr().err


def test_a_bad_executor_is_refused(h5ad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["pca", h5ad, "--epsilon", "1", "--delta", "1e-6", "--executor", "threads"])
    assert stop.value.code == 2
    assert "invalid choice: 'threads'" in capsys.readouterr().err
