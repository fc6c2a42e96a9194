"""Scanpy-style preprocessing: :func:`pca` fills an AnnData object as ``scanpy.pp.pca`` does, privately.

``dppca_dask.pp.pca(adata, n_components=10, epsilon=1.0, delta=1e-6)`` writes ``adata.obsm["X_pca"]`` (the rows
projected onto the released components), ``adata.varm["PCs"]`` (the components, one column each) and
``adata.uns["pca"]`` (the parameters, the privacy report, the release's diagnostics — ``reliable`` and a
``noise_to_signal`` figure per component, with a ``UserWarning`` when it is not reliable — and the released
variance and variance ratio when the mechanism releases them), so scanpy's plotting and neighbour functions read
them as their own. Needs the ``anndata`` extra.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from dppca_dask.errors import InvalidParameterError

__all__ = ["pca"]

#: scanpy's default mask: ``var["highly_variable"]`` when present.
HVG = "highly_variable"
_DEFAULT_MASK: Any = object()


def pca(
    adata: Any,
    n_components: int = 1,
    *,
    epsilon: float,
    delta: float,
    layer: str | None = None,
    key_added: str | None = None,
    copy: bool = False,
    mechanism: str | None = None,
    n_iter: int | None = None,
    row_norm_bound: float = 1.0,
    seed: int | None = None,
    client: Any = None,
    progress: bool | None = None,
    zero_center: bool | None = None,
    storage_options: Any = None,
    ledger: Any = None,
    dataset: str | None = None,
    job_id: str | None = None,
    n_comps: int | None = None,
    mask_var: Any = _DEFAULT_MASK,
    use_highly_variable: bool | None = None,
) -> Any:
    """Differentially private PCA of an AnnData object, stored where ``scanpy.pp.pca`` stores its results.

    Parameters
    ----------
    adata
        An ``AnnData`` object (in memory, or backed: ``anndata.read_h5ad(path, backed="r")``, whose ``X`` is read
        in row blocks from its file), or the path of an ``.h5ad`` file or of a ``.zarr`` AnnData store (a
        dppca_dask store is one); a path is opened without loading ``X`` and the filled ``AnnData`` (with its
        ``obs`` and ``var``, without ``X``) is returned.
    n_components
        Number of components k (scanpy's ``n_comps``).
    epsilon, delta
        Total privacy budget of this release (required: a release is a decision about the budget).
    layer
        Use ``adata.layers[layer]`` (``layers/<layer>`` in a file) instead of ``X``.
    key_added
        Store the results in ``obsm[key_added]``, ``varm[key_added]`` and ``uns[key_added]`` instead of
        ``"X_pca"``, ``"PCs"`` and ``"pca"`` (as scanpy does).
    copy
        Return a filled copy instead of filling ``adata`` in place (in-memory ``AnnData`` only).
    mechanism, n_iter, row_norm_bound, seed, client, progress
        As in :func:`dppca_dask.pca`; :class:`~dppca_dask.estimator.DPPCA` gives every other parameter.
    n_comps
        scanpy's name for ``n_components`` (give one of them).
    mask_var, use_highly_variable
        As scanpy: the columns (genes) to analyse: a boolean mask, or the name of a boolean ``var`` column; by
        default ``var["highly_variable"]`` when it exists (``use_highly_variable=False`` or ``mask_var=None``: every
        column). ``varm["PCs"]`` has zeros for the columns left out. The mask is public input: a mask computed from
        these rows (``sc.pp.highly_variable_genes`` on the same cells) is a choice the release's guarantee does not
        cover, and ``uns[...]["privacy"]["caveats"]`` says so.
    zero_center
        scanpy's name: ``True`` centres by a private mean of the clipped rows (released from a public share of the
        budget), ``False`` does not centre; ``None`` (default) centres for the mechanisms that can (adaptive power
        and Analyze Gauss), as :class:`~dppca_dask.estimator.DPPCA` does.
    storage_options
        For ``adata`` given as a store URL (``s3://bucket/x.zarr``): fsspec options of its file system (see
        :func:`dppca_dask.pca`); by default the environment (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...).
    ledger, dataset, job_id
        Keep the release in a privacy-budget ledger, as :func:`dppca_dask.pca` does (given together).

    Returns
    -------
    AnnData or None
        The filled copy when ``copy=True``, the opened ``AnnData`` when ``adata`` is a path, else ``None``.

    Notes
    -----
    Privacy: one release under (``epsilon``, ``delta``), each row (cell) one individual, with the privacy contract
    of the mechanism (see :func:`dppca_dask.pca`); ``uns[...]["privacy"]`` is its report. The data are centred by a
    released private mean when ``params["zero_center"]`` is true. ``obsm["X_pca"]`` is the public
    projection applied to the private rows: as private as the rows themselves, do not publish it.

    Examples
    --------
    >>> import anndata
    >>> import numpy as np
    >>> import dppca_dask
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(2_000, 8)) * [4, 2, 1, 1, 1, 1, 1, 1]
    >>> adata = anndata.AnnData((X / np.linalg.norm(X, axis=1).max()).astype(np.float32))
    >>> dppca_dask.pp.pca(adata, 2, epsilon=1.0, delta=1e-6)
    >>> adata.obsm["X_pca"].shape, adata.varm["PCs"].shape
    ((2000, 2), (8, 2))
    >>> adata.uns["pca"]["variance_ratio"].shape, "privacy" in adata.uns["pca"]
    ((2,), True)
    """
    anndata = _import_anndata()
    from dppca_dask.estimator import DPPCA

    if not isinstance(copy, (bool, np.bool_)):
        raise InvalidParameterError(f"copy must be True or False; got {copy!r}")
    if key_added is not None and (not isinstance(key_added, str) or not key_added):
        raise InvalidParameterError(f"key_added must be a non-empty string or None; got {key_added!r}")
    if layer is not None and (not isinstance(layer, str) or not layer):
        raise InvalidParameterError(f"layer must be a non-empty string or None; got {layer!r}")
    opened = isinstance(adata, (str, os.PathLike))
    if opened:
        if copy:
            raise InvalidParameterError("copy=True applies to an AnnData object; a path is opened and the filled "
                                        "AnnData returned anyway: drop copy=True")
        adata, data = _open_path(anndata, os.fspath(adata), layer, storage_options)
    else:
        if not isinstance(adata, anndata.AnnData):
            raise InvalidParameterError(f"adata must be an AnnData object or the path of an .h5ad or .zarr file; "
                                        f"got {type(adata).__name__}")
        if copy:
            if adata.isbacked:
                raise InvalidParameterError("copy=True needs an in-memory AnnData; this one is backed by "
                                            f"'{adata.filename}': use copy=False (results are kept in memory)")
            adata = adata.copy()
        data = _matrix(adata, layer)
    n_components = _n_comps(n_components, n_comps)
    mask, mask_name = _mask(adata, mask_var, use_highly_variable)
    if mask is not None:
        if not hasattr(data, "ndim"):
            raise InvalidParameterError("mask_var needs the matrix as an array (an in-memory or backed AnnData); "
                                        "this path opens a store: pass mask_var=None, or open it with anndata first")
        data = data[:, np.flatnonzero(mask)]
    if zero_center is not None and not isinstance(zero_center, (bool, np.bool_)):
        raise InvalidParameterError(f"zero_center must be True, False or None; got {zero_center!r}")
    center = None if zero_center is None else ("private" if zero_center else False)
    model = DPPCA(n_components, epsilon=epsilon, delta=delta, mechanism=mechanism, n_iter=n_iter,
                  row_norm_bound=row_norm_bound, seed=seed, progress=progress, center=center)
    read_from_file = _is_dask(data) and (opened or bool(adata.isbacked))
    model.fit(data, client=client, ledger=ledger, dataset=dataset, job_id=job_id)
    caveats: tuple[str, ...] = ()
    if read_from_file and model.privacy_report_.private:
        caveats = _file_shape_caveat()
    if mask is not None and model.privacy_report_.private:
        caveats += (f"the columns analysed (mask_var={mask_name!r}) are taken as public input; a mask computed from "
                    "these rows (highly variable genes of the same cells) is not covered by this guarantee",)
    projected = model.transform(data)
    if hasattr(projected, "compute"):  # a store or a dask array: computed here, one pass over the rows
        projected = projected.compute()
    obsm_key, varm_key, uns_key = (key_added, key_added, key_added) if key_added else ("X_pca", "PCs", "pca")
    adata.obsm[obsm_key] = np.asarray(projected, dtype=np.float64)
    loadings = np.ascontiguousarray(model.components_.T)
    if mask is not None:  # scanpy's layout: a row per variable, zeros for those left out
        full = np.zeros((mask.size, loadings.shape[1]), dtype=np.float64)
        full[mask] = loadings
        loadings = full
    adata.varm[varm_key] = loadings
    adata.uns[uns_key] = _uns_entry(model, layer=layer, key_added=key_added, caveats=caveats)
    if mask is not None:
        adata.uns[uns_key]["params"].update({"mask_var": mask_name, "use_highly_variable": mask_name == HVG})
    if opened or copy:
        return adata
    return None


def _n_comps(n_components: Any, n_comps: Any) -> Any:
    """``n_components``, or scanpy's ``n_comps`` (the same number when both are given)."""
    if n_comps is None:
        return n_components
    if n_components not in (1, n_comps):
        raise InvalidParameterError(f"n_components={n_components!r} and n_comps={n_comps!r} differ; give one of them")
    return n_comps


