"""AnnData round trips: stores anndata.read_zarr opens, layers and .h5ad read directly, and dppca_dask.pp.pca."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from ingest_helpers import RPP

import dask
import dask.array as da
from dppca_dask import ingest, open_matrix
from dppca_dask.errors import InferredSchemaWarning, InvalidInputError, InvalidParameterError, NotPrivateWarning
from dppca_dask.storage import append_partition

anndata = pytest.importorskip("anndata")
pytest.importorskip("sklearn")
from dppca_dask import pp  # noqa: E402
from dppca_dask.ingest.adata import anndata_dask  # noqa: E402


@pytest.fixture
def in_process():
    with dask.config.set({"dppca_dask.client": "local", "scheduler": "sync"}):  # also lazy results: no cluster
        yield


def named(matrix: object) -> object:
    adata = anndata.AnnData(X=sp.csr_matrix(matrix))
    adata.obs_names = [f"cell-{i}" for i in range(adata.n_obs)]
    adata.var_names = [f"gene-{j}" for j in range(adata.n_vars)]
    adata.layers["dense"] = sp.csr_array(matrix).toarray() * 2.0
    return adata


# ----------------------------------------------------------------------------------------- stores AnnData reads
@pytest.mark.parametrize("layout", ["csr", "dense"])
def test_anndata_read_zarr_opens_a_store(tmp_path: Path, matrix: sp.csr_array, layout: str) -> None:
    src = matrix if layout == "csr" else matrix.toarray()
    store = ingest(src, tmp_path / "s.zarr", rows_per_partition=RPP)
    adata = anndata.read_zarr(store.path)
    assert adata.shape == (60, 9)
    x = adata.X.toarray() if sp.issparse(adata.X) else adata.X
    np.testing.assert_array_equal(x, matrix.toarray())
    np.testing.assert_allclose(adata.obs["row_norms"], np.linalg.norm(matrix.toarray(), axis=1), rtol=1e-12)
    assert list(adata.obs_names[:2]) == ["0", "1"] and list(adata.var_names[-1:]) == ["8"]
    grown = append_partition(store.path, matrix[:5] if layout == "csr" else matrix[:5].toarray())
    again = anndata.read_zarr(grown.path)
    assert again.shape == (65, 9) and list(again.obs_names[-2:]) == ["63", "64"]
    np.testing.assert_allclose(again.obs["row_norms"][60:], np.linalg.norm(matrix[:5].toarray(), axis=1))


def test_id_maps_are_the_obs_and_var_names(tmp_path: Path, matrix: sp.csr_array) -> None:
    named(matrix).write_h5ad(tmp_path / "a.h5ad")
    store = ingest(tmp_path / "a.h5ad", tmp_path / "s.zarr", rows_per_partition=RPP)
    adata = anndata.read_zarr(store.path)
    assert list(adata.obs_names[:2]) == ["cell-0", "cell-1"] and adata.var_names[8] == "gene-8"
    assert adata.obs.index.name == "obs_ids" and "row_norms" in adata.obs


def test_stores_in_the_old_layout_stay_readable_and_appendable(tmp_path: Path, matrix: sp.csr_array) -> None:
    store = ingest(matrix, tmp_path / "s.zarr", rows_per_partition=RPP)
    root = Path(store.path)
    shutil.move(root / "obs" / "row_norms", root / "row_norms")  # the arrays at the root, as before
    shutil.rmtree(root / "obs")
    shutil.rmtree(root / "var")
    meta = json.loads((root / "zarr.json").read_text())
    meta.pop("consolidated_metadata")  # stores of that layout were not consolidated
    (root / "zarr.json").write_text(json.dumps(meta))
    old = open_matrix(store.path)
    assert old.has_row_norms
    np.testing.assert_allclose(old.read_row_norms(1), np.linalg.norm(matrix[10:20].toarray(), axis=1))
    old.verify_partition(1)
    grown = append_partition(store.path, matrix[:3])
    assert grown.n_rows == 63 and sorted(zarr.open_group(grown.path, mode="r").keys()) == ["X", "row_norms"]
    np.testing.assert_allclose(grown.read_row_norms(grown.n_partitions - 1),
                               np.linalg.norm(matrix[:3].toarray(), axis=1))


# ----------------------------------------------------------------------------------- layers and .h5ad read directly
def test_ingest_a_layer(tmp_path: Path, matrix: sp.csr_array) -> None:
    named(matrix).write_h5ad(tmp_path / "a.h5ad")
    store = ingest(tmp_path / "a.h5ad", tmp_path / "s.zarr", layer="dense")
    np.testing.assert_array_equal(store.to_scipy().toarray(), matrix.toarray() * 2.0)
    assert store.metadata["source"]["layer"] == "dense"
    with pytest.raises(InvalidInputError, match=r"has no layer 'counts'; its layers: dense"):
        ingest(tmp_path / "a.h5ad", tmp_path / "t.zarr", layer="counts")
    with pytest.raises(InvalidParameterError, match=r"layer must be the name of a layer .* got 'a/b'"):
        ingest(tmp_path / "a.h5ad", tmp_path / "t.zarr", layer="a/b")
    np.save(tmp_path / "m.npy", matrix.toarray())
    with pytest.raises(InvalidParameterError, match="layer applies only to anndata input; the input is npy"):
        ingest(tmp_path / "m.npy", tmp_path / "t.zarr", layer="dense")
    assert not os.path.exists(tmp_path / "t.zarr")
    from dppca_dask.cli import main

    assert main(["ingest", str(tmp_path / "a.h5ad"), "--out", str(tmp_path / "c.zarr"), "--layer", "dense"]) == 0
    np.testing.assert_array_equal(open_matrix(tmp_path / "c.zarr").to_scipy().toarray(), matrix.toarray() * 2.0)


@pytest.mark.parametrize("suffix", [".h5ad", ".zarr"])
def test_anndata_dask_reads_row_blocks_lazily(tmp_path: Path, matrix: sp.csr_array, suffix: str) -> None:
    adata = named(matrix)
    path = tmp_path / f"a{suffix}"
    adata.write_h5ad(path) if suffix == ".h5ad" else adata.write_zarr(path)
    x = anndata_dask(path, rows_per_block=25)
    assert x.shape == (60, 9) and x.chunks[0] == (25, 25, 10)
    np.testing.assert_array_equal(x.compute(scheduler="sync").toarray(), matrix.toarray())
    dense = anndata_dask(path, layer="dense")
    np.testing.assert_array_equal(dense.compute(scheduler="sync"), matrix.toarray() * 2.0)


def test_anndata_dask_refuses_what_it_cannot_read(tmp_path: Path, matrix: sp.csr_array) -> None:
    adata = named(matrix)
    adata.layers["csc"] = sp.csc_matrix(matrix)
    adata.layers["text"] = np.full(matrix.shape, "a", dtype=object).astype(str)
    adata.write_h5ad(tmp_path / "a.h5ad")
    with pytest.raises(InvalidInputError, match=r"'layers/csc' .* is a csc_matrix .* `dppca-dask ingest"):
        anndata_dask(tmp_path / "a.h5ad", layer="csc")
    with pytest.raises(InvalidInputError, match=r"'layers/text' .* (has dtype|encoding-type)"):
        anndata_dask(tmp_path / "a.h5ad", layer="text")
    with pytest.raises(InvalidParameterError, match="rows_per_block must be a positive integer or None; got 0"):
        anndata_dask(tmp_path / "a.h5ad", rows_per_block=0)
    group = zarr.open_group(tmp_path / "b.zarr", mode="w")
    group.create_group("X", attributes={"encoding-type": "dict", "encoding-version": "0.1.0"})
    with pytest.raises(InvalidInputError, match=r"'X' in '.*b\.zarr' has encoding-type 'dict'"):
        anndata_dask(tmp_path / "b.zarr")
    zarr.open_group(tmp_path / "c.zarr", mode="w")
    with pytest.raises(InvalidInputError, match="has no 'X' matrix"):
        anndata_dask(tmp_path / "c.zarr")


def test_anndata_dask_checks_each_block_when_read(tmp_path: Path, matrix: sp.csr_array) -> None:
    named(matrix).write_zarr(tmp_path / "a.zarr")
    x = anndata_dask(tmp_path / "a.zarr", rows_per_block=20)
    indptr = zarr.open_group(tmp_path / "a.zarr", mode="r+")["X/indptr"]
    values = indptr[:]
    values[31] = values[29]  # decreasing pointers inside the second block
    indptr[:] = values
    with pytest.raises(InvalidInputError, match=r"row pointers are not increasing .* at row 30"):
        x.compute(scheduler="sync")


# ------------------------------------------------------------------------------------------------- pp.pca
def test_pp_pca_fills_obsm_varm_uns_like_scanpy(matrix: sp.csr_array, in_process) -> None:
    adata = named(matrix)
    with pytest.warns(NotPrivateWarning):
        assert pp.pca(adata, 3, epsilon=1.0, delta=1e-6, mechanism="exact") is None
    pcs = adata.varm["PCs"]
    assert pcs.shape == (9, 3) and adata.obsm["X_pca"].shape == (60, 3)
    np.testing.assert_allclose(adata.obsm["X_pca"], matrix.toarray() @ pcs, atol=1e-12)
    np.testing.assert_allclose(pcs.T @ pcs, np.eye(3), atol=1e-9)
    params = adata.uns["pca"]["params"]
    assert params["n_comps"] == 3 and params["mechanism"] == "exact" and params["zero_center"] is False
    assert adata.uns["pca"]["privacy"]["private"] is False
    lazy = anndata.AnnData(X=da.from_array(matrix.toarray(), chunks=(25, 9)))  # e.g. read with a dask X
    with pytest.warns(NotPrivateWarning):
        pp.pca(lazy, 3, epsilon=1.0, delta=1e-6, mechanism="exact")
    np.testing.assert_allclose(np.abs(lazy.varm["PCs"].T @ pcs), np.eye(3), atol=1e-9)
    np.testing.assert_allclose(lazy.obsm["X_pca"], matrix.toarray() @ lazy.varm["PCs"], atol=1e-12)


def test_pp_pca_private_layer_key_added_copy_and_h5ad_round_trip(tmp_path: Path, matrix: sp.csr_array,
                                                                  in_process) -> None:
    adata = named(matrix)
    out = pp.pca(adata, 2, epsilon=1.0, delta=1e-6, mechanism="analyze-gauss", layer="dense", key_added="dp",
                 copy=True, zero_center=False)
    assert out.uns["dp"]["params"]["zero_center"] is False
    assert "dp" not in adata.uns and out.obsm["dp"].shape == (60, 2) and out.varm["dp"].shape == (9, 2)
    np.testing.assert_allclose(out.obsm["dp"], matrix.toarray() * 2.0 @ out.varm["dp"], atol=1e-9)
    report = out.uns["dp"]["privacy"]
    assert report["private"] is True and report["epsilon"] <= 1.0 and report["delta"] == 1e-6
    assert out.uns["dp"]["params"]["layer"] == "dense" and out.uns["dp"]["params"]["key_added"] == "dp"
    out.write_h5ad(tmp_path / "out.h5ad")  # everything in uns is storable
    back = anndata.read_h5ad(tmp_path / "out.h5ad")
    assert back.uns["dp"]["privacy"]["neighbouring"] == report["neighbouring"]
    np.testing.assert_array_equal(back.varm["dp"], out.varm["dp"])


def test_pp_pca_backed_h5ad_zarr_and_store_paths(tmp_path: Path, matrix: sp.csr_array, in_process) -> None:
    adata = named(matrix)
    adata.write_h5ad(tmp_path / "a.h5ad")
    adata.write_zarr(tmp_path / "a.zarr")
    ingest(matrix, tmp_path / "s.zarr", rows_per_partition=RPP)
    backed = anndata.read_h5ad(tmp_path / "a.h5ad", backed="r")
    with pytest.warns(NotPrivateWarning):
        pp.pca(backed, 2, epsilon=1.0, delta=1e-6, mechanism="exact")
    reference = backed.varm["PCs"]
    np.testing.assert_allclose(backed.obsm["X_pca"], matrix.toarray() @ reference, atol=1e-12)
    with pytest.warns(InferredSchemaWarning, match="read from the AnnData file"):
        private = pp.pca(tmp_path / "a.h5ad", 1, epsilon=1.0, delta=1e-6, mechanism="analyze-gauss")
    assert list(private.uns["pca"]["privacy"]["caveats"]) == ["shape inferred from the data: not covered"]
    private.write_h5ad(tmp_path / "private.h5ad")
    for path in (tmp_path / "a.h5ad", tmp_path / "a.zarr", tmp_path / "s.zarr"):
        with pytest.warns(NotPrivateWarning):
            opened = pp.pca(path, 2, epsilon=1.0, delta=1e-6, mechanism="exact")
        assert opened.shape == (60, 9), path
        np.testing.assert_allclose(np.abs(opened.varm["PCs"].T @ reference), np.eye(2), atol=1e-9)
    assert list(opened.obs.columns) == ["row_norms"]  # the store's obs
    with pytest.warns(NotPrivateWarning):
        named_out = pp.pca(tmp_path / "a.zarr", 1, epsilon=1.0, delta=1e-6, mechanism="exact", layer="dense")
    assert named_out.obs_names[0] == "cell-0" and named_out.var_names[8] == "gene-8"


def test_pp_pca_refuses_bad_arguments_before_any_release(tmp_path: Path, matrix: sp.csr_array, in_process) -> None:
    adata = named(matrix)
    adata.write_h5ad(tmp_path / "a.h5ad")
    with pytest.raises(InvalidParameterError, match="adata has no layer 'counts'; its layers: dense"):
        pp.pca(adata, epsilon=1.0, delta=1e-6, layer="counts")
    with pytest.raises(InvalidParameterError, match="layer must be a non-empty string or None; got ''"):
        pp.pca(adata, epsilon=1.0, delta=1e-6, layer="")
    with pytest.raises(InvalidParameterError, match="key_added must be a non-empty string or None; got 3"):
        pp.pca(adata, epsilon=1.0, delta=1e-6, key_added=3)
    with pytest.raises(InvalidParameterError, match="copy must be True or False; got 'yes'"):
        pp.pca(adata, epsilon=1.0, delta=1e-6, copy="yes")
    with pytest.raises(InvalidParameterError, match="adata must be an AnnData object .* got ndarray"):
        pp.pca(matrix.toarray(), epsilon=1.0, delta=1e-6)
    with pytest.raises(InvalidParameterError, match="copy=True applies to an AnnData object"):
        pp.pca(tmp_path / "a.h5ad", epsilon=1.0, delta=1e-6, copy=True)
    with pytest.raises(InvalidParameterError, match="copy=True needs an in-memory AnnData; this one is backed"):
        pp.pca(anndata.read_h5ad(tmp_path / "a.h5ad", backed="r"), epsilon=1.0, delta=1e-6, copy=True)
    empty = anndata.AnnData(obs=adata.obs, var=adata.var)
    with pytest.raises(InvalidParameterError, match=r"adata.X is None; pass layer="):
        pp.pca(empty, epsilon=1.0, delta=1e-6)
    with pytest.raises(InvalidInputError, match="Input X contains NaN"):
        pp.pca(anndata.AnnData(X=np.full((4, 3), np.nan)), epsilon=1.0, delta=1e-6)
    assert "pca" not in adata.uns


def test_scanpy_notebook_plots_the_released_variance_ratio(matrix: sp.csr_array, in_process, monkeypatch) -> None:
    sc = pytest.importorskip("scanpy")
    import matplotlib

    matplotlib.use("Agg")
    import dppca_dask.api._pca as api

    real = api.pca
    ratio = np.array([0.5, 0.3, 0.1])

    class WithVarianceRatio:  # until every mechanism releases it, a release that carries one
        def __init__(self, result):
            self._result = result

        def __getattr__(self, name):
            if name == "explained_variance_ratio":
                return getattr(self._result, name, None) if getattr(self._result, name, None) is not None else ratio
            return getattr(self._result, name)

    monkeypatch.setattr(api, "pca", lambda *a, **k: WithVarianceRatio(real(*a, **k)))
    adata = named(matrix)
    pp.pca(adata, 3, epsilon=1.0, delta=1e-6, mechanism="analyze-gauss")
    assert adata.uns["pca"]["variance_ratio"].shape == (3,)
    sc.pl.pca_variance_ratio(adata, n_pcs=3, show=False)
    labels = {text.get_text(): text.get_position()[1] for text in matplotlib.pyplot.gca().texts}
    released = adata.uns["pca"]["variance_ratio"]
    assert labels == {f"PC{i + 1}": pytest.approx(value) for i, value in enumerate(released)}  # one label per PC
    sc.pl.pca(adata, show=False)  # reads obsm["X_pca"]
    matplotlib.pyplot.close("all")


def test_pp_pca_centres_privately_by_default_as_scanpy(matrix: sp.csr_array, in_process) -> None:
    adata = named(matrix)
    pp.pca(adata, 2, epsilon=1.0, delta=1e-6, mechanism="analyze-gauss")
    assert adata.uns["pca"]["params"]["zero_center"] is True
    uncentred = matrix.toarray() @ adata.varm["PCs"]
    assert not np.allclose(adata.obsm["X_pca"], uncentred, atol=1e-6)
    with pytest.raises(InvalidParameterError, match="zero_center must be True, False or None"):
        pp.pca(adata, 2, epsilon=1.0, delta=1e-6, zero_center="yes")


def test_pp_pca_takes_scanpys_names_and_honours_the_hvg_mask(matrix: sp.csr_array, in_process) -> None:
    """scanpy's ``n_comps``, ``mask_var``, ``use_highly_variable``: a ``highly_variable`` column is used by default
    (as scanpy does), the loadings of the columns left out are zero, and a private release says the mask is taken
    as public."""
    adata = named(matrix)
    hvg = np.zeros(9, dtype=bool)
    hvg[[0, 2, 3, 5, 8]] = True
    adata.var["highly_variable"] = hvg
    with pytest.warns(NotPrivateWarning):
        pp.pca(adata, n_comps=2, epsilon=1.0, delta=1e-6, mechanism="exact")
    pcs = adata.varm["PCs"]
    assert pcs.shape == (9, 2) and not pcs[~hvg].any()
    dense = matrix.toarray()
    np.testing.assert_allclose(adata.obsm["X_pca"], dense[:, hvg] @ pcs[hvg], atol=1e-12)
    params = adata.uns["pca"]["params"]
    assert params["n_comps"] == 2 and params["mask_var"] == "highly_variable" and params["use_highly_variable"]
    with pytest.warns(NotPrivateWarning):
        pp.pca(adata, n_comps=2, epsilon=1.0, delta=1e-6, mechanism="exact", use_highly_variable=False)
    assert adata.varm["PCs"][~hvg].any() and adata.uns["pca"]["params"]["mask_var"] == "None"
    pp.pca(adata, n_comps=1, epsilon=1.0, delta=1e-6, mechanism="analyze-gauss", mask_var=~hvg)
    assert not adata.varm["PCs"][hvg].any() and adata.uns["pca"]["params"]["mask_var"] == "array"
    assert any("mask_var" in str(c) for c in adata.uns["pca"]["privacy"]["caveats"])
    for kwargs, message in (({"n_comps": 2, "n_components": 3}, "differ"),
                            ({"mask_var": "nope"}, "not a column of var"),
                            ({"mask_var": np.ones(3, dtype=bool)}, "one per variable"),
                            ({"mask_var": None, "use_highly_variable": True}, "not both")):
        with pytest.raises(InvalidParameterError, match=message):
            pp.pca(adata, epsilon=1.0, delta=1e-6, **kwargs)
