"""A URL, or an ``.h5ad`` file where a store is expected (``pca`` reads one directly), gets advice that works
(exit code 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dppca_dask.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["lowrank", "data.h5ad", "--rank", "2", "--epsilon", "1", "--delta", "1e-6", "--out", "o"],
         "convert it once with `dppca-dask ingest data.h5ad --out data.zarr --n-features D`"),
        (["lowrank", "s3://bucket/x.zarr", "--rank", "2", "--epsilon", "1", "--delta", "1e-6", "--out", "o"],
         "'s3://bucket/x.zarr' is a s3:// URL; the command line reads stores from a local or mounted file system"),
        (["info", "memory://x.zarr"], "is a memory:// URL"),
        (["ingest", "gs://b/x.svm", "--out", "x.zarr"], "reading gs:// URLs needs the gcsfs package"),
        (["pca", "s3://bucket/x.zarr", "--epsilon", "1", "--delta", "1e-6"],
         "reading s3:// URLs needs the s3fs package, which is not installed (Install s3fs to access S3): "
         "pip install s3fs"),
        (["ingest", "x.svm", "--out", "s3://b/x.zarr"], "write it to a local directory, then copy it"),
    ],
)
def test_advice_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                        argv: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written (no local directory named after a URL)


def test_the_advised_h5ad_conversion_works(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str], seed: int) -> None:
    anndata = pytest.importorskip("anndata")
    import numpy as np
    import scipy.sparse as sp

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(seed)
    anndata.AnnData(sp.random(40, 5, density=0.3, format="csr", random_state=rng)).write_h5ad("data.h5ad")
    assert main(["ingest", "data.h5ad", "--out", "data.zarr", "--n-features", "5"]) == 0
    assert main(["info", "data.zarr"]) == 0
    assert "40 x 5" in capsys.readouterr().out


def test_the_library_refuses_a_url_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dppca_dask import ingest
    from dppca_dask.errors import InvalidParameterError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.svm").write_text("1 1:1\n")
    with pytest.raises(InvalidParameterError, match="out 'memory://x.zarr' is a memory:// URL"):
        ingest("a.svm", "memory://x.zarr", n_features=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.svm"]
