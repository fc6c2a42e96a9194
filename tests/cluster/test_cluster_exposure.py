"""What a ``cluster/local.sh`` cluster exposes: every listening socket on loopback (the HTTP servers of the
scheduler and the workers too, with or without a dashboard), HTTPS only under ``--tls``, owner-only files; and the
embedded LocalCluster of the library on loopback."""

from __future__ import annotations

import json
import os
import socket
import ssl
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _local_cluster import LoopbackCluster, running_cluster

pytestmark = pytest.mark.slow

LOOPBACK = "127.0.0.1"


def _listening(pids: list[int]) -> dict[int, list[tuple[str, int]]]:
    """``{pid: [(ip, port), ...]}`` of the TCP sockets each process listens on (psutil reads /proc/net/tcp*)."""
    import psutil

    out: dict[int, list[tuple[str, int]]] = {}
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        out[pid] = [(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]
    return out


def _assert_loopback_only(cluster: LoopbackCluster) -> dict[int, list[tuple[str, int]]]:
    sockets = _listening(cluster.process_tree())
    flat = [addr for addrs in sockets.values() for addr in addrs]
    assert flat, "no listening sockets found for the cluster's processes"
    exposed = [addr for addr in flat if addr[0] != LOOPBACK]
    assert exposed == [], f"listening beyond {LOOPBACK}: {exposed}"
    return sockets


def _http_ports(cluster: LoopbackCluster) -> dict[str, int]:
    """The HTTP server port of the scheduler and of every worker."""
    with cluster.client() as client:
        ports = client.run(lambda dask_worker: dask_worker.http_server.port)
        ports["scheduler"] = client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.http_server.port)
    return ports


def _get(port: int, *, tls: bool) -> str:
    """The status line and body of ``GET /health`` on 127.0.0.1:port, over TLS (no certificate check) or not."""
    raw = socket.create_connection((LOOPBACK, port), timeout=10)
    try:
        sock: socket.socket = raw
        if tls:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            sock = context.wrap_socket(raw)
        sock.sendall(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n")
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
        return data.decode("latin-1")
    finally:
        raw.close()


def test_plain_cluster_listens_on_loopback_only(loopback_cluster: LoopbackCluster) -> None:
    sockets = _assert_loopback_only(loopback_cluster)
    ports = _http_ports(loopback_cluster)
    assert len(ports) == loopback_cluster.n_workers + 1
    listening = {port for addrs in sockets.values() for _, port in addrs}
    assert set(ports.values()) <= listening  # the HTTP servers are among the loopback sockets checked above
    for name, port in ports.items():
        assert _get(port, tls=False).startswith("HTTP/1.1 200"), name


def test_tls_cluster_serves_http_only_over_tls_on_loopback(loopback_tls_cluster: LoopbackCluster) -> None:
    _assert_loopback_only(loopback_tls_cluster)
    for name, port in _http_ports(loopback_tls_cluster).items():
        answer = _get(port, tls=True)
        assert answer.startswith("HTTP/1.1 200") and answer.rstrip().endswith("ok"), (name, answer[:200])
        try:
            plain = _get(port, tls=False)
        except OSError:
            plain = ""
        assert "200 OK" not in plain, f"{name} answered plain HTTP on port {port}"


def test_dashboard_port_is_on_loopback_and_tls(tmp_path: Path) -> None:
    with running_cluster(tmp_path / "run", workers=1, tls=True, extra_args=["--dashboard-port", "0"]) as cluster:
        _assert_loopback_only(cluster)
        port = json.loads(cluster.scheduler_file.read_text())["services"]["dashboard"]
        assert _get(port, tls=True).startswith("HTTP/1.1 200")


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.lstat().st_mode) for p in [root, *root.rglob("*")]}


def test_run_dir_files_are_owner_only(loopback_tls_cluster: LoopbackCluster) -> None:
    modes = _modes(loopback_tls_cluster.run_dir)
    for name in ("scheduler.json", "address", "client.env", "certs/ca.pem", "certs/node.pem", "certs/node-key.pem",
                 "certs/ca-key.pem", "certs/dask-tls.yaml", "logs/scheduler.log", "logs/worker-0.log",
                 "pids/scheduler.pid"):
        assert name in modes, name
    loose = {name: oct(mode) for name, mode in modes.items() if mode & 0o077}
    assert loose == {}, f"group or other may access: {loose}"


def test_embedded_local_cluster_listens_on_loopback_only(tmp_path: Path) -> None:
    # In a subprocess: the embedded cluster's worker processes are children of the process that calls connect().
    script = textwrap.dedent(
        """
        import json, os, sys
        import psutil
        from dppca_dask.coordinator import connect

        def traceback_filters():
            import logging
            from dppca_dask.coordinator.guard import OneLineLogFilter
            return sum(any(isinstance(f, OneLineLogFilter) for f in h.filters)
                       for h in logging.getLogger("distributed").handlers)

        if __name__ == "__main__":
            with connect(None, n_workers=2) as client:
                assert client.submit(sum, [1, 2]).result() == 3
                # its workers print to this terminal: their log handlers drop tracebacks (they may show data)
                assert all(n >= 1 for n in client.run(traceback_filters).values())
                procs = [psutil.Process()] + psutil.Process().children(recursive=True)
                listening = [(c.laddr.ip, c.laddr.port) for p in procs for c in p.net_connections(kind="inet")
                             if c.status == psutil.CONN_LISTEN]
                print(json.dumps(listening))
        """
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    listening = json.loads(proc.stdout.strip().splitlines()[-1])
    # scheduler RPC, and per worker: nanny and worker RPC (without a dashboard no HTTP server stays open)
    assert len(listening) >= 1 + 2 * 2, listening
    assert {ip for ip, _ in listening} == {LOOPBACK}, listening
    assert "8787" not in proc.stderr  # no attempt at the dashboard's default port
