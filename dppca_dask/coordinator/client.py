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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask.config
import yaml

from dppca_dask.errors import ClusterLostError, InvalidParameterError

if TYPE_CHECKING:
    from distributed import Client

__all__ = [
    "CONNECT_TIMEOUT",
    "EXECUTORS",
    "ClusterOptions",
    "ExecutorChoice",
    "HANDSHAKE_TIMEOUT",
    "MAX_HANDSHAKE_BYTES",
    "MAIN_GUARD_ADVICE",
    "InProcessClient",
    "active_client",
    "check_scheduler",
    "choose_executor",
    "cluster_lost_error",
    "connect",
    "executor_client",
    "import_distributed",
    "is_cluster_loss",
    "when_distributed_imported",
]

log = logging.getLogger(__name__)

#: Seconds to reach a scheduler (and the ``Client``'s own connection timeout).
CONNECT_TIMEOUT = 20.0
#: Seconds to wait for the handshake a scheduler sends as soon as it accepts a connection.
HANDSHAKE_TIMEOUT = 10.0
#: A scheduler's handshake is a few hundred bytes; a header announcing more than this is not a Dask scheduler.
MAX_HANDSHAKE_BYTES = 1 << 20

#: Called once, in order, right after distributed is first imported through :func:`import_distributed` (which
#: sets up its own loggers when imported: the command line re-applies its levels here).
_DISTRIBUTED_HOOKS: list[Callable[[], None]] = []
_distributed_ready = False


def when_distributed_imported(hook: Callable[[], None]) -> None:
    """Call ``hook`` once distributed has been imported for a cluster (at once if that has happened)."""
    if _distributed_ready:
        hook()
    else:
        _DISTRIBUTED_HOOKS.append(hook)


