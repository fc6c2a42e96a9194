"""Failures at the command line's edges end in one line on standard error and the right exit code, in bounded time:
the top-level handler, scheduler addresses that are not usable schedulers, a scheduler killed mid-run, and worker
task errors (no traceback, no data-dependent value, even with ``-q``)."""

from __future__ import annotations

import contextlib
import http.server
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import dppca_dask.cli.info as info_command
from dppca_dask.cli import _OneLine, main
from dppca_dask.coordinator import client as client_module
from dppca_dask.errors import BudgetExceededError, ClusterLostError, InvalidParameterError

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "cluster"))
from _local_cluster import (  # noqa: E402,F401
    LoopbackCluster, running_cluster, started_here,
)
from _processes import deaf_to_sigint, handles_sigint, this_process_deaf_to_sigint  # noqa: E402


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-3000:]
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def store(tmp_path: Path, seed: int) -> Path:
    """A small store: 300 rows, 12 columns, one partition."""
    rng = np.random.default_rng(seed)
    src = tmp_path / "small.svm"
    src.write_text("".join(
        "1 " + " ".join(f"{c + 1}:{rng.random():.3f}" for c in sorted(rng.choice(12, 3, replace=False))) + "\n"
        for _ in range(300)
    ))
    out = tmp_path / "small.zarr"
    assert main(["-q", "ingest", str(src), "--out", str(out), "--n-features", "12"]) == 0
    return out


@pytest.fixture
def no_tls_config(monkeypatch: pytest.MonkeyPatch) -> None:
    import dask.config

    for name in list(os.environ):
        if name.startswith("DASK_DISTRIBUTED__COMM__"):
            monkeypatch.delenv(name)
    monkeypatch.setattr(dask.config, "config", dask.config.config.copy())
    dask.config.set({"distributed.comm.tls.ca-file": None, "distributed.comm.tls.client.cert": None,
                     "distributed.comm.tls.client.key": None})


