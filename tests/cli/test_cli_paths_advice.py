"""A URL whose package, credentials or store are missing, or an ``.h5ad`` file where a store is expected (``pca``
reads one directly), gets advice that works (exit code 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dppca_dask.cli import main


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS configuration of the machine's: no variables, no files, no instance metadata."""
    import os

    for name in [n for n in os.environ if n.startswith(("AWS_", "FSSPEC_S3"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # never the real service from a test
    try:
        import s3fs
    except ImportError:  # then the s3:// cases say that s3fs is missing
        return
    s3fs.S3FileSystem.clear_instance_cache()  # file systems made earlier in this process from another environment


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["lowrank", "data.h5ad", "--rank", "2", "--epsilon", "1", "--delta", "1e-6", "--out", "o"],
         "convert it once with `dppca-dask ingest data.h5ad --out data.zarr --n-features D`"),
        (["lowrank", "s3://bucket/x.zarr", "--rank", "2", "--epsilon", "1", "--delta", "1e-6", "--out", "o"],
         "no credentials for 's3://bucket/x.zarr' (NoCredentialsError); set AWS_ACCESS_KEY_ID and "
         "AWS_SECRET_ACCESS_KEY"),
        (["info", "memory://x.zarr"],
         "no matrix store at 'memory://x.zarr'; a memory:// store lives only in the Python process that wrote it"),
        (["ingest", "gs://b/x.svm", "--out", "x.zarr"], "reading gs:// URLs needs the gcsfs package"),
        (["ingest", "x.svm", "--out", "s3://b/x.zarr"], "no credentials for 's3://b/x.zarr'"),
        (["info", "s3://b/x.zarr", "--storage-option", "endpoint_url"], "--storage-option must be KEY=VALUE"),
    ],
)
def test_advice_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                        no_aws: None, argv: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []  # nothing written (no local directory named after a URL)


@pytest.mark.parametrize(("url", "module", "package"), [("s3://bucket/x.zarr", "s3fs", "s3fs"),
                                                        ("http://127.0.0.1:9/x.zarr", "aiohttp", "aiohttp")])
def test_a_missing_package_is_named(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                    url: str, module: str, package: str) -> None:
    """The package that is missing, not fsspec (which http:// is part of): a module made unimportable, since the
    test environment has them all."""
    import importlib
    import sys

    registry = importlib.import_module("fsspec.registry")._registry  # classes imported earlier in this process
    monkeypatch.setitem(sys.modules, module, None)  # import raises ModuleNotFoundError
    for scheme in ("s3", "http", "https"):
        monkeypatch.delitem(registry, scheme, raising=False)
    assert main(["pca", url, "--epsilon", "1", "--delta", "1e-6"]) == 2
    assert f"reading {url.split(':')[0]}:// URLs needs the {package} package, which is not installed: pip install " \
           f"{package}" in capsys.readouterr().err


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


def test_the_library_writes_a_store_to_a_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dppca_dask import ingest
    from dppca_dask.storage import open_matrix

    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.svm").write_text("1 1:1\n")
    store = ingest("a.svm", "memory://advice/x.zarr", n_features=2)
    assert store.path == "memory://advice/x.zarr" and open_matrix("memory://advice/x.zarr").n_rows == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.svm"]  # no local directory named after the URL
