"""Shared fixtures.

Randomness in tests is always seeded: the ``seed`` fixture is 42 unless ``DPPCA_TEST_SEED`` is set, so a sweep
(``for s in $(seq 0 99); do DPPCA_TEST_SEED=$s pytest ...; done``) checks that no test depends on one lucky seed.
Statistical assertions use a false-failure rate of alpha = 1e-6 each unless the test says otherwise.
"""

from __future__ import annotations

import os

# One BLAS/OpenMP thread per process, before numpy is imported anywhere (workers inherit the environment).
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

from collections.abc import Iterator  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

#: False-failure rate of each statistical assertion.
ALPHA = 1e-6


@pytest.fixture
def seed() -> int:
    return int(os.environ.get("DPPCA_TEST_SEED", "42"))


@pytest.fixture
def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("DPPCA_RUN_LARGE") == "1":
        return
    skip_large = pytest.mark.skip(reason="large-data run; set DPPCA_RUN_LARGE=1 to run it")
    for item in items:
        if "large" in item.keywords:
            item.add_marker(skip_large)


@pytest.fixture(scope="session")
def local_client() -> Iterator[object]:
    """A real two-worker ``LocalCluster`` (separate processes, one thread each), shared by the session."""
    from distributed import Client, LocalCluster

    with LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        memory_limit="2GiB",
        host="127.0.0.1",
        scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
    ) as cluster, Client(cluster) as client:
        yield client