# ------------------------------------------------------------------------------------------------ top level
def _handler_raising(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    def handler(args: object) -> int:
        raise exc

    monkeypatch.setattr(info_command, "run", handler)


def test_package_error_exits_with_its_code_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _handler_raising(monkeypatch, BudgetExceededError("requested epsilon=2 exceeds the remaining 1"))
    code, _, err = run(capsys, "info", "x.zarr")
    assert code == 3
    assert assert_one_line(err) == "dppca-dask info: error: requested epsilon=2 exceeds the remaining 1"


def test_unexpected_error_is_one_line_without_its_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _handler_raising(monkeypatch, ValueError("n_rows=49749, nnz=579586"))
    code, _, err = run(capsys, "info", "x.zarr")
    assert code == 1
    line = assert_one_line(err)
    assert line.startswith("dppca-dask info: error: unexpected ValueError at test_cli_failures.py:")
    assert line.endswith("run with --debug for the traceback")
    assert "49749" not in err and "579586" not in err


def test_debug_prints_the_traceback(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _handler_raising(monkeypatch, ValueError("details"))
    code, _, err = run(capsys, "--debug", "info", "x.zarr")
    assert code == 1
    assert "Traceback (most recent call last)" in err and "ValueError: details" in err
    assert err.strip().splitlines()[-1].startswith("dppca-dask info: error: unexpected ValueError")


def test_os_error_keeps_its_reason_and_file(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _handler_raising(monkeypatch, PermissionError(13, "Permission denied", "out/result.json"))
    code, _, err = run(capsys, "info", "x.zarr")
    assert code == 1
    assert "PermissionError (Permission denied: 'out/result.json')" in assert_one_line(err)


def test_keyboard_interrupt_exits_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _handler_raising(monkeypatch, KeyboardInterrupt())
    code, _, err = run(capsys, "info", "x.zarr")
    assert code == 130
    assert assert_one_line(err) == "dppca-dask info: interrupted"


def test_distributed_cluster_loss_exits_5(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from distributed.client import FutureCancelledError

    _handler_raising(monkeypatch, FutureCancelledError("dppca-powerstep-1-reduce", "scheduler-connection-lost"))
    code, _, err = run(capsys, "info", "x.zarr")
    assert code == ClusterLostError.exit_code == 5
    line = assert_one_line(err)
    assert "lost its Dask cluster" in line and "no result was released" in line


def test_quiet_silences_distributed_and_otherwise_warnings(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    main(["-q", "info", str(tmp_path / "missing.zarr")])
    for name in ("distributed", "distributed.client", "distributed.worker", "tornado"):
        assert logging.getLogger(name).getEffectiveLevel() > logging.CRITICAL, name
    main(["info", str(tmp_path / "missing.zarr")])
    for name in ("distributed", "distributed.client", "distributed.worker"):
        assert logging.getLogger(name).getEffectiveLevel() == logging.WARNING, name
    capsys.readouterr()


def test_log_records_lose_their_tracebacks() -> None:
    try:
        raise ValueError("secret 49749")
    except ValueError:
        import sys as _sys

        exc_info = _sys.exc_info()
    keep = logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, "Compute Failed\nTask: %s", ("x",),
                             exc_info)
    assert _OneLine().filter(keep)
    assert keep.getMessage() == "Compute Failed" and keep.exc_info is None
    bare = logging.LogRecord("distributed.client", logging.ERROR, __file__, 1, "", (), exc_info)
    assert not _OneLine().filter(bare)
    plain = logging.LogRecord("dppca_dask", logging.WARNING, __file__, 1, "one %s", ("line",), None)
    assert _OneLine().filter(plain) and plain.getMessage() == "one line"


# ------------------------------------------------------------------------------- addresses that are not usable
def _serve(handle: object) -> Iterator[int]:
    """A TCP server on 127.0.0.1 calling ``handle(conn)`` for each connection, in a thread; yields its port."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                handle(conn)  # type: ignore[operator]

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        server.close()


@pytest.fixture
def http_port() -> Iterator[int]:
    """A real HTTP server (it waits for a request before it says anything)."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def banner_port() -> Iterator[int]:
    """A server that speaks first, like SSH or an HTTP server answering at once: its first 8 bytes, read as
    distributed's frame header, announce an absurd size (b"HTTP/1.1" is 3.6e18 bytes)."""
    def handle(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        time.sleep(0.5)

    yield from _serve(handle)


def test_http_port_is_refused_within_the_handshake_timeout(
    store: Path, http_port: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(client_module, "HANDSHAKE_TIMEOUT", 1.0)
    started = time.monotonic()
    code, _, err = run(capsys, "pca", str(store), "--epsilon", "1", "--delta", "1e-6",
                       "--scheduler", f"tcp://127.0.0.1:{http_port}")
    assert time.monotonic() - started < 10
    assert code == 2
    line = assert_one_line(err)
    assert f"'tcp://127.0.0.1:{http_port}' is not a Dask scheduler: it sent no Dask handshake within 1 s" in line


def test_a_peer_announcing_a_huge_frame_is_refused_at_once(
    store: Path, banner_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    code, _, err = run(capsys, "pca", str(store), "--epsilon", "1", "--delta", "1e-6",
                       "--scheduler", f"127.0.0.1:{banner_port}")
    assert time.monotonic() - started < 10
    assert code == 2
    assert "is not a Dask scheduler: what answers there does not speak Dask's protocol" in assert_one_line(err)


def test_nothing_listening_is_refused(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        code, _, err = run(capsys, "pca", str(store), "--epsilon", "1", "--delta", "1e-6",
                           "--scheduler", f"tcp://127.0.0.1:{port}")
    assert code == 2
    assert "cannot reach the Dask scheduler at" in assert_one_line(err)


@pytest.mark.parametrize("address", ["http://127.0.0.1:8786", "tcp://127.0.0.1", "tcp://127.0.0.1:99999"])
def test_malformed_addresses_are_refused(address: str, store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "pca", str(store), "--epsilon", "1", "--delta", "1e-6", "--scheduler", address)
    assert code == 2
    assert f"scheduler address must be tcp://HOST:PORT or tls://HOST:PORT (or a scheduler .json file); got '{address}'" \
        in assert_one_line(err)


def test_tls_address_without_certificates_exits_2(
    store: Path, no_tls_config: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "pca", str(store), "--epsilon", "1", "--delta", "1e-6",
                       "--scheduler", "tls://127.0.0.1:8786")
    assert code == 2
    line = assert_one_line(err)
    assert "uses TLS but no client certificate is configured" in line and "DASK_DISTRIBUTED__COMM__TLS__CA_FILE" in line


def test_tls_certificates_that_cannot_be_read_exit_2(tmp_path: Path) -> None:
    from distributed.security import Security

    missing = str(tmp_path / "missing.pem")
    sec = Security(tls_ca_file=missing, tls_client_cert=missing, tls_client_key=missing)
    with pytest.raises(InvalidParameterError, match="cannot load the TLS certificates for 'tls://127.0.0.1:1'"):
        client_module.check_scheduler("tls://127.0.0.1:1", security=sec)


def test_tls_to_a_server_that_is_not_tls_exits_2(banner_port: int, tmp_path: Path) -> None:
    from distributed.security import Security

    certs = tmp_path / "certs"
    subprocess.run(["bash", str(REPO / "cluster" / "make-certs.sh"), str(certs)], check=True, capture_output=True,
                   timeout=60)
    sec = Security(tls_ca_file=str(certs / "ca.pem"), tls_client_cert=str(certs / "node.pem"),
                   tls_client_key=str(certs / "node-key.pem"), require_encryption=True)
    with pytest.raises(InvalidParameterError, match="the TLS handshake with .* failed"):
        client_module.check_scheduler(f"tls://127.0.0.1:{banner_port}", security=sec, timeout=5)


def test_damaged_scheduler_file_exits_2(tmp_path: Path, store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "scheduler.json"
    path.write_text('{"type": "Scheduler"')
    code, _, err = run(capsys, "pca", str(store), "--epsilon", "1", "--delta", "1e-6", "--scheduler", str(path))
    assert code == 2
    assert f"'{path}' is not a Dask scheduler file" in assert_one_line(err)


def test_a_client_that_cannot_connect_after_the_check_exits_2(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Refusing:  # a distributed.Client whose connection fails after the address check passed
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise OSError("Timed out during handshake while connecting to tcp://127.0.0.1:8786 after 20 s")

    monkeypatch.setattr(client_module, "check_scheduler", lambda address, **kwargs: None)
    import distributed

    monkeypatch.setattr(distributed, "Client", Refusing)  # connect imports it when a cluster is needed
    code, _, err = run(capsys, "pca", str(store), "--epsilon", "1", "--delta", "1e-6",
                       "--scheduler", "tcp://127.0.0.1:8786")
    assert code == 2
    assert "cannot connect to the Dask scheduler at 'tcp://127.0.0.1:8786' (OSError)" in assert_one_line(err)


def test_workers_dying_repeatedly_is_a_cluster_loss() -> None:
    from distributed.scheduler import KilledWorker

    exc = KilledWorker("dppca-powerstep-map-3", "tcp://127.0.0.1:4000", allowed_failures=3)
    assert client_module.is_cluster_loss(exc)
    lost = client_module.cluster_lost_error(exc, "embedded LocalCluster")
    assert isinstance(lost, ClusterLostError)
    assert "workers running one of its tasks died repeatedly (out of memory? see the worker logs)" in str(lost)
    assert not client_module.is_cluster_loss(ValueError("x"))


def test_missing_scheduler_file_exits_2(tmp_path: Path, store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nowhere" / "scheduler.json"
    code, _, err = run(capsys, "pca", str(store), "--epsilon", "1", "--delta", "1e-6", "--scheduler", str(path))
    assert code == 2
    assert f"scheduler file '{path}' does not exist" in assert_one_line(err)


def test_a_real_scheduler_passes_the_check() -> None:
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=False, protocol="tcp://", host="127.0.0.1",
                      dashboard_address=None, scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        assert client_module.check_scheduler(cluster.scheduler_address) is None
        # other schemes of distributed are left to it
        assert client_module.check_scheduler("inproc://10.0.0.1/1/1") is None


# --------------------------------------------------------------------------------------- real processes
#: ``python -m dppca_dask`` with SIGINT as a terminal gives it: handled (Python's default handler), not blocked.
#: A test process started in the background by a non-interactive shell (``make test &``, CI runners) has SIGINT
#: ignored, and its children inherit that: Ctrl-C would then be ignored by the command under test for a reason that
#: is not the command's.
AS_FROM_A_TERMINAL = (
    "import runpy, signal, sys; "
    "signal.signal(signal.SIGINT, signal.default_int_handler); "
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
    "sys.argv[0] = 'dppca-dask'; "
    "runpy.run_module('dppca_dask', run_name='__main__', alter_sys=True)"
)


@contextlib.contextmanager
def _cli(*argv: str) -> Iterator[subprocess.Popen[str]]:
    """``dppca-dask ARGV`` as started from a terminal (see ``AS_FROM_A_TERMINAL``), in a session of its own (so that
    a signal to its process group reaches what it started, as Ctrl-C in a terminal does); on the way out, also when
    the test fails, whatever is left of the session is killed and the command waited for."""
    proc = subprocess.Popen([sys.executable, "-c", AS_FROM_A_TERMINAL, *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
                            start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:  # not reaped: its pid, and the group it leads, are still this command's
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
        for pid in _session_processes(proc.pid):
            if started_here(pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


@pytest.mark.slow
@pytest.mark.parametrize("quiet", [True, False])
def test_a_task_failing_on_workers_prints_one_line_without_data(store: Path, quiet: bool) -> None:
    # A damaged chunk fails the partition's task on a worker of the embedded LocalCluster, whose processes share
    # this command's standard error: before, distributed's "Compute Failed" log printed the task's arguments (a
    # store repr with its counts) and an 8 KB traceback there, even with -q.
    for chunk in (store / "X" / "data" / "c").iterdir():
        chunk.write_bytes(b"garbage-garbage-garbage")
    argv = (["-q"] if quiet else []) + ["pca", str(store), "--epsilon", "1", "--delta", "1e-6"]
    with _cli(*argv) as proc:
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err[-3000:]
    assert_one_line(err)
    assert "n_rows" not in err and "nnz" not in err and "Compute Failed" not in err
    assert err.startswith("dppca-dask pca: error: ")


@pytest.mark.slow
def test_scheduler_killed_mid_run_exits_5_in_one_line(tmp_path: Path) -> None:
    from dppca_dask.datasets import PlantedSpec, write_low_coherence

    spec = PlantedSpec(n_rows=40_000, n_cols=200, nnz_per_row=20, support=50, signal_share=0.01, seed=3)
    data = tmp_path / "planted.zarr"
    write_low_coherence(str(data), spec, rows_per_partition=5_000, overwrite=True)
    with running_cluster(tmp_path / "run", workers=2) as cluster, \
            _cli("pca", str(data), "--epsilon", "1", "--delta", "1e-6", "--n-iter", "200", "--scheduler",
                 cluster.address) as proc:
        scheduler_pid = cluster.pid_files()["scheduler"]
        # Kill the scheduler once the run's tasks reach it.
        with cluster.client() as monitor:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                if monitor.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)):
                    break
                time.sleep(0.05)
            assert proc.poll() is None, "the run ended before the scheduler was killed"
        killed = time.monotonic()
        os.kill(scheduler_pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
        elapsed = time.monotonic() - killed
    assert proc.returncode == 5, err[-3000:]
    assert "Traceback" not in err
    *logged, line = err.strip().splitlines()
    assert line.startswith("dppca-dask pca: error: the run lost its Dask cluster (scheduler tcp://127.0.0.1:")
    assert "no result was released" in line
    # Without -q distributed (and asyncio under it) may log their own one-line warnings or errors (a failed
    # reconnection), nothing else: in the CLI's format or the nanny's ("distributed.nanny WARNING: ...").
    assert all(re.search(r"(^|\s)(distributed\.[\w.]+|asyncio|tornado[\w.]*) ", entry) for entry in logged), logged
    assert elapsed < 45


def test_demo_refuses_zero_workers_before_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    workdir = tmp_path / "demo"
    code, _, err = run(capsys, "demo", "--workers", "0", "--workdir", str(workdir))
    assert code == 2
    assert assert_one_line(err) == ("dppca-dask demo: error: --workers must be >= 1; got 0; omit it for one per core")
    assert not workdir.exists()


# ----------------------------------------------------------------------------------------- Ctrl-C (SIGINT)
def _sigint_state() -> tuple[object, bool]:
    """This process's SIGINT handler and whether this thread blocks SIGINT: what a process started from here
    inherits about Ctrl-C."""
    return signal.getsignal(signal.SIGINT), signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, [])


class _FailingCluster:
    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("no cluster here")


def _user_handler(signum: int, frame: object) -> None:  # pragma: no cover - never called
    raise KeyboardInterrupt


@pytest.mark.parametrize("handler", [signal.default_int_handler, _user_handler, signal.SIG_IGN],
                         ids=["default", "application", "ignored"])
def test_a_failed_cluster_start_leaves_sigint_as_it_was(monkeypatch: pytest.MonkeyPatch, handler: object) -> None:
    import dask
    import distributed

    monkeypatch.setattr(distributed, "LocalCluster", _FailingCluster)
    previous = signal.signal(signal.SIGINT, handler)  # type: ignore[arg-type]
    try:
        before = _sigint_state()
        with dask.config.set({"dppca_dask.cluster.use-active-client": False}), \
                pytest.raises(RuntimeError, match="no cluster here"), client_module.connect(n_workers=1):
            pass  # pragma: no cover - not reached
        assert _sigint_state() == before == (handler, False)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_failed_cluster_start_in_another_thread_leaves_its_mask(monkeypatch: pytest.MonkeyPatch) -> None:
    import dask
    import distributed

    monkeypatch.setattr(distributed, "LocalCluster", _FailingCluster)
    seen: list[object] = []

    def start() -> None:
        before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        with dask.config.set({"dppca_dask.cluster.use-active-client": False}):
            try:
                with client_module.connect(n_workers=1):
                    pass  # pragma: no cover - not reached
            except RuntimeError as exc:
                seen.append(exc)
        seen.append(signal.pthread_sigmask(signal.SIG_BLOCK, []) == before)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join(30)
    assert len(seen) == 2 and isinstance(seen[0], RuntimeError) and seen[1] is True


@pytest.mark.slow
def test_the_embedded_cluster_keeps_sigint_for_this_process_and_from_its_workers() -> None:
    # Ctrl-C reaches the whole process group: the caller ends the run; the workers, also those a nanny restarts
    # after the start, never act on it. The caller's SIGINT handling is the same during and after the run.
    import dask

    before = _sigint_state()
    with dask.config.set({"dppca_dask.cluster.use-active-client": False}), \
            client_module.connect(n_workers=1, memory_limit="1GiB") as client:
        assert _sigint_state() == before
        assert list(client.run(this_process_deaf_to_sigint).values()) == [True]
        first = set(client.run(os.getpid).values())
        client.restart()
        assert set(client.run(os.getpid).values()).isdisjoint(first)  # new worker processes
        assert list(client.run(this_process_deaf_to_sigint).values()) == [True]
    assert _sigint_state() == before


@pytest.mark.slow
@pytest.mark.parametrize(("signum", "whole_group", "code"), [
    (signal.SIGINT, True, 130),  # Ctrl-C in a terminal
    (signal.SIGTERM, False, -signal.SIGTERM),  # kill PID
    (signal.SIGTERM, True, -signal.SIGTERM),  # a service manager or CI stopping the job
], ids=["ctrl-c", "sigterm", "sigterm-group"])
def test_an_interrupted_run_exits_and_leaves_no_process(
    tmp_path: Path, signum: int, whole_group: bool, code: int
) -> None:
    import psutil

    from dppca_dask.datasets import PlantedSpec, write_low_coherence

    spec = PlantedSpec(n_rows=20_000, n_cols=200, nnz_per_row=20, support=50, signal_share=0.01, seed=3)
    data = tmp_path / "planted.zarr"
    write_low_coherence(str(data), spec, rows_per_partition=5_000, overwrite=True)
    with _cli("pca", str(data), "--epsilon", "1", "--delta", "1e-6", "--n-iter", "1000", "--mechanism",
              "adaptive-power", "--executor", "cluster") as proc:
        # Wait until the embedded cluster is up: the command accepts SIGINT again (it blocks it while it starts
        # the workers, which inherit that) and its two worker processes run, deaf to SIGINT.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None:
            workers = [p for p in psutil.Process(proc.pid).children(recursive=True) if _is_worker(p)]
            if len(workers) >= 2 and all(deaf_to_sigint(p.pid) for p in workers) and handles_sigint(proc.pid):
                break
            time.sleep(0.2)
        time.sleep(1)
        assert proc.poll() is None, "the run ended before the interrupt"
        assert len(workers) >= 2, "the embedded cluster did not start within 90 s"
        assert all(deaf_to_sigint(p.pid) for p in workers), "a worker would act on Ctrl-C"
        if whole_group:
            os.killpg(proc.pid, signum)
        else:
            os.kill(proc.pid, signum)
        _, err = proc.communicate(timeout=60)
        # The workers exit on their own after the command (their nanny kills a stuck one after a few seconds, a
        # worker whose parent died exits at once).
        deadline = time.monotonic() + 20
        while (left := _session_processes(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.25)
    assert left == [], "processes of the interrupted command are still running"
    assert proc.returncode == code, err[-3000:]
    if signum == signal.SIGINT:
        assert "Traceback" not in err
        *logged, line = err.strip().splitlines()
        assert line == "dppca-dask pca: interrupted"
        # only the libraries' own one-line log entries before it (distributed's, in its format or the nanny's;
        # under load asyncio's "Future exception was never retrieved" of a connection closed by the shutdown)
        assert all(re.search(r"(^|\s)(distributed\.[\w.]+|asyncio|tornado[\w.]*) ", entry) for entry in logged), \
            logged


def _session_processes(sid: int) -> list[int]:
    """Running processes (zombies aside) of session ``sid``."""
    import psutil

    return [p.pid for p in psutil.process_iter() if _session(p) == sid and _alive(p)]


def _is_worker(process: object) -> bool:
    """A worker process of an embedded LocalCluster (spawned by multiprocessing; not its resource tracker)."""
    try:
        return "spawn_main" in " ".join(process.cmdline())  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - gone in the meantime
        return False


def _alive(process: object) -> bool:
    try:
        return process.status() != "zombie"  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - gone in the meantime
        return False


def _session(process: object) -> int | None:
    try:
        return os.getsid(process.pid)  # type: ignore[attr-defined]
    except OSError:
        return None


@pytest.mark.slow
def test_tls_cluster_with_and_without_its_client_settings(
    loopback_tls_cluster: LoopbackCluster, store: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], no_tls_config: None, tmp_path: Path,
) -> None:
    argv = ["-q", "pca", str(store), "--epsilon", "1", "--delta", "1e-6", "--json"]
    with_env = subprocess.run([sys.executable, "-m", "dppca_dask", *argv, "--scheduler", loopback_tls_cluster.address],
                              capture_output=True, text=True, timeout=120, env=loopback_tls_cluster.client_env())
    assert with_env.returncode == 0, with_env.stderr[-3000:]
    # nothing on stderr but the warnings computed from released values: the default bound clips most of this store's
    # rows, and the small store's release may be dominated by its noise
    assert [line for line in with_env.stderr.splitlines()
            if "row_norm_bound=1 clipped about" not in line and "dominated by its privacy noise" not in line] == []
    # The same address without the certificates, and the TLS port addressed as tcp://.
    code, _, err = run(capsys, *argv, "--scheduler", loopback_tls_cluster.address)
    assert code == 2 and "uses TLS but no client certificate is configured" in assert_one_line(err)
    monkeypatch.setattr(client_module, "HANDSHAKE_TIMEOUT", 1.0)
    plain = loopback_tls_cluster.address.replace("tls://", "tcp://")
    code, _, err = run(capsys, *argv, "--scheduler", plain)
    assert code == 2 and "or a TLS scheduler given as tcp://?" in assert_one_line(err)
    # A client certificate from another CA: the scheduler refuses it (mutual TLS).
    from distributed.security import Security

    other = tmp_path / "other-ca"
    subprocess.run(["bash", str(REPO / "cluster" / "make-certs.sh"), str(other)], check=True, capture_output=True,
                   timeout=60)
    foreign = Security(tls_ca_file=str(other / "ca.pem"), tls_client_cert=str(other / "node.pem"),
                       tls_client_key=str(other / "node-key.pem"), require_encryption=True)
    with pytest.raises(InvalidParameterError, match="TLS (handshake with|connection to) '.*' failed"):
        client_module.check_scheduler(loopback_tls_cluster.address, security=foreign, timeout=10)
