"""Obtaining a Dask client: an embedded ``LocalCluster`` by default, or a running cluster by address.

Connecting to an address first checks, with a bounded timeout, that a Dask scheduler answers there: a plain socket
(wrapped in TLS for ``tls://``) reads the handshake that a scheduler sends on every new connection, and refuses a
peer that sends nothing (an HTTP port waits for a request), a header announcing more than
:data:`MAX_HANDSHAKE_BYTES`, or anything that does not decode as a Dask handshake. distributed itself would wait
without a deadline, or try to allocate whatever size the first eight bytes of the peer's answer spell.

Without a client or address, the active Dask client (``distributed.get_client()``: one the user created, or the one
a task runs under) is used when there is one; otherwise an embedded ``LocalCluster`` is started, shaped by
:class:`ClusterOptions` whose defaults live in Dask's configuration under ``dppca_dask.cluster`` (the
``dppca_dask.yaml`` file beside this package, registered with ``dask.config.update_defaults``).

While a run uses the cluster, the loss of the scheduler (killed, restarted, unreachable) or of workers dying over and
over ends the run with :class:`~dppca_dask.errors.ClusterLostError` instead of distributed's own exceptions.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import ssl
import struct
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask.config
import yaml
from distributed import Client, LocalCluster

from dppca_dask.errors import ClusterLostError, InvalidParameterError

__all__ = [
    "CONNECT_TIMEOUT",
    "ClusterOptions",
    "HANDSHAKE_TIMEOUT",
    "MAX_HANDSHAKE_BYTES",
    "MAIN_GUARD_ADVICE",
    "active_client",
    "check_scheduler",
    "cluster_lost_error",
    "connect",
    "is_cluster_loss",
]

log = logging.getLogger(__name__)

#: Seconds to reach a scheduler (and the ``Client``'s own connection timeout).
CONNECT_TIMEOUT = 20.0
#: Seconds to wait for the handshake a scheduler sends as soon as it accepts a connection.
HANDSHAKE_TIMEOUT = 10.0
#: A scheduler's handshake is a few hundred bytes; a header announcing more than this is not a Dask scheduler.
MAX_HANDSHAKE_BYTES = 1 << 20

#: The ``dppca_dask`` namespace of Dask's configuration (its documented defaults).
with open(Path(__file__).resolve().parent.parent / "dppca_dask.yaml", encoding="utf-8") as _f:
    CONFIG_DEFAULTS: dict[str, Any] = yaml.safe_load(_f)
dask.config.update_defaults(CONFIG_DEFAULTS)

_SCHEMES = ("tcp", "tls")
_UNCHECKED_SCHEMES = ("inproc", "ucx", "ws", "wss")


@dataclass(frozen=True, slots=True)
class ClusterOptions:
    """How to start the embedded ``LocalCluster`` (used only when no client, address or active client is there).

    A field left ``None`` takes its value from Dask's configuration, ``dppca_dask.cluster.<field-with-dashes>``
    (see ``dppca_dask.yaml``), read when the cluster starts.
    """

    n_workers: int | None = None
    """Worker processes (configuration default: ``dask.system.CPU_COUNT``)."""
    threads_per_worker: int | None = None
    """Threads per worker process (configuration default: 1)."""
    memory_limit: str | int | float | None = None
    """Memory limit per worker: bytes, a string such as ``"4GiB"``, a fraction of the machine's, or ``"auto"``."""
    dashboard_address: str | None = None
    """Address to serve the dashboard on (``"127.0.0.1:8787"``, ``":0"`` for any free port); its link is printed.
    ``None`` (with the configuration's ``null``): no dashboard and no HTTP port left open."""

    def __post_init__(self) -> None:
        for name in ("n_workers", "threads_per_worker"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise InvalidParameterError(f"{name} must be an integer >= 1; got {value!r}")
        if self.memory_limit is not None:
            _parse_memory_limit(self.memory_limit)
        if self.dashboard_address is not None and not isinstance(self.dashboard_address, str):
            raise InvalidParameterError(
                f"dashboard_address must be an address such as '127.0.0.1:8787' or None; got {self.dashboard_address!r}"
            )

    def resolved(self) -> ClusterOptions:
        """These options with every ``None`` replaced by the configuration's value (``n_workers`` by
        ``dask.system.CPU_COUNT`` when the configuration says null)."""
        from dask.system import CPU_COUNT

        def pick(name: str, key: str) -> Any:
            value = getattr(self, name)
            return value if value is not None else dask.config.get(f"dppca_dask.cluster.{key}", default=None)

        n_workers = pick("n_workers", "n-workers")
        threads = pick("threads_per_worker", "threads-per-worker")
        return ClusterOptions(
            n_workers=int(n_workers) if n_workers is not None else max(int(CPU_COUNT), 1),
            threads_per_worker=int(threads) if threads is not None else 1,
            memory_limit=pick("memory_limit", "memory-limit") or "auto",
            dashboard_address=pick("dashboard_address", "dashboard-address"),
        )


def _parse_memory_limit(value: Any) -> None:
    from dask.utils import parse_bytes

    if isinstance(value, str) and value == "auto":
        return
    try:
        number = parse_bytes(value) if isinstance(value, str) else float(value)
    except (ValueError, TypeError):
        number = -1
    if isinstance(value, bool) or not number > 0:
        raise InvalidParameterError(
            f"memory_limit must be bytes (> 0), a size such as '4GiB', a fraction of memory or 'auto'; got {value!r}"
        )


#: What to do when the embedded cluster's worker processes cannot start because the calling script has no
#: ``if __name__ == "__main__":`` guard (each spawned process re-runs the script and starts a cluster of its own).
MAIN_GUARD_ADVICE = (
    "the embedded LocalCluster's worker processes re-ran your script and tried to start a cluster of their own: "
    "put the code that calls dppca_dask under `if __name__ == \"__main__\":` (Python's multiprocessing needs "
    "it), or pass client=\"local\" to run in this process without Dask, or a Client / scheduler address"
)


def active_client() -> Client | None:
    """The Dask client that is active here (the default client, or the one of the worker running this task), or
    ``None``."""
    from distributed import get_client

    try:
        return get_client()
    except ValueError:
        return None


def _in_spawn_bootstrap() -> bool:
    """Whether this process is a spawned child still importing its parent's main module."""
    import multiprocessing

    return bool(getattr(multiprocessing.current_process(), "_inheriting", False))


def _is_main_test(test: Any) -> bool:
    import ast

    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)):
        return False
    sides = [test.left, test.comparators[0]]
    names = [side.id for side in sides if isinstance(side, ast.Name)]
    texts = [side.value for side in sides if isinstance(side, ast.Constant)]
    return names == ["__name__"] and texts == ["__main__"]


