"""A real Dask scheduler and workers on loopback, started with ``cluster/local.sh``, for tests.

``running_cluster(run_dir, tls=...)`` starts a cluster in ``run_dir`` (scheduler on a free port chosen by the
scheduler itself, so tests running side by side never collide), yields a :class:`LoopbackCluster` and stops it
afterwards, even when the test fails; whatever survives ``local.sh stop`` is killed by pid. The pytest fixtures
``loopback_cluster`` and ``loopback_tls_cluster`` wrap it, one cluster per test session: ``tests/conftest.py``
imports them, so every test folder uses them without importing them again (a second import, in a folder's
``conftest.py`` or a test module, would define a second fixture and start a second cluster of the same kind).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from _processes import started_here  # noqa: E402  (re-exported)

__all__ = [
    "CLUSTER_DIR",
    "LOCAL_SH",
    "MAKE_CERTS",
    "LoopbackCluster",
    "free_port",
    "group_members",
    "live_processes",
    "local_sh",
    "loopback_cluster",
    "loopback_tls_cluster",
    "running_cluster",
    "start_cluster",
    "started_here",
    "stop_cluster",
]

REPO = Path(__file__).resolve().parents[2]
CLUSTER_DIR = REPO / "cluster"
LOCAL_SH = CLUSTER_DIR / "local.sh"
MAKE_CERTS = CLUSTER_DIR / "make-certs.sh"

#: Seconds ``local.sh start`` may wait for the scheduler and the workers (2 cores, other tests running).
START_TIMEOUT = 90


def _env() -> dict[str, str]:
    env = dict(os.environ)
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = "1"
    # A client setting left in the environment must not leak into the cluster under test.
    for name in list(env):
        if name == "DASK_SCHEDULER_ADDRESS" or name.startswith("DASK_DISTRIBUTED__COMM__"):
            del env[name]
    return env


def local_sh(*args: str, timeout: float = START_TIMEOUT + 30,
             environ: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``cluster/local.sh ARGS`` with the test's Python (and ``environ`` over the test's environment); never
    raises on a non-zero exit."""
    return subprocess.run(
        ["bash", str(LOCAL_SH), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**_env(), **(environ or {})},
        stdin=subprocess.DEVNULL,
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _read_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def live_processes(pids: Sequence[int]) -> list[int]:
    """The pids among ``pids`` that are still running (zombies count as ended)."""
    import psutil

    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


@dataclass(frozen=True, slots=True)
class LoopbackCluster:
    """A cluster started by ``cluster/local.sh start`` in ``run_dir``."""

    #: The run directory given to ``local.sh --run-dir``.
    run_dir: Path
    #: The scheduler address, ``tcp://127.0.0.1:PORT`` or ``tls://127.0.0.1:PORT``.
    address: str
    #: Directory with ``ca.pem``, ``node.pem``, ``node-key.pem`` when TLS is on, else ``None``.
    cert_dir: Path | None
    #: Number of workers started.
    n_workers: int

    def __str__(self) -> str:
        return self.address

    @property
    def tls(self) -> bool:
        return self.cert_dir is not None

    @property
    def scheduler_file(self) -> Path:
        return self.run_dir / "scheduler.json"

    def security(self) -> Any:
        """A ``distributed.security.Security`` for a client of this cluster, or ``None`` without TLS."""
        if self.cert_dir is None:
            return None
        from distributed.security import Security

        return Security(
            tls_ca_file=str(self.cert_dir / "ca.pem"),
            tls_client_cert=str(self.cert_dir / "node.pem"),
            tls_client_key=str(self.cert_dir / "node-key.pem"),
            require_encryption=True,
        )

    def client(self, **kwargs: Any) -> Any:
        """A ``distributed.Client`` connected to this cluster (use it as a context manager)."""
        from distributed import Client

        kwargs.setdefault("timeout", "30s")
        kwargs.setdefault("set_as_default", False)
        return Client(self.address, security=self.security(), **kwargs)

    def client_env(self) -> dict[str, str]:
        """Environment for a client subprocess: ``DASK_SCHEDULER_ADDRESS`` and, with TLS, Dask's TLS settings."""
        env = _env()
        env["DASK_SCHEDULER_ADDRESS"] = self.address
        if self.cert_dir is not None:
            env["DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"] = "True"
            env["DASK_DISTRIBUTED__COMM__TLS__CA_FILE"] = str(self.cert_dir / "ca.pem")
            env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT"] = str(self.cert_dir / "node.pem")
            env["DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY"] = str(self.cert_dir / "node-key.pem")
        return env

    def pid_files(self) -> dict[str, int]:
        """``{"scheduler": pid, "worker-0": pid, ...}`` from the pid files."""
        out = {}
        for path in sorted((self.run_dir / "pids").glob("*.pid")):
            pid = _read_pid(path)
            if pid is not None:
                out[path.stem] = pid
        return out

    def process_tree(self) -> list[int]:
        """Every live process of the cluster: the recorded pids and all their descendants."""
        import psutil

        pids: set[int] = set()
        for pid in self.pid_files().values():
            try:
                proc = psutil.Process(pid)
                pids.add(pid)
                pids.update(child.pid for child in proc.children(recursive=True))
            except psutil.NoSuchProcess:
                pass
        return sorted(pids)

    def status(self) -> subprocess.CompletedProcess[str]:
        return local_sh("status", "--run-dir", str(self.run_dir), timeout=30)


def start_cluster(
    run_dir: Path,
    *,
    workers: int = 2,
    tls: bool = False,
    cert_dir: Path | None = None,
    scheduler_port: int = 0,
    extra_args: Sequence[str] = (),
    environ: Mapping[str, str] | None = None,
) -> LoopbackCluster:
    """Run ``local.sh start``; raise ``RuntimeError`` with its output when it fails."""
    args = [
        "start",
        "--run-dir", str(run_dir),
        "--scheduler-port", str(scheduler_port),
        "--workers", str(workers),
        "--memory-limit", "1GiB",
        "--timeout", str(START_TIMEOUT),
        "--python", sys.executable,
        *extra_args,
    ]  # fmt: skip
    if tls:
        args.append("--tls")
        if cert_dir is not None:
            args += ["--cert-dir", str(cert_dir)]
    _STARTED.add(run_dir.resolve())
    proc = local_sh(*args, environ=environ)
    if proc.returncode != 0:
        raise RuntimeError(
            f"local.sh start failed with exit code {proc.returncode}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    address = proc.stdout.strip().splitlines()[-1]
    certs = None
    if tls:
        certs = (cert_dir if cert_dir is not None else run_dir / "certs").resolve()
    return LoopbackCluster(run_dir=run_dir.resolve(), address=address, cert_dir=certs, n_workers=workers)


def group_members(pgid: int) -> list[int]:
    """Running processes (zombies aside) of process group ``pgid`` that this test session started."""
    import psutil

    out = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE and started_here(proc.pid):
                out.append(proc.pid)
        except (OSError, psutil.Error):
            pass
    return out


def stop_cluster(run_dir: Path, known_pids: Sequence[int] = ()) -> None:
    """``local.sh stop``; then SIGKILL anything of the cluster still alive (recorded pids, the process groups they
    lead (``local.sh`` starts each in a session of its own) and ``known_pids``), so no process outlives the test
    even when ``stop`` itself is broken or interrupted. Raise ``RuntimeError`` if something survives even that."""
    pids = set(known_pids)
    groups: set[int] = set()
    for path in (run_dir / "pids").glob("*.pid"):
        pid = _read_pid(path)
        if pid is not None:
            pids.add(pid)
            groups.add(pid)
    try:
        with contextlib.suppress(subprocess.TimeoutExpired):
            local_sh("stop", "--run-dir", str(run_dir), "--timeout", "10", timeout=60)
    finally:
        # Members of a group whose leader is gone too: a nanny's worker process outliving its nanny.
        leftovers = _cluster_processes(pids, groups)
        for pid in leftovers:
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (survivors := _cluster_processes(pids, groups)) and time.monotonic() < deadline:
            time.sleep(0.1)
        _STARTED.discard(run_dir.resolve())
    if survivors:
        raise RuntimeError(f"processes of the cluster in {run_dir} survived SIGKILL: {survivors}")


def _cluster_processes(pids: set[int], groups: set[int]) -> list[int]:
    left = {pid for pid in live_processes(sorted(pids)) if started_here(pid)}
    for group in groups:
        left.update(group_members(group))
    return sorted(left)


#: Run directories of clusters started and not yet stopped: stopped at exit if a test could not (a backstop; the
#: test session's reaper covers a test process that is killed).
_STARTED: set[Path] = set()


@atexit.register
def _stop_forgotten_clusters() -> None:
    for run_dir in sorted(_STARTED):
        with contextlib.suppress(Exception):
            stop_cluster(run_dir)


@contextlib.contextmanager
def running_cluster(run_dir: Path, **kwargs: Any) -> Iterator[LoopbackCluster]:
    """Start a cluster with :func:`start_cluster`, yield it, and always stop it."""
    known: list[int] = []
    try:
        cluster = start_cluster(run_dir, **kwargs)
        known = cluster.process_tree()
        yield cluster
    finally:
        stop_cluster(run_dir, known)


@pytest.fixture(scope="session")
def loopback_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    """A scheduler and two workers (1 thread, 1 GiB each) on 127.0.0.1 over plain TCP, shared by the session.

    Do not stop or break it; use ``running_cluster`` for a cluster of your own.
    """
    with running_cluster(tmp_path_factory.mktemp("loopback") / "run") as cluster:
        yield cluster


@pytest.fixture(scope="session")
def loopback_tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackCluster]:
    """Like ``loopback_cluster`` with TLS on every connection (certificates made by ``make-certs.sh``)."""
    with running_cluster(tmp_path_factory.mktemp("loopback-tls") / "run", tls=True) as cluster:
        yield cluster