def import_distributed() -> Any:
    """Import distributed (only a cluster needs it: an in-process run never does) and run the hooks."""
    global _distributed_ready
    import distributed

    if not _distributed_ready:
        _distributed_ready = True
        for hook in _DISTRIBUTED_HOOKS:
            hook()
        _DISTRIBUTED_HOOKS.clear()
    return distributed


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
    ``None`` (with the configuration's ``null``): no dashboard and no HTTP port left open. It is served on the
    loopback interface only, whatever form the address takes (``":8787"``, ``"8787"`` and ``"localhost:8787"``
    bind 127.0.0.1): its pages show the tasks' timings, which follow the data and are never released. A wildcard
    (``0.0.0.0``, ``::``, ``*``) or another host is refused: reach the dashboard through an SSH tunnel."""

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
        if self.dashboard_address is not None:
            loopback_dashboard(self.dashboard_address)  # refused here, before anything starts

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
            dashboard_address=loopback_dashboard(pick("dashboard_address", "dashboard-address")),
        )


#: Host names that bind the loopback interface, as the dashboard is served.
_LOOPBACK_HOSTS = {"127.0.0.1": "127.0.0.1", "localhost": "127.0.0.1", "::1": "[::1]", "[::1]": "[::1]"}


def loopback_dashboard(address: Any) -> str | None:
    """The dashboard's address bound to the loopback interface: ``":8787"``, ``"8787"``, ``"localhost:8787"``
    become ``"127.0.0.1:8787"`` (``[::1]`` stays); ``None`` stays ``None`` (no dashboard).

    Raises
    ------
    InvalidParameterError
        A wildcard (``0.0.0.0``, ``::``, ``*``), another host, or a port that is not a number in 0..65535.
    """
    if address is None:
        return None
    text = str(address).strip()
    for scheme in ("http://", "tcp://"):
        text = text[len(scheme):] if text.startswith(scheme) else text
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "", text
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidParameterError(f"dashboard_address must be HOST:PORT with a port in 0..65535, e.g. "
                                    f"127.0.0.1:8787 (or :0 for a free port); got {address!r}")
    if host in ("", *_LOOPBACK_HOSTS):
        return f"{_LOOPBACK_HOSTS.get(host, '127.0.0.1')}:{int(port)}"
    what = "a wildcard" if host in ("0.0.0.0", "::", "[::]", "*") else "not a loopback address"
    raise InvalidParameterError(
        f"dashboard_address {address!r} is {what}: the dashboard shows the tasks' timings, which follow the data, "
        f"so it is served on 127.0.0.1 only; use 127.0.0.1:{int(port)} (or :{int(port)}) and reach it from "
        f"another machine through an SSH tunnel (ssh -L {int(port)}:127.0.0.1:{int(port)} HOST)"
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
    "it), or pass executor=\"local\" to run in this process without worker processes, or a Client / scheduler "
    "address"
)


def active_client() -> Client | None:
    """The Dask client that is active here (the default client, or the one of the worker running this task), or
    ``None``."""
    if "distributed" not in sys.modules:  # nothing imported distributed: no client can be active
        return None
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

    sec: Any = security if security is not None else Security()
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
    received: list[Any] = [*frames, *(_read_exactly(sock, n) for n in buffer_sizes)]
    return loads(received, deserialize=False)


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
    import_distributed()
    from distributed import Client, LocalCluster

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
        with _workers_block_sigint(), embedded_cluster_settings():
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


def worker_environ() -> dict[str, str]:
    """The environment each embedded worker process starts with: Dask's ``distributed.nanny.pre-spawn-environ``
    updated with ``dppca_dask.cluster.worker-environ`` (see :func:`embedded_worker_environ`)."""
    import_distributed()  # its configuration defaults (the pre-spawn environment among them) load on import
    base = dict(dask.config.get("distributed.nanny.pre-spawn-environ", default={}) or {})
    base.update(_package_worker_environ())
    return {str(k): str(v) for k, v in base.items() if v is not None}


def _package_worker_environ() -> dict[str, str]:
    """The non-null entries of ``dppca_dask.cluster.worker-environ`` (null: Dask's own value)."""
    extra = dask.config.get("dppca_dask.cluster.worker-environ", default={}) or {}
    if not isinstance(extra, dict):
        raise InvalidParameterError(
            f"dppca_dask.cluster.worker-environ must map variable names to values; got {type(extra).__name__}"
        )
    return {str(k): str(v) for k, v in extra.items() if v is not None}


def cluster_dask_config() -> dict[str, Any]:
    """The non-null entries of ``dppca_dask.cluster.dask-config`` as dotted Dask settings
    (``{"distributed.worker.profile.enabled": False, ...}``); null: this process's setting (Dask's unless set)."""
    tree = dask.config.get("dppca_dask.cluster.dask-config", default={}) or {}
    if not isinstance(tree, dict):
        raise InvalidParameterError(
            f"dppca_dask.cluster.dask-config must map Dask settings to values; got {type(tree).__name__}"
        )
    settings: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(f"{prefix}.{key}" if prefix else str(key), item)
        elif value is not None:
            settings[prefix] = value

    walk("", tree)
    return settings


@contextlib.contextmanager
def embedded_cluster_settings() -> Iterator[None]:
    """Start a ``LocalCluster`` (created inside) as the embedded cluster is started: its workers with
    :func:`worker_environ` (:func:`embedded_worker_environ`), and the whole cluster with
    :func:`cluster_dask_config` (the scheduler reads its settings when it is made; each nanny hands this process's
    configuration to its worker)."""
    with embedded_worker_environ(), dask.config.set(cluster_dask_config()):
        yield


@contextlib.contextmanager
def embedded_worker_environ() -> Iterator[None]:
    """Start worker processes (a ``LocalCluster`` created inside) with :func:`worker_environ`.

    glibc reads its ``MALLOC_*`` variables when a process starts, so they go in Dask's pre-spawn environment,
    which the nanny sets in this process's ``os.environ`` before spawning each worker (restarts included: the nanny
    keeps the environment it was created with). The package's entries take precedence over this process's
    environment (where the nanny would otherwise prefer a value an earlier LocalCluster left there), and this
    process's own entries are put back afterwards.

    The defaults (``dppca_dask.yaml``) keep blocks of up to 32 MiB on the heap (``MALLOC_MMAP_THRESHOLD_``) and let
    up to 64 MiB of freed heap stay in the process (``MALLOC_TRIM_THRESHOLD_``). Dask's own default (a 64 KiB trim
    threshold, which also fixes the mmap threshold at 128 KiB) makes every temporary array of a step a fresh
    mapping whose pages fault in zero-filled: the private step's kernels allocate several per partition. Measured on
    the 10⁸-entry benchmark store (two LocalClusters side by side, 2 workers each, 15 interleaved repeats, medians):
    the private step 0.48 s against 0.54 s and 0.51 s against 0.61 s, the plain step 0.33 s against 0.37 s and 0.36 s
    against 0.37 s. Partitions themselves (far above 32 MiB) are mapped and returned to the system as before.
    """
    environ = worker_environ()
    saved = {name: os.environ.get(name) for name in environ}
    try:
        # The nanny prefers this process's environment to the configuration, and every LocalCluster started
        # before in this process left Dask's values there: the package's entries are put there too while its
        # workers start (a null entry leaves both to Dask).
        for name in _package_worker_environ():
            os.environ[name] = environ[name]
        with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _workers_block_sigint() -> Iterator[None]:
    """Start the embedded cluster with SIGINT blocked in this thread, so that its worker processes never act on it:
    Ctrl-C in a terminal reaches the whole process group, and this process, not each worker printing its own
    KeyboardInterrupt traceback, ends the run and closes the cluster.

    The cluster's event-loop thread, created here, inherits the blocked signal, and so do the threads it starts
    worker processes from and, through fork and exec, the workers, including those a nanny restarts later. This
    process's handler of SIGINT is never changed, and this thread's signal mask is restored however the start ends: a
    Ctrl-C during the start is delivered once it is over (at once if another thread of the process accepts it).

    multiprocessing's resource tracker is started first: starting it unblocks SIGINT in the thread that does so
    (``multiprocessing.resource_tracker.ensure_running`` ends with ``SIG_UNBLOCK``, whatever the mask was before),
    which would otherwise be the cluster's event-loop thread when it creates the first worker's queues.
    """
    import signal

    if not hasattr(signal, "pthread_sigmask"):  # Windows: no signal masks, and no inheritance through spawn
        yield
        return
    from multiprocessing import resource_tracker

    previous = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    try:
        resource_tracker.ensure_running()
        signal.pthread_sigmask(signal.SIG_SETMASK, {*previous, signal.SIGINT})
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# ------------------------------------------------------------------------------------------ in-process execution
#: The values of ``executor`` (:func:`dppca_dask.pca`, :func:`~dppca_dask.lowrank`,
#: :func:`~dppca_dask.window`, :func:`~dppca_dask.topics`, ``--executor`` of
#: their commands, a job's ``[cluster] executor``).
EXECUTORS = ("auto", "local", "cluster")


class _InProcessFuture:
    """The result of one task of an :class:`InProcessClient` (the part of ``distributed.Future`` the coordinator
    uses: ``key``, ``result``, ``release``, ``done``)."""

    __slots__ = ("_future", "key")

    def __init__(self, key: str, future: Any) -> None:
        self.key = key
        self._future = future

    def result(self, timeout: float | None = None) -> Any:
        return self._future.result(timeout)

    def done(self) -> bool:
        return bool(self._future.done())

    def release(self) -> None:
        """Nothing to release: the value goes when the last reference to this future does."""


def _resolve(value: Any) -> Any:
    """``value`` with every in-process future in it (also inside tuples, lists and dicts) replaced by its result."""
    if isinstance(value, _InProcessFuture):
        return value.result()
    if isinstance(value, tuple):
        return tuple(_resolve(v) for v in value)
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v) for k, v in value.items()}
    return value


