"""Helpers shared by the ingestion tests: seeded matrices with the awkward cases, and store comparisons."""

from __future__ import annotations

import os

import numpy as np
import scipy.sparse as sp

#: Rows per partition used with the ``matrix`` fixture: rows 10-19 are all zero, so partition 1 is empty.
RPP = 10


def make_matrix(rng: np.random.Generator, *, n_rows: int = 60, n_cols: int = 9, density: float = 0.3,
                dtype: type = np.float64) -> sp.csr_array:
    """A random CSR matrix with an all-zero row (3) and an all-zero partition (rows 10-19 at 10 rows each)."""
    dense = rng.standard_normal((n_rows, n_cols)) * (rng.random((n_rows, n_cols)) < density)
    dense[3] = 0.0
    dense[10:20] = 0.0
    dense[-1, -1] = 2.5  # the last row and column are not empty, so shapes can be inferred from the entries
    return sp.csr_array(dense.astype(dtype))


def assert_store_equals(store: object, expected: object, *, dtype: type | None = None) -> None:
    """The store holds exactly ``expected`` (same shape, same values, same dtype if given)."""
    got = store.to_scipy()  # type: ignore[attr-defined]
    want = sp.csr_array(expected)
    assert got.shape == want.shape
    if dtype is not None:
        assert np.dtype(store.dtype) == np.dtype(dtype)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(got.toarray(), want.toarray())


def listing(directory: str | os.PathLike[str]) -> list[str]:
    """Every entry of a directory, hidden ones included (to check that nothing is left behind)."""
    return sorted(os.listdir(directory))


def write_svmlight(path: str | os.PathLike[str], matrix: object, *, labels: object = None, zero_based: bool = False,
                   header: str = "") -> str:
    """Write a matrix as LIBSVM text with exact float formatting (``repr``); returns the path."""
    csr = sp.csr_array(matrix)
    labels = np.arange(csr.shape[0]) % 3 - 1 if labels is None else np.asarray(labels)
    offset = 0 if zero_based else 1
    lines = [header] if header else []
    for i in range(csr.shape[0]):
        lo, hi = csr.indptr[i], csr.indptr[i + 1]
        pairs = " ".join(f"{j + offset}:{float(v)!r}" for j, v in zip(csr.indices[lo:hi], csr.data[lo:hi]))
        lines.append(f"{labels[i]:g} {pairs}".rstrip())
    with open(path, "w") as handle:
        handle.write("\n".join(lines) + "\n")
    return os.fspath(path)
