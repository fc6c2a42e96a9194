"""The embedded cluster starts with ``dppca_dask.cluster.dask-config``: its workers without Dask's statistical
profiler (whose dashboard page shows which code paths a step took and for how long, and which costs half of an idle
worker's CPU) and its servers' event-loop check once a second instead of every 20 ms. A null entry keeps this
process's setting (Dask's unless set); this process's own settings are left as they were.
"""

from __future__ import annotations

from typing import Any

import dask
import distributed  # noqa: F401  # (its configuration defaults load on import)
import pytest

from dppca_dask.coordinator.client import cluster_dask_config, connect, embedded_cluster_settings
from dppca_dask.errors import InvalidParameterError


def test_the_settings_are_dotted_and_null_keeps_this_process_setting() -> None:
    assert cluster_dask_config() == {"distributed.worker.profile.enabled": False,
                                     "distributed.admin.tick.interval": "1s"}
    with dask.config.set({"dppca_dask.cluster.dask-config.distributed.worker.profile.enabled": None}):
        assert cluster_dask_config() == {"distributed.admin.tick.interval": "1s"}
    with dask.config.set({"dppca_dask.cluster.dask-config": "profile=off"}), \
            pytest.raises(InvalidParameterError, match="dask-config must map Dask settings"):
        cluster_dask_config()


def test_the_context_sets_them_for_the_cluster_only() -> None:
    before = dask.config.get("distributed.worker.profile.enabled")
    with embedded_cluster_settings():
        assert dask.config.get("distributed.worker.profile.enabled") is False
        assert dask.config.get("distributed.admin.tick.interval") == "1s"
    assert dask.config.get("distributed.worker.profile.enabled") == before


def _profiling(dask_worker: Any) -> bool:
    return "profile" in dask_worker.periodic_callbacks


def _tick(dask_scheduler: Any) -> float:
    return float(dask_scheduler._tick_interval)


@pytest.mark.slow
def test_the_embedded_cluster_runs_without_the_profiler_unless_asked() -> None:
    own = dask.config.get("distributed.worker.profile.enabled")
    with dask.config.set({"dppca_dask.cluster.use-active-client": False,
                          "distributed.worker.profile.enabled": True, "distributed.admin.tick.interval": "20ms"}):
        with connect(None, n_workers=1, memory_limit="1GiB") as client:
            assert list(client.run(_profiling).values()) == [False]
            assert client.run_on_scheduler(_tick) == 1.0
            assert client.submit(sum, [1, 2], pure=False).result() == 3
            assert client.profile()["count"] == 0  # nothing sampled: the dashboard's profile page stays empty
        assert dask.config.get("distributed.worker.profile.enabled") is True  # this process's own setting is back
        with dask.config.set({"dppca_dask.cluster.dask-config.distributed": None}), \
                connect(None, n_workers=1, memory_limit="1GiB") as client:
            assert list(client.run(_profiling).values()) == [True]
            assert client.run_on_scheduler(_tick) == 0.02
    assert dask.config.get("distributed.worker.profile.enabled") == own