def _system_memory() -> int:
    """Total memory of this machine in bytes (0 when unknown)."""
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # noqa: BLE001 - psutil missing or unsupported: report no memory, so nothing is persisted
        return 0


class InProcessClient:
    """Runs the coordinator's tasks in this process, on a pool of threads, without distributed.

    It offers the part of ``distributed.Client`` that :class:`~dppca_dask.coordinator.driver.Coordinator` and the
    preflight use (``submit`` with keys and futures as arguments, ``compute`` of a ``Delayed``, ``scatter``,
    ``gather``, ``scheduler_info``), so a run goes through the same coordinator code: the same tasks, the same tree
    reduction, the same passes, only without the scheduler's processes and their start-up. Tasks run in the order
    they are submitted (a first-in, first-out queue); a task waits for the futures among its arguments, which were
    all submitted before it, so the queue always makes progress. The kernels release the GIL in scipy and numpy,
    so the threads share the cores.

    Parameters
    ----------
    n_threads
        Threads of the pool (default: configuration ``dppca_dask.executor.threads``, else
        ``dask.system.CPU_COUNT``).
    memory_limit
        Bytes the run may keep in memory, reported by :meth:`scheduler_info` as its one worker's limit
        (default: the machine's memory).
    """

    #: What the coordinator's log lines and errors call the scheduler.
    scheduler = type("InProcessScheduler", (), {"address": "in-process"})()

    def __init__(self, n_threads: int | None = None, *, memory_limit: int | None = None) -> None:
        from concurrent.futures import ThreadPoolExecutor

        if n_threads is None:
            configured = dask.config.get("dppca_dask.executor.threads", default=None)
            if configured is None:
                from dask.system import CPU_COUNT

                configured = CPU_COUNT
            n_threads = int(configured)
        if isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1:
            raise InvalidParameterError(f"dppca_dask.executor.threads must be an integer >= 1; got {n_threads!r}")
        self.n_threads = n_threads
        self.memory_limit = _system_memory() if memory_limit is None else int(memory_limit)
        self._pool: Any = ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix="dppca-task")

    def submit(self, func: Any, *args: Any, key: str | None = None, retries: int | None = None,
               workers: Any = None, allow_other_workers: bool = False, priority: int = 0,
               **kwargs: Any) -> _InProcessFuture:
        """Queue ``func(*args, **kwargs)``; futures among the arguments are replaced by their results first.
        ``retries``, the placement options (``workers``, ``allow_other_workers``) and ``priority`` are accepted for
        the coordinator's sake: here there is one worker, this process, no worker to lose, and tasks start in the
        order they are queued."""
        del retries, workers, allow_other_workers, priority

        def call() -> Any:
            return func(*_resolve(args), **_resolve(kwargs))

        if self._pool is None:
            raise InvalidParameterError("this in-process client is closed")
        return _InProcessFuture(str(key or getattr(func, "__name__", "task")), self._pool.submit(call))

    def compute(self, collection: Any) -> _InProcessFuture:
        """A future of a Dask collection computed with Dask's synchronous scheduler in a thread of the pool."""
        return self.submit(lambda: collection.compute(scheduler="sync"), key="compute")

    def scatter(self, data: Any, workers: Any = None, hash: bool = True, **kwargs: Any) -> Any:  # noqa: A002
        """The data itself: it is already where the tasks run."""
        del workers, hash, kwargs
        return data

    def gather(self, futures: Any, direct: bool | None = None) -> Any:
        """The results of ``futures`` (a future, or a list of them), in order (``direct``, the route of a Dask
        client's gather, means nothing here: the results are in this process)."""
        del direct
        return _resolve(futures)

    def scheduler_info(self, n_workers: int = -1) -> dict[str, Any]:
        """One worker, this process, with :attr:`memory_limit`."""
        del n_workers
        return {"address": "in-process", "workers": {"in-process": {"memory_limit": self.memory_limit,
                                                                     "nthreads": self.n_threads}}}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> InProcessClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class ExecutorChoice:
    """Where a run executes, decided from public values only (see :func:`choose_executor`)."""

    executor: str
    """``"in-process"`` (an :class:`InProcessClient`) or ``"cluster"`` (a ``distributed.Client``)."""
    reason: str
    """Why, in public terms (the values compared and the configuration's limits)."""