def _mask(adata: Any, mask_var: Any, use_highly_variable: bool | None) -> tuple[np.ndarray | None, str | None]:
    """The boolean mask of the columns to analyse and its name (``None``: every column), as scanpy chooses it."""
    if use_highly_variable is not None and mask_var is not _DEFAULT_MASK:
        raise InvalidParameterError("give mask_var or use_highly_variable, not both (use_highly_variable=True is "
                                    "mask_var='highly_variable')")
    if use_highly_variable is not None:
        if not isinstance(use_highly_variable, (bool, np.bool_)):
            raise InvalidParameterError(f"use_highly_variable must be True or False; got {use_highly_variable!r}")
        mask_var = HVG if use_highly_variable else None
        if use_highly_variable and HVG not in adata.var:
            raise InvalidParameterError("use_highly_variable=True but var has no 'highly_variable' column; run "
                                        "sc.pp.highly_variable_genes first, or drop use_highly_variable")
    if mask_var is _DEFAULT_MASK:
        mask_var = HVG if HVG in adata.var else None
    if mask_var is None:
        return None, None
    if isinstance(mask_var, str):
        if mask_var not in adata.var:
            raise InvalidParameterError(f"mask_var={mask_var!r} is not a column of var; give a boolean var column "
                                        "or a boolean array")
        values, name = np.asarray(adata.var[mask_var]), mask_var
    else:
        values, name = np.asarray(mask_var), "array"
    if values.dtype != bool or values.shape != (adata.n_vars,):
        raise InvalidParameterError(f"mask_var must be booleans, one per variable ({adata.n_vars}); got "
                                    f"{values.dtype} of shape {values.shape}")
    if not values.any():
        raise InvalidParameterError("mask_var selects no variable; select at least one")
    return values, name


