"""``cluster/local.sh`` with real processes on 127.0.0.1: start, run a job, status, stop, with and without TLS."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import ssl
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _local_cluster import (
    MAKE_CERTS,
    LoopbackCluster,
    free_port,
    live_processes,
    local_sh,
    running_cluster,
    start_cluster,
    stop_cluster,
)

pytestmark = pytest.mark.slow


def _processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text`` (a run directory is unique to its test)."""
    import psutil

    out = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        info = proc.info
        if info["status"] == psutil.STATUS_ZOMBIE or not info["cmdline"]:
            continue
        if any(text in part for part in info["cmdline"]):
            out.append(proc.pid)
    return out


def _check_workers_compute(cluster: LoopbackCluster, scheme: str, *, profile: bool = False) -> None:
    with cluster.client() as client:
        workers = client.nthreads()
        assert len(workers) == 2, workers
        assert all(addr.startswith(f"{scheme}://127.0.0.1:") for addr in workers), workers
        assert set(workers.values()) == {1}
        # The computation runs on both workers: one task per worker, pinned.
        squares = [client.submit(pow, i, 2, workers=[addr], pure=False) for i, addr in enumerate(workers)]
        assert client.gather(squares) == [0, 1]
        total = client.submit(sum, client.map(abs, range(-10, 10)))
        assert total.result() == 100
        env = client.run(lambda: {k: os.environ.get(k) for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")})
        assert all(v == {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"} for v in env.values()), env
        # glibc's heap settings are in each worker's environment from its start (what glibc reads), as the
        # embedded cluster's workers have them
        def initial_heap_settings() -> dict[str, str | None]:  # defined here: sent by value to the workers
            raw = open("/proc/self/environ", "rb").read().decode(errors="replace")
            env = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
            return {k: env.get(k) for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")}

        heap = client.run(initial_heap_settings)
        assert all(v == {"MALLOC_MMAP_THRESHOLD_": "33554432", "MALLOC_TRIM_THRESHOLD_": "67108864"}
                   for v in heap.values()), heap
        # ... and the embedded cluster's Dask settings: no statistical profiler (its dashboard page shows which code
        # paths a step took; unless the environment of local.sh asks for it), event-loop checks once a second
        def dask_settings() -> tuple[object, object]:
            import dask

            return (dask.config.get("distributed.worker.profile.enabled"),
                    dask.config.get("distributed.admin.tick.interval"))

        assert set(client.run(dask_settings).values()) == {(profile, "1s")}
        assert client.run_on_scheduler(dask_settings)[1] == "1s"
        limits = client.run(lambda dask_worker: dask_worker.memory_manager.memory_limit)
        assert set(limits.values()) == {2**30}


def _check_stopped(cluster: LoopbackCluster, known: list[int]) -> None:
    stop = local_sh("stop", "--run-dir", str(cluster.run_dir))
    assert stop.returncode == 0, stop.stderr
    assert live_processes(known) == [], "processes outlived local.sh stop"
    assert _processes_mentioning(str(cluster.run_dir)) == []
    assert list((cluster.run_dir / "pids").glob("*.pid")) == []
    status = cluster.status()
    assert status.returncode == 3, status.stdout
    assert "stopped" in status.stdout
    # stop is idempotent.
    again = local_sh("stop", "--run-dir", str(cluster.run_dir))
    assert again.returncode == 0
    assert "nothing to stop" in again.stderr


def test_plain_cluster_start_run_status_stop(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    # A pid file left by a cluster that crashed: start clears it instead of refusing.
    (run_dir / "pids").mkdir(parents=True)
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    (run_dir / "pids" / "scheduler.pid").write_text(f"{finished.pid}\n")

    port = free_port()
    known: list[int] = []
    try:
        cluster = start_cluster(run_dir, scheduler_port=port)
        known = cluster.process_tree()
        assert cluster.address == f"tcp://127.0.0.1:{port}"
        assert (run_dir / "address").read_text().strip() == cluster.address
        assert json.loads(cluster.scheduler_file.read_text())["address"] == cluster.address
        pids = cluster.pid_files()
        assert set(pids) == {"scheduler", "worker-0", "worker-1"}
        # Scheduler, two nannies and their two worker processes.
        assert len(known) >= 5, known
        for pid in pids.values():
            assert os.getpgid(pid) == pid, "each process runs in its own process group"

        _check_workers_compute(cluster, "tcp")

        status = cluster.status()
        assert status.returncode == 0, status.stdout + status.stderr
        assert f"address: {cluster.address}" in status.stdout
        assert "state: running (2 workers)" in status.stdout
        for name, pid in pids.items():
            assert f"pid {pid}" in status.stdout and name in status.stdout

        _check_stopped(cluster, known)
    finally:
        stop_cluster(run_dir, known)


def test_tls_cluster_start_run_status_stop(tmp_path: Path) -> None:
    cert_dir = tmp_path / "certs"
    made = subprocess.run(["bash", str(MAKE_CERTS), str(cert_dir)], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    run_dir = tmp_path / "run"
    known: list[int] = []
    try:
        # (and a profiled run: a Dask setting already in local.sh's environment is kept)
        cluster = start_cluster(run_dir, tls=True, cert_dir=cert_dir,
                                environ={"DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED": "True"})
        known = cluster.process_tree()
        assert cluster.address.startswith("tls://127.0.0.1:")
        assert not (run_dir / "certs").exists(), "--cert-dir was given: no certificates made in the run dir"

        _check_workers_compute(cluster, "tls", profile=True)

        # A plain TCP client is refused, and so is a TLS connection without a client certificate (mutual TLS).
        from distributed import Client

        port = int(cluster.address.rsplit(":", 1)[1])
        with pytest.raises(OSError):
            Client(f"tcp://127.0.0.1:{port}", timeout="5s", set_as_default=False)
        context = ssl.create_default_context(cafile=str(cert_dir / "ca.pem"))
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with pytest.raises((ssl.SSLError, ConnectionResetError)):
                with context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
                    conn.sendall(b"\0" * 8)
                    conn.recv(1)

        env_file = (run_dir / "client.env").read_text()
        assert f"DASK_SCHEDULER_ADDRESS={cluster.address}" in env_file
        assert f"DASK_DISTRIBUTED__COMM__TLS__CA_FILE={cert_dir.resolve() / 'ca.pem'}" in env_file

        status = cluster.status()
        assert status.returncode == 0, status.stdout + status.stderr
        assert "state: running (2 workers)" in status.stdout

        _check_stopped(cluster, known)
    finally:
        stop_cluster(run_dir, known)


def test_second_start_on_the_same_run_dir_is_refused(loopback_cluster: LoopbackCluster) -> None:
    before = loopback_cluster.pid_files()
    again = local_sh(
        "start", "--run-dir", str(loopback_cluster.run_dir), "--scheduler-port", "0", "--python", sys.executable
    )
    assert again.returncode == 1
    assert "already running" in again.stderr
    assert loopback_cluster.address in again.stderr
    assert again.stdout == ""
    assert loopback_cluster.pid_files() == before
    assert loopback_cluster.status().returncode == 0


def test_client_env_file_lets_a_client_connect_without_arguments(loopback_cluster: LoopbackCluster) -> None:
    run_dir = loopback_cluster.run_dir
    script = "from distributed import Client\nwith Client(timeout='30s') as c:\n    print(len(c.nthreads()))\n"
    proc = subprocess.run(
        ["bash", "-c", 'set -a; . "$1"; set +a; exec "$2" -c "$3"', "-", str(run_dir / "client.env"),
         sys.executable, script],
        capture_output=True, text=True, timeout=60, env=loopback_cluster.client_env() | {"DASK_SCHEDULER_ADDRESS": ""},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "2"


def test_tls_fixture_makes_certificates_in_the_run_dir(loopback_tls_cluster: LoopbackCluster) -> None:
    certs = loopback_tls_cluster.run_dir / "certs"
    assert loopback_tls_cluster.cert_dir == certs
    for name in ("node-key.pem", "ca-key.pem"):
        assert stat.S_IMODE((certs / name).stat().st_mode) == 0o600
    with loopback_tls_cluster.client() as client:
        assert len(client.nthreads()) == 2


def test_start_failure_shows_the_log_and_leaves_nothing_running(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = local_sh(
        "start", "--run-dir", str(run_dir), "--scheduler-port", "0", "--memory-limit", "lots",
        "--python", sys.executable,
    )  # fmt: skip
    try:
        assert proc.returncode == 1
        assert proc.stdout == ""
        # Whichever worker the check sees dead first is named.
        assert re.search(r"error: exited during startup: (worker-\d ?)+\n", proc.stderr), proc.stderr
        assert "Could not interpret 'lots' as a byte unit" in proc.stderr
        assert list((run_dir / "pids").glob("*.pid")) == []
        assert _processes_mentioning(str(run_dir)) == []
    finally:
        stop_cluster(run_dir)


def test_port_in_use_is_reported(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = local_sh("start", "--run-dir", str(run_dir), "--scheduler-port", str(port), "--python", sys.executable)
    try:
        assert proc.returncode == 1
        assert "Address already in use" in proc.stderr
        assert f"port {port} on 127.0.0.1 is taken" in proc.stderr
        assert _processes_mentioning(str(run_dir)) == []
    finally:
        stop_cluster(run_dir)


def test_running_cluster_stops_even_when_the_body_fails(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    known: list[int] = []
    with pytest.raises(ZeroDivisionError), running_cluster(run_dir, workers=1, extra_args=["--no-nanny"]) as cluster:
        known = cluster.process_tree()
        assert set(cluster.pid_files()) == {"scheduler", "worker-0"}
        assert len(known) == 2, "without a nanny a worker is a single process"
        1 / 0  # noqa: B018
    assert known and live_processes(known) == []


def test_degraded_status_and_stop_escalating_to_sigkill(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    with running_cluster(run_dir, workers=1) as cluster:
        known = cluster.process_tree()
        pids = cluster.pid_files()
        # A worker's nanny killed outright: status reports the cluster degraded.
        os.kill(pids["worker-0"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while live_processes([pids["worker-0"]]) and time.monotonic() < deadline:
            time.sleep(0.1)
        status = cluster.status()
        assert status.returncode == 1, status.stdout
        assert re.search(rf"worker-0\s+pid {pids['worker-0']}\s+dead", status.stdout)
        assert "state: degraded (1 of 2 processes alive)" in status.stdout
        # A scheduler that does not react to SIGTERM (stopped) is killed after the grace period.
        os.kill(pids["scheduler"], signal.SIGSTOP)
        started = time.monotonic()
        stop = local_sh("stop", "--run-dir", str(run_dir), "--timeout", "1", timeout=60)
        assert stop.returncode == 0, stop.stderr
        assert f"still running after 1s, sending SIGKILL: {pids['scheduler']}" in stop.stderr
        assert time.monotonic() - started >= 1.0
        assert live_processes(known) == []
        assert cluster.status().returncode == 3