def _limit(key: str) -> int:
    value = dask.config.get(f"dppca_dask.executor.{key}", default=None)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidParameterError(f"dppca_dask.executor.{key} must be an integer >= 0; got {value!r}")
    return value


def choose_executor(client: Any, executor: str = "auto", *, n_cols: int,
                    n_partitions: int | None) -> ExecutorChoice:
    """Decide where a run executes: in this process or on a Dask cluster.

    Parameters
    ----------
    client
        What the caller gave: ``None``, a scheduler address or file, or a ``distributed.Client``.
    executor
        ``"local"`` runs in this process (refused together with a client or address); ``"cluster"`` always on
        Dask (the client given, the active one, or an embedded ``LocalCluster``); ``"auto"`` (default; also
        configuration ``dppca_dask.executor.default``): a client or address given, or a Dask client active, means
        that cluster; otherwise in this process when the input is small by its public shape:
        ``n_partitions <= dppca_dask.executor.in-process-max-partitions`` and
        ``n_cols <= dppca_dask.executor.in-process-max-columns``, else an embedded ``LocalCluster``.
    n_cols, n_partitions
        The input's declared width and its partition count: public values. ``n_partitions=None`` when the
        partitioning is not public (blocks of a file sized by its stored entries, in-memory arrays split by their
        rows): the choice then reads the width alone.

    Notes
    -----
    The choice shapes what a run looks like from outside (its start-up, processes, provenance), so it depends on
    public values only: the declared column count, the partition count, the configuration and what the caller
    gave. Never on the row count, the stored entries, the bytes or the values, which are private.
    """
    if executor == "auto":
        executor = dask.config.get("dppca_dask.executor.default", default="auto") or "auto"
    if executor not in EXECUTORS:
        raise InvalidParameterError(f"executor must be one of {', '.join(EXECUTORS)}; got {executor!r}")
    max_partitions, max_cols = _limit("in-process-max-partitions"), _limit("in-process-max-columns")
    given = client is not None
    if executor == "local":
        if given:
            raise InvalidParameterError(
                f"executor='local' runs in this process, but a Dask client or scheduler was given ({client!r}); "
                "drop one of them")
        return ExecutorChoice("in-process", "executor='local' was asked for")
    if executor == "cluster":
        return ExecutorChoice("cluster", "executor='cluster' was asked for")
    if given:
        return ExecutorChoice("cluster", "a Dask client or scheduler was given")
    if dask.config.get("dppca_dask.cluster.use-active-client", default=True) and active_client() is not None:
        return ExecutorChoice("cluster", "a Dask client is active")
    partitions = "partitions not public" if n_partitions is None else f"{n_partitions} partition(s)"
    if (n_partitions is None or n_partitions <= max_partitions) and n_cols <= max_cols:
        return ExecutorChoice(
            "in-process", f"{partitions} (limit {max_partitions}) and {n_cols} columns (limit {max_cols}; "
                          "dppca_dask.executor.in-process-max-*)")
    return ExecutorChoice(
        "cluster", f"{partitions} or {n_cols} columns above the in-process limits "
                   f"({max_partitions}, {max_cols}: dppca_dask.executor.in-process-max-*)")


@contextlib.contextmanager
def executor_client(choice: ExecutorChoice, client: Any = None, **connect_kwargs: Any) -> Iterator[Any]:
    """Yield what runs the tasks for ``choice``: an :class:`InProcessClient` (closed on exit) or, through
    :func:`connect` (``connect_kwargs`` go there), a ``distributed.Client``."""
    if choice.executor == "in-process":
        log.info("running in this process (%s)", choice.reason)
        with InProcessClient() as local:
            yield local
        return
    with connect(client, **connect_kwargs) as dask_client:
        yield dask_client
