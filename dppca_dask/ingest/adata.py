"""AnnData files: ``.zarr`` directories (zarr format 2 or 3) and ``.h5ad`` files. Needs the ``anndata`` extra.

``X`` is read in row blocks and written to a new store; the observation and variable names (``obs`` and ``var``
indexes) are stored as the id maps ``obs_ids`` and ``var_ids``. Memory behaviour by encoding of ``X``:

- ``csr_matrix``: blocks of rows read with ``anndata.io.sparse_dataset`` (about 4 M entries at a time);
- dense array: blocks of rows sliced from the array (about 64 MiB at a time);
- ``csc_matrix``: blocks of columns (about 4 M entries at a time) whose entries are bucketed by row partition in
  spill files beside the output, then each partition's rows are assembled; memory stays bounded whatever the size
  of ``X`` (disk: 16 bytes per entry, removed afterwards).

The id maps are held in memory (one string per row and per column). ``layer=`` reads ``layers/NAME`` instead of
``X``. :func:`anndata_dask` opens ``X`` (or a layer) of an ``.h5ad`` file or AnnData ``.zarr`` store as a lazy Dask
array of row blocks, each read and checked on the worker that uses it, for analyses without an ingest.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.errors import InvalidInputError, InvalidParameterError
from dppca_dask.ingest._common import IngestOptions, MissingExtraError, partition_rows, require_file, spill_directory
from dppca_dask.ingest._spill import RowBuckets
from dppca_dask.storage import MatrixStore, StoreWriter
from dppca_dask.storage.validate import check_csr_arrays

__all__ = ["anndata_dask", "check_layer", "import_anndata", "ingest_anndata"]

log = logging.getLogger(__name__)

#: Stored entries read per block of rows or columns.
BLOCK_NNZ = 4 * 2**20
#: Bytes of a dense block of rows.
BLOCK_BYTES = 64 * 2**20


def import_anndata() -> Any:
    """Import ``anndata``, or raise :class:`MissingExtraError` naming the extra that provides it."""
    try:
        import anndata
    except ImportError as exc:
        raise MissingExtraError(
            "reading AnnData files needs the optional dependency 'anndata', which is not installed; install it with "
            "`pip install 'dppca-dask[anndata]'`"
        ) from exc
    return anndata


def ingest_anndata(path: str | os.PathLike[str], options: IngestOptions, *, layer: str | None = None) -> MatrixStore:
    """Ingest ``X`` (or ``layers/<layer>``) of an AnnData ``.zarr`` store or ``.h5ad`` file into a new store (CSR,
    or dense for dense X).

    Raises
    ------
    MissingExtraError
        ``anndata`` is not installed.
    InvalidInputError
        Not an AnnData file, no ``X``, an unsupported encoding, NaN or infinite values (naming partition and row).
    """
    anndata = import_anndata()
    path = require_file(path)
    start = time.perf_counter()
    with _open_root(path) as root:
        x = _element(root, path, layer)
        encoding = _attr(x, "encoding-type")
        source = {"kind": "anndata", "path": path, "encoding": encoding, **({"layer": layer} if layer else {})}
        ids = {name: _names(anndata, root, key) for name, key in (("obs_ids", "obs"), ("var_ids", "var"))}
        if encoding in ("csr_matrix", "csc_matrix"):
            matrix = anndata.io.sparse_dataset(x)
            if encoding == "csr_matrix":
                store = _ingest_csr(matrix, path, options, source, ids)
            else:
                store = _ingest_csc(matrix, x, path, options, source, ids)
        elif _is_array(x) and len(x.shape) == 2:
            store = _ingest_dense(x, path, options, source, ids)
        else:
            raise InvalidInputError(
                f"'X' in '{path}' has encoding-type {encoding!r}; supported: csr_matrix, csc_matrix, or a dense "
                "2-D array",
                source=path,
            )
    log.info("ingested %s: %d x %d, %d entries, %d partitions in %.1f s", path, store.n_rows, store.n_cols,
             store.nnz, store.n_partitions, time.perf_counter() - start)
    return store


def check_layer(path: str | os.PathLike[str], layer: str | None) -> None:
    """Check that the AnnData file at ``path`` has ``layers/<layer>`` (``X`` when ``layer`` is ``None``), as
    :func:`ingest_anndata` checks it and with its message; the file is opened read-only and no matrix is read (the
    layer names are the file's schema).

    Raises
    ------
    MissingExtraError
        ``anndata`` is not installed (the ingest would refuse the file for that first).
    InvalidInputError
        Not an AnnData file, or no such layer (naming the file's layers).
    InvalidParameterError
        ``layer`` is not a layer name.
    """
    import_anndata()
    path = require_file(path)
    with _open_root(path) as root:
        _element(root, path, layer)


def _element(root: Any, path: str, layer: str | None) -> Any:
    """``X``, or ``layers/<layer>`` when a layer is named."""
    if layer is None:
        if "X" not in root:
            raise InvalidInputError(f"AnnData file '{path}' has no 'X' matrix; nothing to read", source=path)
        return root["X"]
    if not isinstance(layer, str) or not layer or "/" in layer:
        raise InvalidParameterError(f"layer must be the name of a layer (a non-empty string without '/'); "
                                    f"got {layer!r}")
    layers = sorted(root["layers"].keys()) if "layers" in root else []
    if layer not in layers:
        raise InvalidInputError(f"AnnData file '{path}' has no layer {layer!r}; its layers: "
                                f"{', '.join(layers) or 'none'}; pass one of them or layer=None for X", source=path)
    return root["layers"][layer]


def anndata_dask(path: str | os.PathLike[str], *, layer: str | None = None,
                 rows_per_block: int | None = None) -> Any:
    """``X`` (or ``layers/<layer>``) of an AnnData ``.h5ad`` file or ``.zarr`` store as a lazy Dask array.

    Each block of rows is read when computed, by the task that needs it (the file is reopened there, so workers
    must see the same path), and checked as :func:`ingest_anndata` checks it (monotone row pointers inside the
    stored entries, indices inside the width, sorted and unique) before scipy builds it; NaN and infinite values
    are refused by the analysis that reads the block. Blocks of a ``csr_matrix`` are ``scipy.sparse.csr_array``
    of about :data:`BLOCK_NNZ` entries; dense blocks are about :data:`BLOCK_BYTES`. A ``csc_matrix`` has no cheap
    row blocks: ingest it (``dppca-dask ingest``), which handles it in bounded memory.

    Raises
    ------
    MissingExtraError
        ``anndata`` is not installed.
    InvalidParameterError
        ``layer`` or ``rows_per_block`` is invalid.
    InvalidInputError
        Not an AnnData file, no such layer, an unsupported encoding, a malformed sparse structure.
    """
    import dask
    import dask.array as da

    import_anndata()
    path = require_file(path)
    if rows_per_block is not None and (isinstance(rows_per_block, bool) or not isinstance(rows_per_block, int)
                                       or rows_per_block < 1):
        raise InvalidParameterError(f"rows_per_block must be a positive integer or None; got {rows_per_block!r}")
    with _open_root(path) as root:
        x = _element(root, path, layer)
        encoding = _attr(x, "encoding-type")
        if encoding == "csr_matrix":
            n_rows, n_cols = (int(v) for v in x.attrs["shape"])
            nnz = _check_pointers(x, n_rows, path, "row")
            dtype = np.dtype(x["data"].dtype)
            step = rows_per_block or min(max(BLOCK_NNZ * n_rows // max(nnz, 1), 1), 2**20)
            sparse = True
        elif encoding == "csc_matrix":
            raise InvalidInputError(
                f"'{_name(layer)}' in '{path}' is a csc_matrix (column-compressed), which has no cheap row blocks; "
                f"ingest it first: `dppca-dask ingest {path} --out STORE`" + (f" (layer {layer!r})" if layer else ""),
                source=path,
            )
        elif _is_array(x) and len(x.shape) == 2:
            n_rows, n_cols = (int(v) for v in x.shape)
            dtype = np.dtype(x.dtype)
            step = rows_per_block or max(BLOCK_BYTES // max(n_cols * dtype.itemsize, 1), 1)
            nnz, sparse = 0, False
        else:
            raise InvalidInputError(
                f"'{_name(layer)}' in '{path}' has encoding-type {encoding!r}; supported: csr_matrix or a dense "
                "2-D array",
                source=path,
            )
    if dtype.kind not in "fiub":
        raise InvalidInputError(f"'{_name(layer)}' in '{path}' has dtype {dtype}; expected numbers", source=path)
    out_dtype = dtype if dtype.kind == "f" else np.dtype(np.float64)
    meta = sp.csr_array((0, n_cols), dtype=out_dtype) if sparse else np.empty((0, n_cols), dtype=out_dtype)
    blocks = [
        da.from_delayed(dask.delayed(_read_block, pure=True)(path, layer, r0, min(r0 + step, n_rows), nnz, n_cols,
                                                             sparse),
                        shape=(min(r0 + step, n_rows) - r0, n_cols), dtype=out_dtype, meta=meta)
        for r0 in range(0, n_rows, step)
    ]
    if not blocks:
        return da.zeros((0, n_cols), dtype=out_dtype)
    return da.concatenate(blocks, axis=0)


def _name(layer: str | None) -> str:
    return "X" if layer is None else f"layers/{layer}"


def _read_block(path: str, layer: str | None, r0: int, r1: int, nnz: int, n_cols: int, sparse: bool) -> Any:
    """Rows ``r0:r1`` of ``X`` or a layer, read from the file and checked (runs where the block is needed)."""
    with _open_root(path) as root:
        x = _element(root, path, layer)
        if sparse:
            block: Any = _read_compressed(x, r0, r1, nnz=nnz, n_minor=n_cols, path=path, axis="row")
        else:
            block = np.asarray(x[r0:r1])
    if block.dtype.kind != "f":
        block = block.astype(np.float64)
    return block


@contextlib.contextmanager
def _open_root(path: str) -> Iterator[Any]:
    if os.path.isdir(path):
        import zarr

        try:
            group = zarr.open_group(path, mode="r")
        except Exception as exc:
            raise InvalidInputError(f"'{path}' is not a zarr group ({type(exc).__name__}: {exc}); expected an "
                                    "AnnData .zarr store", source=path) from exc
        yield group
        return
    import h5py

    try:
        handle = h5py.File(path, "r")
    except OSError as exc:
        raise InvalidInputError(f"'{path}' is not an HDF5 file ({exc}); expected an AnnData .h5ad file",
                                source=path) from exc
    with handle:
        yield handle


def _attr(node: Any, key: str) -> str | None:
    value = node.attrs.get(key)
    return value.decode() if isinstance(value, bytes) else value


def _is_array(node: Any) -> bool:
    import zarr

    if isinstance(node, zarr.Array):
        return True
    try:
        import h5py
    except ImportError:  # pragma: no cover - h5py is a dependency of anndata
        return False
    return isinstance(node, h5py.Dataset)


def _names(anndata: Any, root: Any, key: str) -> np.ndarray | None:
    """The index of ``obs`` or ``var`` (observation or variable names), if the file has one."""
    if key not in root:
        return None
    frame = root[key]
    index = _attr(frame, "_index")
    if index is None or index not in frame:
        return None
    return np.asarray(anndata.io.read_elem(frame[index])).astype(object)


def _finish(writer: StoreWriter, ids: dict[str, np.ndarray | None], n_rows: int, n_cols: int) -> MatrixStore:
    stored = {}
    for name, values in ids.items():
        if values is not None and values.size == (n_rows if name == "obs_ids" else n_cols):
            writer.write_array(name, values)
            stored[name] = "obs index" if name == "obs_ids" else "var index"
    if stored:
        writer.set_attribute("id_maps", stored)
    return writer.commit()


def _check_pointers(group: Any, n_major: int, path: str, axis: str) -> int:
    """Check the length of ``indptr`` and the lengths of ``data``/``indices``; return the number of entries."""
    n_ptr, n_data, n_indices = (int(group[name].shape[0]) for name in ("indptr", "data", "indices"))
    if n_ptr != n_major + 1 or n_data != n_indices:
        raise InvalidInputError(
            f"malformed sparse structure in 'X' of '{path}': {n_ptr} row pointers for {n_major} {axis}s (expected "
            f"{n_major + 1}), {n_data} values and {n_indices} indices (must match); rebuild the file from its source",
            source=path,
        )
    return n_data


def _read_compressed(group: Any, start: int, stop: int, *, nnz: int, n_minor: int, path: str,
                     axis: str) -> sp.csr_array:
    """Rows (or columns) ``start:stop`` of a compressed matrix, read raw and checked before scipy sees them.

    anndata's own slicing trusts ``indptr``: a decreasing or out-of-range pointer crashes or reads garbage. Here
    the pointers are checked to be monotone and inside ``[0, nnz]`` before any value is read, and the block's
    structure (:func:`check_csr_arrays`) before it is built. For CSC input (``axis="column"``) the result is the
    transposed block (columns as rows).
    """
    ptr = np.asarray(group["indptr"][start : stop + 1]).astype(np.int64, copy=False)
    steps = np.diff(ptr)
    if (start == 0 and ptr[0] != 0) or ptr[0] < 0 or ptr[-1] > nnz or (steps.size and steps.min() < 0):
        bad = start + (int(np.argmax(steps < 0)) if steps.size and steps.min() < 0 else 0)
        raise InvalidInputError(
            f"malformed sparse structure in 'X' of '{path}': the {axis} pointers are not increasing within "
            f"[0, {nnz}] at {axis} {bad}; rebuild the file from its source",
            source=path,
            row=bad if axis == "row" else None,
        )
    lo, hi = int(ptr[0]), int(ptr[-1])
    data = np.asarray(group["data"][lo:hi])
    indices = np.asarray(group["indices"][lo:hi])
    local = ptr - lo
    check_csr_arrays(local, indices, data, n_rows=stop - start, n_cols=n_minor, source=path, first_row=start,
                     axis=axis)
    return sp.csr_array((data, indices, local), shape=(stop - start, n_minor))


def _ingest_csr(matrix: Any, path: str, options: IngestOptions, source: dict[str, Any],
                ids: dict[str, np.ndarray | None]) -> MatrixStore:
    n_rows, n_cols = (int(s) for s in matrix.shape)
    group = matrix.group
    nnz = _check_pointers(group, n_rows, path, "row")
    step = min(max(BLOCK_NNZ * n_rows // max(nnz, 1), 1), 2**20)
    with options.writer(n_cols=n_cols, dtype=options.value_dtype(matrix.dtype), source=source,
                        n_rows=n_rows) as writer:
        for r0 in range(0, n_rows, step):
            r1 = min(r0 + step, n_rows)
            writer.append(_read_compressed(group, r0, r1, nnz=nnz, n_minor=n_cols, path=path, axis="row"),
                          source=path)
        return _finish(writer, ids, n_rows, n_cols)


def _ingest_dense(array: Any, path: str, options: IngestOptions, source: dict[str, Any],
                  ids: dict[str, np.ndarray | None]) -> MatrixStore:
    n_rows, n_cols = (int(s) for s in array.shape)
    step = max(BLOCK_BYTES // max(n_cols * array.dtype.itemsize, 1), 1)
    with options.writer(n_cols=n_cols, dtype=options.value_dtype(array.dtype), source=source, n_rows=n_rows,
                        layout="dense") as writer:
        for r0 in range(0, n_rows, step):
            writer.append(np.asarray(array[r0 : r0 + step]), source=path)
        return _finish(writer, ids, n_rows, n_cols)


def _ingest_csc(matrix: Any, group: Any, path: str, options: IngestOptions, source: dict[str, Any],
                ids: dict[str, np.ndarray | None]) -> MatrixStore:
    n_rows, n_cols = (int(s) for s in matrix.shape)
    stored = _check_pointers(group, n_cols, path, "column")
    indptr = np.asarray(group["indptr"][:]).astype(np.int64, copy=False)
    nnz = int(indptr[-1])
    steps = np.diff(indptr)
    if indptr[0] != 0 or nnz != stored or (steps.size and steps.min() < 0):
        raise InvalidInputError(
            f"malformed sparse structure in 'X' of '{path}': the column pointers must increase from 0 to the {stored} "
            "stored entries; rebuild the file from its source",
            source=path,
        )
    dtype = options.value_dtype(matrix.dtype)
    spill_dtype = np.dtype(np.float32) if matrix.dtype == np.float32 else np.dtype(np.float64)
    rpp = partition_rows(n_rows=n_rows, row_bytes=nnz * (dtype.itemsize + 4) / max(n_rows, 1),
                         rows_per_partition=options.rows_per_partition)
    # Column blocks of about BLOCK_NNZ entries (at least one column each).
    cuts = np.unique(np.concatenate(([0], np.searchsorted(indptr, np.arange(BLOCK_NNZ, nnz, BLOCK_NNZ)), [n_cols])))
    with spill_directory(options.out) as spill, options.writer(
        n_cols=n_cols, dtype=dtype, source=source, n_rows=n_rows, rows_per_partition=rpp
    ) as writer:
        buckets = RowBuckets(spill, n_rows=n_rows, n_cols=n_cols, rows_per_partition=rpp, dtype=spill_dtype)
        with options.bar(total=n_cols, desc="columns", unit="cols") as bar:
            for c0, c1 in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
                block = sp.coo_array(_read_compressed(group, c0, c1, nnz=nnz, n_minor=n_rows, path=path,
                                                      axis="column"))  # columns as rows
                buckets.add(block.coords[1].astype(np.int64), block.coords[0].astype(np.int64) + c0, block.data)
                bar.update(c1 - c0)
        for rows in buckets.blocks(on_duplicate=options.on_duplicate, source=path):
            writer.append(rows, source=path)
        return _finish(writer, ids, n_rows, n_cols)
