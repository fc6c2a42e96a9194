"""The sample scripts' reader of a LIBSVM file: the package's own ingest (no scikit-learn, which `make demo` does not
install), into a temporary store read back whole (the samples are small)."""

from __future__ import annotations

import tempfile

import scipy.sparse as sp


def read_svmlight(path: str, n_features: int) -> sp.csr_array:
    """The rows of the LIBSVM file ``path`` (1-based indices, ``n_features`` columns), as a CSR array."""
    from dppca_dask import ingest

    with tempfile.TemporaryDirectory() as tmp:
        store = ingest(path, f"{tmp}/sample.zarr", n_features=n_features, progress=False)
        return sp.csr_array(store.to_scipy())