def _is_dask(data: Any) -> bool:
    import dask.array as da

    return isinstance(data, da.Array)


def _file_shape_caveat() -> tuple[str, ...]:
    """A file's X (or layer) read directly has the shape of the data, as an ingested store without a declared
    schema: every output's length reveals it, which the guarantee does not cover (DESIGN.md, invariant 9)."""
    import warnings

    from dppca_dask.coordinator.sources import INFERRED_SCHEMA_CAVEAT
    from dppca_dask.errors import InferredSchemaWarning

    warnings.warn(
        "the number of columns was read from the AnnData file, and every release reveals it, which the privacy "
        "guarantee does not cover; ingest with `dppca-dask ingest FILE --out STORE --n-features D` to declare it as "
        "public input",
        InferredSchemaWarning,
        stacklevel=3,
    )
    return (INFERRED_SCHEMA_CAVEAT,)


def _import_anndata() -> Any:
    from dppca_dask.ingest.adata import import_anndata

    return import_anndata()


def _matrix(adata: Any, layer: str | None) -> Any:
    """The matrix to analyse: in memory as it is, or for a backed ``X`` a lazy Dask array read from the file."""
    if layer is not None:
        if layer not in adata.layers:
            names = ", ".join(sorted(adata.layers.keys())) or "none"
            raise InvalidParameterError(f"adata has no layer {layer!r}; its layers: {names}; pass one of them or "
                                        "layer=None for X")
        return adata.layers[layer]
    if adata.isbacked:
        from dppca_dask.ingest.adata import anndata_dask

        return anndata_dask(adata.filename)
    if adata.X is None:
        raise InvalidParameterError("adata.X is None; pass layer= to analyse a layer")
    return adata.X


