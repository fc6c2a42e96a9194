"""A real S3-protocol server on 127.0.0.1 for the object-storage tests (moto's server mode, a separate process).

``s3_server`` (session) starts ``python -m moto.server`` on a free loopback port and stops it at the end of the
session (the process guard of ``tests/conftest.py`` checks that it ended). ``s3`` (per test) creates a fresh bucket
and sets the standard AWS variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
``AWS_DEFAULT_REGION``) for the test, so that the code under test finds the server the way a user's shell would tell
it, with no storage options.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("moto.server", reason="the object-storage tests need moto[server] (the test extra)")
pytest.importorskip("s3fs", reason="the object-storage tests need s3fs (the test extra)")

#: Credentials the local server accepts (moto accepts any); region of its buckets.
ACCESS_KEY, SECRET_KEY, REGION = "testing-key-id", "testing-secret-key", "us-east-1"


@dataclass(frozen=True)
class S3Server:
    endpoint: str
    """``http://127.0.0.1:PORT``."""

    def environment(self) -> dict[str, str]:
        """The standard AWS variables that point a client at this server."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_DEFAULT_REGION": REGION}


@dataclass(frozen=True)
class S3Bucket:
    server: S3Server
    name: str
    opened: list[Any] = field(default_factory=list, compare=False, repr=False)
    """The test's own filesystems, closed when the test ends."""

    def url(self, key: str) -> str:
        return f"s3://{self.name}/{key}"

    def options(self) -> dict[str, str]:
        """Storage options that reach this server without the environment."""
        return {"endpoint_url": self.server.endpoint, "key": ACCESS_KEY, "secret": SECRET_KEY}

    def filesystem(self):  # an s3fs client of the test's own (no instance cache shared with the code under test)
        import s3fs

        fs = s3fs.S3FileSystem(key=ACCESS_KEY, secret=SECRET_KEY, endpoint_url=self.server.endpoint,
                               skip_instance_cache=True, use_listings_cache=False)
        self.opened.append(fs)
        return fs


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(endpoint: str, process: subprocess.Popen[bytes], timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            urllib.request.urlopen(endpoint + "/moto-api/", timeout=2).close()
            return True
        except urllib.error.HTTPError:
            return True  # it answers
        except OSError:
            time.sleep(0.1)
    return False


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A moto S3 server on a free port of 127.0.0.1, stopped (and waited for) at the end of the session."""
    log = tmp_path_factory.mktemp("s3server") / "server.log"
    for _attempt in range(3):  # another process may take the free port between the probe and the bind
        port = _free_port()
        endpoint = f"http://127.0.0.1:{port}"
        with open(log, "wb") as out:
            process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                       stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        if _wait_ready(endpoint, process):
            break
        process.kill()
        process.wait()
    else:
        pytest.fail(f"the local S3 server did not start; its log:\n{log.read_text()[-2000:]}")
    try:
        yield S3Server(endpoint)
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def s3(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Bucket]:
    """A fresh bucket on the local server, with the standard AWS variables set for this test (and nothing else of
    AWS's: no profile or configuration file of the user's is read). fsspec keeps one file system per set of options
    in a process, configured from the environment when it was made: the test starts and ends without them."""
    from dppca_dask.storage._sessions import close_filesystem, close_filesystems

    close_filesystems()
    for name in [n for n in os.environ if n.startswith(("AWS_", "FSSPEC_S3"))]:
        monkeypatch.delenv(name)
    for name, value in s3_server.environment().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    bucket = S3Bucket(s3_server, f"test-{uuid.uuid4().hex[:12]}")
    bucket.filesystem().mkdir(bucket.name)
    yield bucket
    for fs in bucket.opened:
        close_filesystem(fs)
    close_filesystems()  # the sessions of the code under test, closed rather than left to the garbage collector


@pytest.fixture
def requests(monkeypatch):
    """Every request s3fs makes for an object in this process: ``(method, key, start, end)`` (``end`` exclusive;
    ``None`` for an open range or no range)."""
    import s3fs

    from dppca_dask.storage.store import READ_AHEAD

    READ_AHEAD.clear()
    seen: list[tuple[str, str, int | None, int | None]] = []
    call = s3fs.S3FileSystem._call_s3

    async def recording(self, method, *args, **kwargs):
        if "Key" in kwargs:
            start = end = None
            if kwargs.get("Range"):
                a, _, b = kwargs["Range"].removeprefix("bytes=").partition("-")
                start, end = int(a), (int(b) + 1 if b else None)
            seen.append((method, kwargs["Key"], start, end))
        return await call(self, method, *args, **kwargs)

    monkeypatch.setattr(s3fs.S3FileSystem, "_call_s3", recording)
    yield seen
    READ_AHEAD.clear()
