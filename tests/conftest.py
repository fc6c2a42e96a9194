"""Shared fixtures, and two guards that hold for every test.

- Signals: a test that leaves SIGINT or SIGTERM handled differently, signals blocked, or this process in another
  process group fails (``_signal_state_unchanged``).
- Processes: every process started during the session (directly or not: scheduler and workers started by
  ``cluster/local.sh`` live in sessions of their own) carries the environment variable ``DPPCA_TEST_SESSION``. At the
  end of the session none may be left (``_no_process_outlives_the_session``), and a reaper process kills whatever
  is left when the session ends in any other way (interrupted, killed).

Randomness in tests is always seeded: the ``seed`` fixture is 42 unless ``DPPCA_TEST_SEED`` is set, so a sweep
(``for s in $(seq 0 99); do DPPCA_TEST_SEED=$s pytest ...; done``) checks that no test depends on one lucky seed.
Statistical assertions use a false-failure rate of alpha = 1e-6 each unless the test says otherwise.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

# One BLAS/OpenMP thread per process, before numpy is imported anywhere (workers inherit the environment).
for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

# Mark every process started during this test session (children inherit the environment); see _processes.
_CLUSTER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster")
if _CLUSTER not in sys.path:
    sys.path.insert(0, _CLUSTER)
from _processes import (  # noqa: E402
    describe, kill_processes, mark_this_session, session_mark, session_processes, start_reaper, stop_reaper,
)

mark_this_session()

# The loopback clusters (``dask scheduler`` / ``dask worker`` processes started by ``cluster/local.sh``), defined here
# so that every folder shares one of each kind per session.
from _local_cluster import loopback_cluster, loopback_tls_cluster  # noqa: E402,F401  (pytest fixtures)

# The ledger's PostgreSQL server (started by the tests on a Unix socket, stopped at the end of the session) and the
# fixture that runs a ledger test against both backends.
from _postgres_server import ledger_location, postgres_server, postgres_url  # noqa: E402,F401  (pytest fixtures)

from collections.abc import Iterator  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

#: False-failure rate of each statistical assertion.
ALPHA = 1e-6

#: Signals whose handling a test must leave as it found it: a process started afterwards inherits an ignored or
#: blocked SIGINT (then Ctrl-C, and a test sending it, does nothing), and a Python handler left behind changes what
#: later tests see.
GUARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _ignored_signals() -> int:
    """The kernel's set of ignored signals of this process (``SigIgn`` in ``/proc/self/status``), as a bit mask;
    it also sees what C code set, which ``signal.getsignal`` does not. 0 where ``/proc`` is missing."""
    try:
        with open("/proc/self/status") as status:
            return next((int(line.split()[1], 16) for line in status if line.startswith("SigIgn:")), 0)
    except OSError:
        return 0


def _process_signal_state() -> dict[str, object]:
    """What a child process inherits from this one about signals, and the Python handlers of ``GUARDED_SIGNALS``."""
    guarded_bits = sum(1 << (signum - 1) for signum in GUARDED_SIGNALS)
    return {
        **{f"handler of {signal.Signals(s).name}": signal.getsignal(s) for s in GUARDED_SIGNALS},
        "ignored signals": _ignored_signals() & guarded_bits,
        "blocked signals (main thread)": sorted(signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "process group": os.getpgrp(),
        "session": os.getsid(0),
    }


def pytest_report_header(config: pytest.Config) -> str | None:
    """Say so when this process was started with SIGINT ignored or blocked (in the background by a non-interactive
    shell, ``nohup``, some CI runners): every process the tests start inherits it."""
    ignored = _ignored_signals() & (1 << (signal.SIGINT - 1))
    blocked = signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    if not (ignored or blocked):
        return None
    return (f"SIGINT is {'ignored' if ignored else 'blocked'} in this test process (started in the background?); "
            "processes started by the tests inherit that unless they reset it")


@pytest.fixture(autouse=True)
def _signal_state_unchanged() -> Iterator[None]:
    """Fail the test that leaves SIGINT or SIGTERM handled differently, signals blocked, or this process in another
    process group or session; restore the handlers and the mask so that the tests after it are not affected."""
    if threading.current_thread() is not threading.main_thread():  # signals are set in the main thread only
        yield
        return
    before = _process_signal_state()
    handlers = {s: signal.getsignal(s) for s in GUARDED_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    after = _process_signal_state()
    if after == before:
        return
    for signum, handler in handlers.items():
        if handler is not None:  # None: set outside Python, cannot be restored from here
            signal.signal(signum, handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    changed = {name: (before[name], after[name]) for name in before if before[name] != after[name]}
    pytest.fail(f"the test changed this process's signal state (before, after): {changed}", pytrace=False)


@pytest.fixture
def seed() -> int:
    return int(os.environ.get("DPPCA_TEST_SEED", "42"))


@pytest.fixture
def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


@pytest.fixture(params=[False, True], ids=["numpy", "compiled"])
def compiled(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Each test using it runs twice: on the numpy kernels and on the compiled (numba) loops, in this process."""
    from dppca_dask.kernels import _jit

    if request.param and not _jit.NUMBA_INSTALLED:
        pytest.skip("numba is not installed")
    monkeypatch.setattr(_jit, "HAVE_NUMBA", request.param)
    return bool(request.param)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("DPPCA_RUN_LARGE") == "1":
        return
    skip_large = pytest.mark.skip(reason="large-data run; set DPPCA_RUN_LARGE=1 to run it")
    for item in items:
        if "large" in item.keywords:
            item.add_marker(skip_large)


@pytest.fixture(scope="session", autouse=True)
def _own_calibration_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The session's own calibration cache (``DPPCA_DASK_CACHE_DIR``, a fresh temporary directory, inherited by
    every process the tests start): results never depend on, nor write to, the user's cache."""
    from dppca_dask.accounting import CACHE_DIR_ENV, clear_memory_cache

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_DIR_ENV, str(tmp_path_factory.mktemp("calibration-cache")))
        clear_memory_cache()
        yield
    clear_memory_cache()


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


# ----------------------------------------------------------------------------------------- leftover processes
#: Seconds the processes of the session have to exit after its last fixture (a nanny stops a stuck worker after a
#: few seconds; the machine may be loaded).
EXIT_GRACE = 30


@pytest.fixture(scope="session", autouse=True)
def _no_process_outlives_the_session() -> Iterator[None]:
    """Fail the session's last test if a process started during the session is still running after every fixture
    is torn down (and kill it); a reaper, in a session of its own without the mark, does the killing if this
    process ends without tearing down (SIGKILL, SIGTERM)."""
    if not os.path.isdir("/proc"):
        yield
        return
    reaper = start_reaper(session_mark())
    try:
        yield
        deadline = time.monotonic() + EXIT_GRACE
        # This process's multiprocessing resource tracker ends with it: not a leftover.
        from multiprocessing import resource_tracker

        tracker = getattr(resource_tracker._resource_tracker, "_pid", None)
        ours = (reaper.pid,) if tracker is None else (reaper.pid, tracker)
        while (left := session_processes(exclude=ours)) and time.monotonic() < deadline:
            time.sleep(0.25)
        described = [describe(pid) for pid in left]
        kill_processes(left)
        assert not described, "processes started by the tests outlived the session:\n" + "\n".join(described)
    finally:
        stop_reaper(reaper)
