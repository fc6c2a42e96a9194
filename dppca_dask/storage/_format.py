"""On-disk format of a dppca_dask matrix store (format version 1).

A store is a zarr v3 group::

    STORE/                    group; attribute "dppca_dask" holds the metadata below (the commit point)
      X/                      the matrix in AnnData's on-disk encoding:
        data, indices, indptr   csr_matrix (encoding-type "csr_matrix", encoding-version "0.1.0", shape), or
      X                       a dense 2-D array (encoding-type "array", encoding-version "0.2.0")
      row_norms               float64, one L2 norm per row, computed at ingest
      obs_ids, var_ids        optional id maps (warehouse ids of rows and columns, in matrix order)

The ``dppca_dask`` attribute of the root group is the single source of truth: ``format_version``, ``layout``,
``n_rows``, ``n_cols``, ``nnz``, ``dtype``, the partition table (row range, nnz range and optional timestamp of each
partition), ``store_id`` (random, assigned at creation) and ``generation`` (incremented by every append). Arrays may
be longer than the committed extents after an interrupted append; readers only look inside the committed extents and
writers trim the rest before writing.

Fill values are chosen so that valid data never contains them (``NaN`` for values and norms, ``-1`` for indices and
``indptr``): zarr returns the fill value for a chunk that is missing on disk, so a reader detects a lost chunk by
checking one element per chunk instead of silently reading it as zeros.
"""

from __future__ import annotations

import zarr.codecs

#: Version of the layout above. Readers refuse other versions.
FORMAT_VERSION = 1
#: Root-group attribute holding the store metadata.
ATTR_KEY = "dppca_dask"

#: Elements per chunk of the 1-D arrays ``data`` and ``indices`` (256 Ki elements: 1-2 MiB per chunk).
NNZ_CHUNK = 2**18
#: Largest chunk (in rows) of the per-row arrays ``indptr`` and ``row_norms``.
MAX_ROW_CHUNK = 2**20
#: Rows per chunk of per-row arrays when partitions are larger than ``MAX_ROW_CHUNK``.
LARGE_ROW_CHUNK = 2**18
#: Target size of a dense chunk in bytes.
DENSE_CHUNK_BYTES = 16 * 2**20

#: Default target size of one row partition (one Dask task) in bytes of stored values, indices and row pointers.
TARGET_PARTITION_BYTES = 128 * 2**20
#: Partitions chosen automatically stay within these bounds (bytes).
MIN_PARTITION_BYTES = 64 * 2**20
MAX_PARTITION_BYTES = 256 * 2**20

CSR_ENCODING = {"encoding-type": "csr_matrix", "encoding-version": "0.1.0"}
DENSE_ENCODING = {"encoding-type": "array", "encoding-version": "0.2.0"}


def compressors() -> list[zarr.codecs.BloscCodec]:
    """Blosc lz4 with byte shuffle: the fastest codec to write and read in our measurements."""
    return [zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")]