def _unguarded_main_call() -> bool:
    """Whether this call comes from the top level of the main script outside ``if __name__ == "__main__":``
    (spawned worker processes re-run that code). Read from the caller's line in the script's syntax tree."""
    import ast
    import inspect

    main = sys.modules.get("__main__")
    script = getattr(main, "__file__", None)
    if not script or not os.path.isfile(script) or os.path.basename(script) == "__main__.py":
        return False  # multiprocessing never re-runs a __main__.py (python -m PACKAGE, a directory, a zip)
    script = os.path.realpath(script)
    frame = inspect.currentframe()
    while frame is not None:
        code = frame.f_code
        if code.co_name == "<module>" and frame.f_globals.get("__name__") == "__main__" \
                and os.path.realpath(code.co_filename) == script:
            break
        frame = frame.f_back
    if frame is None:
        return False
    line = frame.f_lineno
    try:
        with open(script, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return False
    return not any(
        isinstance(node, ast.If) and _is_main_test(node.test) and node.lineno <= line <= (node.end_lineno or line)
        for node in ast.walk(tree)
    )


def _main_is_a_script() -> bool:
    main = sys.modules.get("__main__")
    return main is not None and getattr(main, "__file__", None) is not None


def _close_http_servers(cluster: Any, client: Client) -> None:
    """Stop the HTTP servers (health, metrics) that distributed opens on every scheduler and worker even without a
    dashboard: with ``dashboard_address=None`` no port is left listening."""

    def stop(dask_worker: Any = None, dask_scheduler: Any = None) -> None:
        server = getattr(dask_worker or dask_scheduler, "http_server", None)
        if server is not None:
            server.stop()

    client.run(stop)
    client.run_on_scheduler(stop)


def _split_address(address: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of a ``tcp://`` or ``tls://`` address (``HOST:PORT`` means tcp); ``port`` is 0 for
    the other schemes distributed knows (``inproc``, ``ucx``, ``ws``, ``wss``), which are not checked here."""
    scheme, sep, location = address.partition("://")
    if not sep:
        scheme, location = "tcp", address
    if scheme in _UNCHECKED_SCHEMES:
        return scheme, location, 0
    host, colon, port_text = location.rpartition(":")
    host = host.strip("[]")
    if scheme not in _SCHEMES or not colon or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise InvalidParameterError(
            f"scheduler address must be tcp://HOST:PORT or tls://HOST:PORT (or a scheduler .json file); "
            f"got '{address}'"
        )
    return scheme, host, int(port_text)


def _tls_context(address: str, security: Any | None) -> tuple[Any, ssl.SSLContext]:
    """The ``Security`` to connect with (given, or from the Dask configuration) and its client TLS context."""
    from distributed.security import Security

    sec = security if security is not None else Security()
    if not (sec.tls_ca_file and (sec.tls_client_cert or sec.tls_cert)):
        raise InvalidParameterError(
            f"scheduler address '{address}' uses TLS but no client certificate is configured; give the CA file, "
            "certificate and key (a job's [cluster] tls_ca_file, tls_cert, tls_key), or set "
            "DASK_DISTRIBUTED__COMM__TLS__CA_FILE, DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT and "
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY (cluster/local.sh writes them to RUN_DIR/client.env)"
        )
    try:
        context = sec.get_connection_args("client")["ssl_context"]
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise InvalidParameterError(
            f"cannot load the TLS certificates for '{address}': {exc}; check the CA, certificate and key files"
        ) from None
    return sec, context


def _read_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 1 << 16))
        if not chunk:
            raise ConnectionResetError("the peer closed the connection")
        out += chunk
    return bytes(out)


def _decode_handshake(sock: socket.socket) -> Any:
    """Read one message in distributed's TCP framing, refusing sizes above :data:`MAX_HANDSHAKE_BYTES`."""
    from distributed.protocol import loads
    from distributed.protocol.utils import unpack_frames

    (size,) = struct.unpack("<Q", _read_exactly(sock, 8))
    if not 0 < size <= MAX_HANDSHAKE_BYTES:
        raise ValueError("the first message's header is not a Dask one")
    frames, buffer_sizes = unpack_frames(_read_exactly(sock, size), partial=True)
    if sum(buffer_sizes) > MAX_HANDSHAKE_BYTES:
        raise ValueError("the first message is larger than a Dask handshake")
    frames = list(frames) + [_read_exactly(sock, n) for n in buffer_sizes]
    return loads(frames, deserialize=False)


def check_scheduler(
    address: str,
    *,
    security: Any | None = None,
    timeout: float = CONNECT_TIMEOUT,
    handshake_timeout: float | None = None,
) -> Any:
    """Check that a Dask scheduler answers at ``address``; return the ``Security`` to connect with.

    ``timeout`` bounds reaching the address (and the TLS handshake), ``handshake_timeout`` (default
    :data:`HANDSHAKE_TIMEOUT`) the wait for the scheduler's first message.

    Raises :class:`~dppca_dask.errors.InvalidParameterError` (exit code 2) when the address is malformed, a
    ``tls://`` address has no certificates, nothing listens, the TLS handshake fails, or what answers is not a Dask
    scheduler (see the module docstring).
    """
    scheme, host, port = _split_address(address)
    if scheme in _UNCHECKED_SCHEMES:
        return security
    context = None
    if scheme == "tls":
        security, context = _tls_context(address, security)
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
        raise InvalidParameterError(
            f"cannot reach the Dask scheduler at '{address}': {reason}; check the address and that the scheduler "
            "is running"
        ) from None
    try:
        sock = raw
        if context is not None:
            try:
                sock = context.wrap_socket(raw, server_hostname=host if context.check_hostname else None)
            except (ssl.SSLError, OSError) as exc:
                reason = getattr(exc, "reason", None) or type(exc).__name__
                raise InvalidParameterError(
                    f"the TLS handshake with '{address}' failed ({reason}); check that it is a TLS scheduler and "
                    "that its certificate is signed by your CA file (and yours by its)"
                ) from None
        wait = HANDSHAKE_TIMEOUT if handshake_timeout is None else handshake_timeout
        sock.settimeout(wait)
        try:
            message = _decode_handshake(sock)
            ok = isinstance(message, dict) and "compression" in message and "python" in message
        except TimeoutError:
            raise InvalidParameterError(
                f"'{address}' is not a Dask scheduler: it sent no Dask handshake within {wait:g} s (an HTTP port "
                "such as the dashboard's, or a TLS scheduler given as tcp://?); give the scheduler's own address "
                "(tcp://HOST:8786 by default, tls:// for a TLS cluster)"
            ) from None
        except ssl.SSLError as exc:
            raise InvalidParameterError(
                f"the TLS connection to '{address}' failed ({exc.reason or type(exc).__name__}); check that your "
                "certificate is signed by the scheduler's CA"
            ) from None
        except Exception:  # noqa: BLE001 - whatever the bytes were, they were not a handshake
            ok = False
        if not ok:
            raise InvalidParameterError(
                f"'{address}' is not a Dask scheduler: what answers there does not speak Dask's protocol"
                f"{' over TLS' if scheme == 'tls' else ''}; give the scheduler's own address (tcp://HOST:8786 by "
                "default, tls:// for a TLS cluster)"
            )
    finally:
        with contextlib.suppress(OSError):
            raw.close()
    return security


def _scheduler_file_address(path: str) -> str:
    try:
        if os.path.getsize(path) > MAX_HANDSHAKE_BYTES:
            raise ValueError("too large")
        with open(path, encoding="utf-8") as f:
            address = json.load(f)["address"]
        if not isinstance(address, str):
            raise TypeError("address is not a string")
    except (OSError, ValueError, KeyError, TypeError):
        raise InvalidParameterError(
            f"'{path}' is not a Dask scheduler file (JSON with an \"address\"); give the file the scheduler wrote "
            "with --scheduler-file, or its address"
        ) from None
    return address


def is_cluster_loss(exc: BaseException) -> bool:
    """Whether ``exc`` is distributed's way of saying that the scheduler or the workers went away."""
    from distributed.client import FutureCancelledError
    from distributed.comm.core import CommClosedError
    from distributed.scheduler import KilledWorker

    return isinstance(exc, (FutureCancelledError, CommClosedError, KilledWorker))


def cluster_lost_error(exc: BaseException, where: str) -> ClusterLostError:
    from distributed.scheduler import KilledWorker

    if isinstance(exc, KilledWorker):
        reason = "workers running one of its tasks died repeatedly (out of memory? see the worker logs)"
    else:
        reason = "the scheduler stopped or became unreachable"
    return ClusterLostError(
        f"the run lost its Dask cluster ({where}): {reason}; no result was released; run it again once the "
        "cluster is back (a ledger job's entry records whether its budget was spent: dppca-dask budget show)"
    )


@contextlib.contextmanager
def _translate_loss(where: str) -> Iterator[None]:
    try:
        yield
    except BaseException as exc:
        if is_cluster_loss(exc):
            raise cluster_lost_error(exc, where) from None
        raise


@contextlib.contextmanager
def connect(
    client: Client | str | None = None,
    *,
    n_workers: int | None = None,
    memory_limit: str | None = None,
    security: Any | None = None,
    timeout: float = CONNECT_TIMEOUT,
    cluster: ClusterOptions | None = None,
) -> Iterator[Client]:
    """Yield a ``distributed.Client``.

    Parameters
    ----------
    client
        ``None`` uses the active Dask client when there is one (``distributed.get_client()``; configuration
        ``dppca_dask.cluster.use-active-client``) and otherwise starts an embedded ``LocalCluster`` (by default one
        single-threaded worker process per core of ``dask.system.CPU_COUNT``, on 127.0.0.1, without a dashboard,
        closed on exit); a string is a scheduler address (``tcp://host:8786``, ``tls://...``) or a scheduler file
        (``*.json``); an existing ``Client`` is used as is and left open.
    n_workers, memory_limit
        For the embedded cluster only (shorthands for the fields of ``cluster``).
    security
        A ``distributed.security.Security`` for TLS connections to an address (default: the Dask configuration).
    timeout
        Seconds to reach the scheduler and read its handshake.
    cluster
        :class:`ClusterOptions` of the embedded cluster (fields left ``None`` come from Dask's configuration).

    Raises
    ------
    InvalidParameterError
        The scheduler cannot be used (see :func:`check_scheduler`), or the embedded cluster could not start because
        the calling script lacks an ``if __name__ == "__main__":`` guard; nothing has run.
    ClusterLostError
        The scheduler or the workers went away while the body ran.
    """
    options = cluster if cluster is not None else ClusterOptions()
    if n_workers is not None or memory_limit is not None:
        options = ClusterOptions(
            n_workers=n_workers if n_workers is not None else options.n_workers,
            threads_per_worker=options.threads_per_worker,
            memory_limit=memory_limit if memory_limit is not None else options.memory_limit,
            dashboard_address=options.dashboard_address,
        )
    if isinstance(client, Client):
        with _translate_loss(f"scheduler {client.scheduler.address}"):
            yield client
        return
    if isinstance(client, str):
        if not client:
            raise InvalidParameterError("scheduler address is empty; give tcp://HOST:PORT or omit it")
        kwargs: dict[str, Any] = {}
        if client.endswith(".json"):
            if not os.path.isfile(client):
                raise InvalidParameterError(
                    f"scheduler file '{client}' does not exist; give the file the scheduler wrote with "
                    "--scheduler-file (cluster/local.sh: RUN_DIR/scheduler.json), or its address"
                )
            address = _scheduler_file_address(client)
        else:
            address = client
        log.info("connecting to the Dask scheduler at %s", address)
        security = check_scheduler(address, security=security, timeout=timeout)
        if security is not None:
            kwargs["security"] = security
        try:
            remote = Client(address, timeout=f"{timeout}s", **kwargs)
        except (OSError, TimeoutError, ValueError, TypeError) as exc:
            raise InvalidParameterError(
                f"cannot connect to the Dask scheduler at '{address}' ({type(exc).__name__}); check the address, "
                "that the scheduler is running, and the TLS settings"
            ) from None
        with _translate_loss(f"scheduler {address}"):
            try:
                yield remote
            finally:
                with contextlib.suppress(Exception):
                    remote.close(timeout=5)
        return
    if client is not None:
        raise InvalidParameterError(
            f"client must be None, a scheduler address or a distributed.Client; got {type(client).__name__}"
        )
    if dask.config.get("dppca_dask.cluster.use-active-client", default=True):
        active = active_client()
        if active is not None:
            log.info("using the active Dask client (scheduler %s)", active.scheduler.address)
            with _translate_loss(f"scheduler {active.scheduler.address}"):
                yield active
            return
    if _in_spawn_bootstrap() or (
        dask.config.get("distributed.worker.multiprocessing-method", default="spawn") != "fork"
        and _unguarded_main_call()
    ):
        raise InvalidParameterError(MAIN_GUARD_ADVICE)
    options = options.resolved()
    log.info("starting an embedded LocalCluster with %d workers of %d thread(s)", options.n_workers,
             options.threads_per_worker)
    # The worker processes log at the level of this process's distributed logger (silent under the command
    # line's -q), and at warnings at most.
    worker_log_level = max(logging.getLogger("distributed").getEffectiveLevel(), logging.WARNING)
    dashboard = options.dashboard_address
    try:
        with _workers_ignore_sigint():
            local_cluster = LocalCluster(
                n_workers=options.n_workers,
                threads_per_worker=options.threads_per_worker,
                processes=True,
                host="127.0.0.1",
                dashboard_address=dashboard,
                worker_dashboard_address=None,
                # Without a dashboard, the scheduler's HTTP server (distributed always opens one) on a free
                # loopback port, closed once the cluster is up.
                scheduler_kwargs={} if dashboard else {"dashboard": False, "dashboard_address": "127.0.0.1:0"},
                memory_limit=options.memory_limit,
                silence_logs=worker_log_level,
            )
    except RuntimeError as exc:
        if _main_is_a_script() and "failed to start" in str(exc):
            raise InvalidParameterError(MAIN_GUARD_ADVICE) from None
        raise
    with local_cluster, Client(local_cluster) as local, _translate_loss("embedded LocalCluster"):
        from dppca_dask.coordinator.guard import one_line_log_plugins

        for plugin in one_line_log_plugins():  # its workers share this terminal: their logs one line each
            local.register_plugin(plugin)
        if dashboard:
            print(f"dppca-dask: Dask dashboard at {local_cluster.dashboard_link}", file=sys.stderr)
        else:
            _close_http_servers(local_cluster, local)
        yield local


@contextlib.contextmanager
def _workers_ignore_sigint() -> Iterator[None]:
    """Start the embedded workers with SIGINT ignored (they inherit it through exec): Ctrl-C in a terminal reaches
    the whole process group, and this process, not each worker printing its own KeyboardInterrupt traceback, ends
    the run and closes the cluster. Only in the main thread (elsewhere signals cannot be set)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
