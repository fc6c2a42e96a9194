"""A real PostgreSQL server for the ledger's tests: started once per session by the tests themselves (the ``pgserver``
test dependency ships the server's binaries), listening on a Unix socket in a private temporary directory only (no
TCP port), and stopped at the end of the session. Each test gets a database of its own.

Fixtures: ``postgres_server`` (the session's server), ``postgres_url`` (a new, empty database's URL) and
``ledger_location`` (parametrized: a SQLite file path, then a PostgreSQL URL: one test run against both backends).
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


@contextmanager
def _quiet() -> Iterator[None]:
    """pgserver asks platformdirs for a runtime directory, which warns when XDG_RUNTIME_DIR is not set (this one
    warning, by its message; nothing of ours)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
        yield


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    import shutil
    import tempfile

    with _quiet():
        import pgserver

    # A directory of its own under the system's temporary directory: a short Unix socket path, and one the server's
    # own user can reach when the tests run as root (pgserver then runs the server as an unprivileged user; pytest's
    # per-user temporary root is 0700).
    directory = tempfile.mkdtemp(prefix="dppca-pg-")
    try:
        with _quiet():
            server = pgserver.get_server(directory, cleanup_mode="stop")
        try:
            yield server
        finally:
            server.cleanup()  # stops the server: no process outlives the session
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def postgres_url(postgres_server: Any) -> Iterator[str]:
    """The URL of a new database on the session's server, dropped after the test."""
    name = f"ledger_{uuid.uuid4().hex[:12]}"
    with _quiet():
        postgres_server.psql(f"CREATE DATABASE {name};")
        uri = postgres_server.get_uri()
    head, _, query = uri.partition("?")
    url = f"{head.rsplit('/', 1)[0]}/{name}?{query}"
    try:
        yield url
    finally:
        with _quiet():
            postgres_server.psql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE);")


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a test's ledger goes: a SQLite file, or a PostgreSQL database (the same tests on both backends)."""
    if request.param == "sqlite":
        return str(tmp_path / "ledger.sqlite")
    return str(request.getfixturevalue("postgres_url"))
