"""In-memory matrices (scipy.sparse, numpy) and the files that hold them (``.npz`` from ``scipy.sparse.save_npz``,
``.npy``).

All three go through :func:`dppca_dask.storage.write_matrix`, one partition at a time. Memory: an in-memory matrix
is already in memory, and validation copies one partition at a time; a ``.npy`` file is memory-mapped, so only one
partition is read at a time (a dense store is written); a ``.npz`` file is compressed and is loaded whole.
"""

from __future__ import annotations

import logging
import os
import time
import zipfile
from collections.abc import Mapping
from typing import Any

import numpy as np
import scipy.sparse as sp

from dppca_dask.errors import InvalidInputError
from dppca_dask.ingest._common import IngestOptions, partition_rows, require_file
from dppca_dask.storage import MatrixStore, write_matrix
from dppca_dask.storage.validate import check_sparse_structure

__all__ = ["ingest_array", "ingest_npy", "ingest_npz"]

log = logging.getLogger(__name__)


def ingest_array(matrix: Any, options: IngestOptions, *, source: Mapping[str, Any] | None = None,
                 name: str | None = None) -> MatrixStore:
    """Write a scipy sparse matrix (CSR store) or a 2-D numpy array (dense store) to a new store.

    ``name`` identifies the matrix in error messages (a file name).
    """
    start = time.perf_counter()
    if not sp.issparse(matrix):
        matrix = np.asarray(matrix)
        if not (np.issubdtype(matrix.dtype, np.number) or matrix.dtype == np.bool_) or np.iscomplexobj(matrix):
            raise InvalidInputError(
                f"values must be real numbers; got dtype {matrix.dtype}" + (f" in '{name}'" if name else "")
                + ": convert the array to float first",
                source=name,
            )
    if matrix.ndim != 2:
        raise InvalidInputError(
            f"expected a 2-D matrix; got shape {tuple(matrix.shape)}" + (f" in '{name}'" if name else "")
            + ": reshape it to (rows, columns)",
            source=name,
        )
    dtype = options.value_dtype(matrix.dtype)
    n_rows, n_cols = (int(s) for s in matrix.shape)
    options.check_width(n_cols, source=name or "the input matrix")
    options.check_size(n_rows=n_rows, n_cols=n_cols, nnz=int(matrix.nnz) if sp.issparse(matrix) else None,
                       layout="csr" if sp.issparse(matrix) else "dense", value_bytes=dtype.itemsize,
                       source=name or "the input matrix")
    if options.rows_per_partition is not None:
        rows = options.rows_per_partition
    elif sp.issparse(matrix):
        rows = partition_rows(n_rows=n_rows, row_bytes=matrix.nnz * (dtype.itemsize + 4) / max(n_rows, 1))
    else:
        rows = partition_rows(n_rows=n_rows, row_bytes=n_cols * dtype.itemsize)
    if not sp.issparse(matrix) and matrix.dtype == np.bool_:
        matrix = matrix.astype(dtype)
    store = write_matrix(
        options.out,
        matrix,
        rows_per_partition=rows,
        dtype=dtype,
        on_duplicate=options.on_duplicate,
        overwrite=options.overwrite,
        source=dict(source or {"kind": "in-memory", "type": type(matrix).__name__}),
        schema=options.schema,
        codec=options.codec,
        nnz_chunk=options.nnz_chunk,
    )
    log.info("ingested %s: %d x %d, %d entries, %d partitions in %.1f s", name or "a matrix", store.n_rows,
             store.n_cols, store.nnz, store.n_partitions, time.perf_counter() - start)
    return store


def ingest_npz(path: str | os.PathLike[str], options: IngestOptions) -> MatrixStore:
    """Ingest a ``.npz`` file written by ``scipy.sparse.save_npz`` (loaded into memory whole)."""
    path = require_file(path)
    try:
        matrix = sp.load_npz(path)
    except (ValueError, KeyError, OSError, zipfile.BadZipFile) as exc:
        raise InvalidInputError(
            f"'{path}' is not a scipy.sparse .npz file ({type(exc).__name__}: {exc}); write it with "
            "scipy.sparse.save_npz, or save a dense array with numpy.save as .npy",
            source=path,
        ) from exc
    check_sparse_structure(matrix, source=path)  # a malformed indptr must not reach scipy's compiled routines
    return ingest_array(matrix, options, source={"kind": "npz", "path": path}, name=path)


def ingest_npy(path: str | os.PathLike[str], options: IngestOptions) -> MatrixStore:
    """Ingest a 2-D ``.npy`` array (memory-mapped: read one partition at a time) into a dense store."""
    path = require_file(path)
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise InvalidInputError(
            f"'{path}' is not a numeric .npy file ({type(exc).__name__}: {exc}); save the matrix with numpy.save",
            source=path,
        ) from exc
    return ingest_array(array, options, source={"kind": "npy", "path": path}, name=path)
