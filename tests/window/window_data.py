"""Data of the sliding-window tests: daily blocks, timestamps, labels, clipping."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from dppca_dask.ingest import ingest
from dppca_dask.storage import MatrixStore, append_partition

D = 6
ROWS_PER_DAY = 40


def day(n: int) -> float:
    """Midnight UTC of 2026-11-n as POSIX seconds."""
    return _dt.datetime(2026, 11, n, tzinfo=_dt.timezone.utc).timestamp()


def day_block(n: int, rows: int = ROWS_PER_DAY) -> sp.csr_array:
    """Day n's rows: sparse, some with norm above 1 (so clipping matters)."""
    rng = np.random.default_rng(1000 + n)
    dense = rng.standard_normal((rows, D)) * (rng.random((rows, D)) < 0.6)
    dense *= rng.uniform(0.2, 2.0, (rows, 1))
    return sp.csr_array(dense)




def day_labels(n: int, rows: int = ROWS_PER_DAY) -> np.ndarray:
    block = day_block(n, rows).toarray()
    return block @ np.linspace(-1, 1, D) * 0.5 + 0.01 * np.random.default_rng(n).standard_normal(rows)


def _labels(store: MatrixStore, n: int) -> None:
    import zarr

    from dppca_dask.storage import open_matrix

    arr = zarr.open_group(store.path, mode="r+")["labels"]
    start = (n - 1) * ROWS_PER_DAY
    arr.resize((start + ROWS_PER_DAY,))
    arr[start:] = day_labels(n)
    zarr.consolidate_metadata(store.path)  # nodes changed with zarr: consolidated again
    del open_matrix


def clipped(block: np.ndarray, c: float = 1.0) -> np.ndarray:
    norms = np.linalg.norm(block, axis=1)
    return block * np.minimum(1.0, c / np.where(norms > 0, norms, np.inf))[:, None]


def count_reads(monkeypatch) -> list[int]:  # noqa: ANN001
    """The partition indices read from the store from now on, in order (the window's Gram tasks and the
    coordinator's loaders both call ``load_store_partition``)."""
    from dppca_dask.coordinator import sources
    from dppca_dask.methods.window import gram as gram_module

    reads: list[int] = []
    original = sources.load_store_partition

    def counting(store, index):  # noqa: ANN001, ANN202
        reads.append(index)
        return original(store, index)

    monkeypatch.setattr(sources, "load_store_partition", counting)
    monkeypatch.setattr(gram_module, "load_store_partition", counting)
    return reads
