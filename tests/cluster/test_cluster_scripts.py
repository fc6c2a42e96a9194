"""``cluster/local.sh`` and ``cluster/make-certs.sh`` without a running cluster: syntax, help, errors, certificates."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from _local_cluster import CLUSTER_DIR, LOCAL_SH, MAKE_CERTS, local_sh

SCRIPTS = [LOCAL_SH, MAKE_CERTS]


def _make_certs(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(MAKE_CERTS), *args], capture_output=True, text=True, timeout=60)


def _openssl(*args: str) -> str:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, timeout=30, check=True)
    return proc.stdout


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_parses_and_is_executable(script: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert os.access(script, os.X_OK)
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text


def test_local_sh_help_lists_commands_and_options() -> None:
    proc = local_sh("--help", timeout=30)
    assert proc.returncode == 0
    for word in ("start", "stop", "status", "--run-dir", "--scheduler-port", "--dashboard-port", "--workers",
                 "--nthreads", "--memory-limit", "--tls", "--cert-dir", "--python", "--dask", "--timeout"):  # fmt: skip
        assert word in proc.stdout, word
    assert "OMP_NUM_THREADS=1" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "missing command"),
        (("restart",), "unknown command 'restart'"),
        (("start", "stop"), "one command expected"),
        (("start", "--bogus"), "unknown option '--bogus'"),
        (("start", "--workers", "0"), "--workers must be a positive integer"),
        (("start", "--nthreads", "two"), "--nthreads must be a positive integer"),
        (("start", "--scheduler-port", "70000"), "--scheduler-port must be 0-65535"),
        (("start", "--dashboard-port=x"), "--dashboard-port must be 0-65535"),
        (("start", "--memory-limit", ""), "--memory-limit must be a size"),
        (("stop", "--timeout", "soon"), "--timeout must be a whole number"),
        (("status", "--run-dir"), "--run-dir needs a value"),
        (("start", "--tls=yes"), "--tls takes no value"),
    ],
)
def test_local_sh_rejects_bad_usage(args: tuple[str, ...], message: str) -> None:
    proc = local_sh(*args, timeout=30)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "--help" in proc.stderr


def test_stop_and_status_without_a_cluster(tmp_path: Path) -> None:
    run_dir = tmp_path / "never-started"
    stop = local_sh("stop", "--run-dir", str(run_dir), timeout=30)
    assert stop.returncode == 0
    assert "nothing to stop" in stop.stderr
    status = local_sh("status", "--run-dir", str(run_dir), timeout=30)
    assert status.returncode == 3
    assert "state: stopped" in status.stdout


def test_status_and_stop_with_stale_pid_files(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "pids").mkdir(parents=True)
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    (run_dir / "pids" / "scheduler.pid").write_text(f"{finished.pid}\n")
    (run_dir / "pids" / "worker-0.pid").write_text(f"{finished.pid}\n")
    (run_dir / "address").write_text("tcp://127.0.0.1:1\n")
    status = local_sh("status", "--run-dir", str(run_dir), timeout=30)
    assert status.returncode == 3
    assert re.search(rf"scheduler\s+pid {finished.pid}\s+dead", status.stdout)
    assert "stale pid files" in status.stdout
    stop = local_sh("stop", "--run-dir", str(run_dir), timeout=30)
    assert stop.returncode == 0
    assert list((run_dir / "pids").glob("*.pid")) == []
    assert not (run_dir / "address").exists()


def test_make_certs_writes_a_ca_and_a_node_certificate(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    proc = _make_certs(str(certs))
    assert proc.returncode == 0, proc.stderr
    for name in ("ca.pem", "ca-key.pem", "node.pem", "node-key.pem", "dask-tls.yaml"):
        assert (certs / name).is_file(), name
    for key in ("ca-key.pem", "node-key.pem"):
        assert stat.S_IMODE((certs / key).stat().st_mode) == 0o600, key
    assert "OK" in _openssl("verify", "-CAfile", str(certs / "ca.pem"), str(certs / "node.pem"))
    ext = _openssl("x509", "-in", str(certs / "node.pem"), "-noout", "-ext",
                   "subjectAltName,extendedKeyUsage,basicConstraints")  # fmt: skip
    assert "IP Address:127.0.0.1" in ext
    assert "DNS:localhost" in ext
    assert "TLS Web Server Authentication" in ext and "TLS Web Client Authentication" in ext
    assert "CA:FALSE" in ext
    assert "CA:TRUE" in _openssl("x509", "-in", str(certs / "ca.pem"), "-noout", "-ext", "basicConstraints")
    # The key belongs to the certificate.
    assert _openssl("x509", "-in", str(certs / "node.pem"), "-noout", "-pubkey") == _openssl(
        "pkey", "-in", str(certs / "node-key.pem"), "-pubout"
    )


def test_make_certs_is_idempotent_and_reissues_on_request(tmp_path: Path) -> None:
    certs = tmp_path / "certs"
    assert _make_certs(str(certs)).returncode == 0
    first = {p.name: p.read_bytes() for p in certs.iterdir() if p.is_file()}

    again = _make_certs(str(certs))
    assert again.returncode == 0
    assert "nothing to do" in again.stderr
    assert {p.name: p.read_bytes() for p in certs.iterdir() if p.is_file()} == first

    # A new name re-issues the node certificate from the same CA.
    more = _make_certs("--san", "scheduler", "--san", "IP:10.0.0.5", str(certs))
    assert more.returncode == 0, more.stderr
    assert (certs / "ca.pem").read_bytes() == first["ca.pem"]
    assert (certs / "node.pem").read_bytes() != first["node.pem"]
    ext = _openssl("x509", "-in", str(certs / "node.pem"), "-noout", "-ext", "subjectAltName")
    assert "DNS:scheduler" in ext and "IP Address:10.0.0.5" in ext and "IP Address:127.0.0.1" in ext

    # Loose permissions on an existing key are tightened.
    (certs / "node-key.pem").chmod(0o644)
    assert _make_certs("--san", "scheduler", "--san", "IP:10.0.0.5", str(certs)).returncode == 0
    assert stat.S_IMODE((certs / "node-key.pem").stat().st_mode) == 0o600

    forced = _make_certs("--force", str(certs))
    assert forced.returncode == 0
    assert (certs / "ca.pem").read_bytes() != first["ca.pem"]
    assert "OK" in _openssl("verify", "-CAfile", str(certs / "ca.pem"), str(certs / "node.pem"))


def test_make_certs_reissues_a_node_certificate_from_another_ca(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert _make_certs(str(a)).returncode == 0
    assert _make_certs(str(b)).returncode == 0
    (a / "node.pem").write_bytes((b / "node.pem").read_bytes())
    proc = _make_certs(str(a))
    assert proc.returncode == 0
    assert "issuing the node certificate" in proc.stderr
    assert "OK" in _openssl("verify", "-CAfile", str(a / "ca.pem"), str(a / "node.pem"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "missing DIR"),
        (("a", "b"), "expected one directory"),
        (("--days", "0", "d"), "--days must be a positive integer"),
        (("--san", "DNS:bad name", "d"), "--san must look like"),
        (("--frob", "d"), "unknown option"),
    ],
)
def test_make_certs_rejects_bad_usage(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    proc = subprocess.run(
        ["bash", str(MAKE_CERTS), *args], capture_output=True, text=True, timeout=30, cwd=tmp_path
    )
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not (tmp_path / "d").exists()


def test_make_certs_help() -> None:
    proc = _make_certs("--help")
    assert proc.returncode == 0
    assert "subjectAltName" in proc.stdout and "--san" in proc.stdout and "--force" in proc.stdout


def test_cluster_dir_holds_the_documented_files() -> None:
    for name in ("README.md", "local.sh", "make-certs.sh", "tls.yaml", "docker-compose.yml", "Dockerfile",
                 "slurm/slurm_cluster.py", "kubernetes/daskcluster.yaml", "kubernetes/daskjob.yaml"):  # fmt: skip
        assert (CLUSTER_DIR / name).is_file(), name
