"""The embedded cluster's workers start with ``dppca_dask.cluster.worker-environ`` in their environment.

glibc reads ``MALLOC_*`` once, when a process starts, so the test reads each worker's initial environment
(``/proc/<pid>/environ``), not its ``os.environ`` (which the nanny also sets after the start). This process's own
environment is left as it was.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import dask
import pytest

from dppca_dask.coordinator.client import connect, embedded_worker_environ, worker_environ
from dppca_dask.errors import InvalidParameterError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/<pid>/environ")


def _initial_environ() -> dict[str, str]:
    """This process's environment as it started (what glibc read)."""
    raw = Path(f"/proc/{os.getpid()}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def _watched() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")}


def test_the_default_keeps_temporaries_on_the_heap_over_dasks_pre_spawn_environment() -> None:
    environ = worker_environ()
    assert environ["MALLOC_MMAP_THRESHOLD_"] == str(32 * 2**20)
    assert environ["MALLOC_TRIM_THRESHOLD_"] == str(64 * 2**20)
    assert environ["OMP_NUM_THREADS"] == "1"  # Dask's own entries are kept


def test_null_leaves_dasks_value_and_a_bad_setting_is_refused() -> None:
    with dask.config.set({"dppca_dask.cluster.worker-environ.MALLOC_TRIM_THRESHOLD_": None}):
        assert worker_environ()["MALLOC_TRIM_THRESHOLD_"] == str(
            dask.config.get("distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"))
    with dask.config.set({"dppca_dask.cluster.worker-environ": "MALLOC_TRIM_THRESHOLD_=0"}), \
            pytest.raises(InvalidParameterError, match="worker-environ must map"):
        worker_environ()


def test_the_context_puts_this_process_environment_back() -> None:
    before = _watched()
    with embedded_worker_environ():
        assert dask.config.get("distributed.nanny.pre-spawn-environ")["MALLOC_MMAP_THRESHOLD_"] == str(32 * 2**20)
        os.environ["MALLOC_MMAP_THRESHOLD_"] = "1"  # what a nanny does before it spawns a worker
    assert _watched() == before


@pytest.mark.slow
def test_embedded_workers_start_with_the_setting_also_after_a_restart() -> None:
    before = _watched()
    os.environ["MALLOC_TRIM_THRESHOLD_"] = "65536"  # what any LocalCluster started before in this process leaves
    try:
        with dask.config.set({"dppca_dask.cluster.use-active-client": False,
                              "dppca_dask.cluster.worker-environ.MALLOC_TRIM_THRESHOLD_": 12345678}), \
                connect(None, n_workers=1, memory_limit="1GiB") as client:
            assert os.environ["MALLOC_TRIM_THRESHOLD_"] == "65536"
            assert os.environ.get("MALLOC_MMAP_THRESHOLD_") == before["MALLOC_MMAP_THRESHOLD_"]
            pids = set()
            for restart in (True, False):
                pids.update(client.run(os.getpid).values())
                (initial,) = client.run(_initial_environ).values()
                assert initial["MALLOC_MMAP_THRESHOLD_"] == str(32 * 2**20)
                assert initial["MALLOC_TRIM_THRESHOLD_"] == "12345678"
                if restart:
                    client.restart()  # the nanny spawns the new worker with the environment it was made with
            assert len(pids) == 2
    finally:  # a restart sets the nanny's pre-spawn entries in this process again (Dask does so on every spawn)
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
