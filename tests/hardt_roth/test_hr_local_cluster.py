"""The Hardt–Roth mechanisms on a real LocalCluster: the same release as in-process, under the same noise."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest

from dppca_dask import lowrank, pca, write_matrix
from dppca_dask.accounting import ENTRY_CHANGE, ROW_CHANGE
from dppca_dask.datasets import gaussian_factor_matrix


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    matrix = gaussian_factor_matrix(500, 40, 2, scale=0.04, seed=3).matrix
    return str(write_matrix(tmp_path_factory.mktemp("hr-cluster") / "a.zarr", matrix, rows_per_partition=70).path)


def _both(run: Any) -> tuple[Any, Any]:
    with warnings.catch_warnings():
        from dppca_dask.errors import NotPrivateWarning
        warnings.simplefilter("ignore", NotPrivateWarning)
        warnings.filterwarnings("ignore", message="calibration='paper'", category=UserWarning)
        return run("local"), run(None)


@pytest.mark.filterwarnings("ignore::dppca_dask.errors.NotPrivateWarning")
def test_all_mechanisms_on_a_local_cluster(store: str, local_client: Any, seed: int) -> None:
    def power(client: Any) -> Any:
        return pca(store, epsilon=1.0, delta=1e-6, mechanism="private-power", c_doubling=True, n_iter=8,
                   client=client if client else local_client, seed=seed)

    local, cluster = _both(power)
    np.testing.assert_allclose(cluster.components, local.components, atol=1e-8)
    assert cluster.privacy.neighbouring == ENTRY_CHANGE

    for mechanism, extra in (("private-low-rank", {"truncate": True}), ("randomized-response", {})):
        def low(client: Any, mechanism: str = mechanism, extra: dict = extra) -> Any:
            return lowrank(store, rank=2, epsilon=1.0, delta=1e-6, mechanism=mechanism,
                           client=client if client else local_client, seed=seed, **extra)

        local, cluster = _both(low)
        np.testing.assert_allclose(cluster.left @ cluster.right, local.left @ local.right, atol=1e-7)
        assert cluster.privacy.neighbouring == ROW_CHANGE
        assert cluster.provenance["input"]["kind"] == "store"