def _open_path(anndata: Any, path: str, layer: str | None, storage_options: Any = None) -> tuple[Any, Any]:
    """Open an ``.h5ad`` file (backed) or a ``.zarr`` store without loading ``X``; return it and the matrix."""
    from dppca_dask._urls import is_url
    from dppca_dask.ingest._common import require_file
    from dppca_dask.ingest.adata import anndata_dask

    if is_url(path):  # a store in object storage: its own partitions, read by the workers
        from dppca_dask.storage import open_matrix

        store = open_matrix(path, storage_options=storage_options)
        group = store.open_group()
        frames = {axis: anndata.io.read_elem(group[axis]) for axis in ("obs", "var") if axis in group}
        return anndata.AnnData(obs=frames.get("obs"), var=frames.get("var")), store
    if storage_options is not None:
        raise InvalidParameterError(f"storage_options apply to a store URL (s3://...); '{path}' is a local path")
    path = require_file(path)
    if not os.path.isdir(path):
        matrix = anndata_dask(path, layer=layer)  # refuses a file that is not HDF5 (truncated, another format)
        try:
            adata = anndata.read_h5ad(path, backed="r")
        except OSError as exc:  # HDF5 that h5py opens but AnnData cannot read (a damaged .h5ad)
            from dppca_dask.errors import InvalidInputError

            raise InvalidInputError(f"'{path}' cannot be read as an AnnData .h5ad file ({exc}); it is damaged or "
                                    "truncated: write it again", source=path) from exc
        return adata, matrix
    import zarr

    group = zarr.open_group(path, mode="r")
    frames = {axis: anndata.io.read_elem(group[axis]) for axis in ("obs", "var") if axis in group}
    data: Any = None
    if layer is None:
        from dppca_dask.storage import open_matrix

        try:  # a dppca_dask store or an AnnData store with a CSR or dense X: its own row partitions
            data = open_matrix(path)
        except Exception:  # noqa: BLE001 - anything else (e.g. CSC): read row blocks, which names the problem
            data = None
    if data is None:
        data = anndata_dask(path, layer=layer)
    n_rows, n_cols = (int(v) for v in data.shape)
    obs = frames.get("obs")
    var = frames.get("var")
    adata = anndata.AnnData(obs=obs if obs is not None and len(obs) == n_rows else None,
                            var=var if var is not None and len(var) == n_cols else None,
                            shape=None if obs is not None and var is not None else (n_rows, n_cols))
    return adata, data


def _uns_entry(model: Any, *, layer: str | None, key_added: str | None,
               caveats: tuple[str, ...] = ()) -> dict[str, Any]:
    """``uns["pca"]`` as scanpy lays it out (``params``, ``variance``, ``variance_ratio``) plus the privacy report
    and the diagnostics."""
    entry: dict[str, Any] = {
        "params": {
            "zero_center": hasattr(model, "mean_"),
            "use_highly_variable": False,
            "mask_var": "None",
            "layer": "None" if layer is None else layer,
            "n_comps": int(model.n_components_),
            "mechanism": model._mechanism(),
            "epsilon": float(model.epsilon),
            "delta": float(model.delta),
            "row_norm_bound": float(model.row_norm_bound),
            **({"key_added": key_added} if key_added else {}),
        },
        "privacy": _storable(model.privacy_report_.to_dict() if hasattr(model.privacy_report_, "to_dict")
                             else dict(model.privacy_report_)),
    }
    if caveats:
        known = entry["privacy"].get("caveats")
        entry["privacy"]["caveats"] = np.asarray(
            [*([] if known is None or not len(known) else list(known)), *caveats], dtype=object)
    if hasattr(model, "explained_variance_"):
        entry["variance"] = np.asarray(model.explained_variance_, dtype=np.float64)
    if hasattr(model, "explained_variance_ratio_"):
        entry["variance_ratio"] = np.asarray(model.explained_variance_ratio_, dtype=np.float64)
    if getattr(model, "diagnostics_", None) is not None:
        entry["diagnostics"] = _storable(model.diagnostics_.to_dict())
    return entry


def _storable(value: Any) -> Any:
    """A value AnnData can write to ``.h5ad`` and ``.zarr`` (no ``None``, no mixed lists, no infinite JSON)."""
    if isinstance(value, Mapping):
        return {str(k): _storable(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        items = [_storable(v) for v in value if v is not None]
        if items and all(isinstance(v, (bool, np.bool_)) for v in items):
            return np.asarray(items, dtype=bool)
        if items and all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
                         for v in items):
            return np.asarray(items, dtype=np.float64)
        if all(isinstance(v, str) for v in items):
            return np.asarray(items, dtype=object) if items else np.asarray([], dtype=np.float64)
        return {str(i): v for i, v in enumerate(items)}
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return value
