"""Opening an entry point's input: an AnnData file or layer read directly (lazily, in row blocks), and the caveat
such a file's width carries."""

from __future__ import annotations

import warnings
from typing import Any

from dppca_dask.errors import InvalidParameterError

__all__ = ["file_shape_caveat", "open_input"]


def open_input(data: Any, layer: str | None, storage_options: Any = None) -> tuple[Any, bool]:
    """``data`` as :func:`~dppca_dask.coordinator.as_source` takes it, and whether it is read from an AnnData file
    directly (an ``.h5ad`` file, or a layer of an AnnData file or store): then a lazy Dask array of row blocks, read
    in bounded memory."""
    import os

    if layer is not None and (not isinstance(layer, str) or not layer):
        raise InvalidParameterError(f"layer must be a non-empty string or None; got {layer!r}")
    from dppca_dask._urls import filesystem, is_url, local_path

    data = local_path(data)  # a file:// URL is the local path it names
    if isinstance(data, (str, os.PathLike)):
        path = os.fspath(data)
        if is_url(path):
            filesystem(path, storage_options)  # a scheme whose package is missing is named here, before anything runs
            if path.lower().endswith(".h5ad"):
                raise InvalidParameterError(
                    f"'{path}': an .h5ad file is read from a local or mounted path (HDF5 needs random access to a "
                    "file); download it first, or ingest it into a store and give the store's URL")
        if path.lower().endswith(".h5ad") or layer is not None:
            from dppca_dask.ingest.adata import anndata_dask

            return anndata_dask(path, layer=layer), True
    elif layer is not None:
        raise InvalidParameterError(
            f"layer={layer!r} names a layer of an AnnData file; give the path of an .h5ad file or AnnData .zarr "
            f"store as data (got {type(data).__name__}), or pass the layer's matrix itself")
    return data, False


def file_shape_caveat() -> tuple[str, ...]:
    """An AnnData file read directly has the width of its data, as a store ingested without a declared schema:
    every output's length reveals it, which the guarantee does not cover (DESIGN.md, invariant 9)."""
    from dppca_dask.coordinator.sources import INFERRED_SCHEMA_CAVEAT
    from dppca_dask.errors import InferredSchemaWarning

    warnings.warn(
        "the number of columns was read from the AnnData file, and every release reveals it, which the privacy "
        "guarantee does not cover; ingest with `dppca-dask ingest FILE --out STORE --n-features D` to declare it as "
        "public input",
        InferredSchemaWarning,
        stacklevel=4,
    )
    return (INFERRED_SCHEMA_CAVEAT,)
