"""A connection cut in the middle of a response body, produced for real: a TCP relay on 127.0.0.1 between the client
and the S3 server forwards part of a chunk object's response and closes both sides. A cut that passes is retried
(the values read are the stored ones); one that persists ends the read with an error that names the store and the
partition and says it is the connection, not damage."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import numpy as np
import pytest
import scipy.sparse as sp

from dppca_dask.errors import StorageConnectionError, StoreCorruptError
from dppca_dask.ingest import ingest
from dppca_dask.storage import open_matrix
from dppca_dask.storage.store import READ_AHEAD


class CuttingRelay:
    """Relays connections to ``upstream`` (host, port); of the responses to GETs whose request line contains
    ``match``, the first ``cuts`` (all while ``cuts`` is None) are cut ``keep`` bytes into their body (after the
    headers, whatever their length), or ``in_body=False`` ``keep`` bytes into the response (its headers): both
    sockets closed."""

    def __init__(self, upstream: tuple[str, int], match: bytes, keep: int = 1000, *, in_body: bool = True) -> None:
        self.upstream, self.match, self.keep, self.in_body = upstream, match, keep, in_body
        self.cuts: int | None = 0
        self.cut = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._threads: list[threading.Thread] = []
        self._open: list[socket.socket] = []
        self._closing = False
        accept = threading.Thread(target=self._accept, daemon=True)
        accept.start()
        self._threads.append(accept)

    def _accept(self) -> None:
        self._listener.settimeout(0.1)  # (so that close() ends it at once)
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            thread = threading.Thread(target=self._relay, args=(client,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _decide(self, head: bytes) -> bool:
        if not (head.startswith(b"GET ") and self.match in head.split(b"\r\n", 1)[0]):
            return False
        with self._lock:
            if self.cuts is not None and self.cut >= self.cuts:
                return False
            self.cut += 1
            return True

    def _relay(self, client: socket.socket) -> None:
        server = socket.create_connection(self.upstream)
        self._open += [client, server]
        decided = threading.Event()
        cut = [False]

        def forward_requests() -> None:
            seen = b""
            try:
                while True:
                    data = client.recv(65536)
                    if not data:
                        break
                    if not decided.is_set():
                        seen += data
                        if b"\r\n" in seen:
                            cut[0] = self._decide(seen)
                            decided.set()
                    server.sendall(data)
            except OSError:
                pass
            finally:
                decided.set()
                try:
                    server.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

        requests = threading.Thread(target=forward_requests, daemon=True)
        requests.start()
        response = b""  # of a response to cut: what came so far, until its headers end
        budget = None  # then: how much more of its body to pass on
        try:
            while True:
                data = server.recv(65536)
                if not data:
                    break
                decided.wait(10)
                if cut[0]:
                    if budget is None:
                        response += data
                        end = response.find(b"\r\n\r\n") if self.in_body else -4
                        if end < 0:
                            continue
                        budget, data = self.keep, response[: end + 4 + self.keep]
                        if len(response) - end - 4 >= self.keep:
                            client.sendall(data)
                            break
                        client.sendall(data)
                        budget -= len(response) - end - 4
                        continue
                    if len(data) >= budget:
                        client.sendall(data[:budget])
                        break
                    budget -= len(data)
                client.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (client, server):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()
            requests.join(5)

    def close(self) -> None:
        self._closing = True
        for sock in self._open:  # a shutdown wakes a thread blocked in recv (a close alone may not)
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        for thread in self._threads:
            thread.join(5)
        self._listener.close()


@pytest.fixture
def relay(s3) -> Iterator[CuttingRelay]:
    host, port = s3.server.endpoint.removeprefix("http://").split(":")
    relay = CuttingRelay((host, int(port)), match=b"/X/data/")
    yield relay
    relay.close()


def _store(s3, rng) -> str:
    matrix = sp.csr_array(sp.random(400, 3000, density=0.05, random_state=rng, format="csr"))
    url = s3.url("cut.zarr")
    ingest(matrix, url, rows_per_partition=200, n_features=3000, codec="none")  # 60,000 entries: bodies of ~240 KB
    return url


def test_a_body_cut_short_is_fetched_again(s3, rng, relay):
    url = _store(s3, rng)
    READ_AHEAD.clear()
    expected = open_matrix(url).read_partition_with_norms(0)
    READ_AHEAD.clear()
    relay.cuts = 2
    through = open_matrix(url, storage_options={**s3.options(), "endpoint_url": relay.endpoint})
    block, norms = through.read_partition_with_norms(0)
    READ_AHEAD.clear()
    assert relay.cut == 2  # the fault happened, twice
    assert (block != expected[0]).nnz == 0 and np.array_equal(norms, expected[1])


def test_a_connection_cut_every_time_is_named_as_such_not_as_damage(s3, rng, relay):
    url = _store(s3, rng)
    relay.cuts = None
    through = open_matrix(url, storage_options={**s3.options(), "endpoint_url": relay.endpoint})
    READ_AHEAD.clear()
    with pytest.raises(StorageConnectionError) as error:
        through.read_partition_with_norms(1)
    READ_AHEAD.clear()
    assert relay.cut >= 2  # (retried before giving up)
    assert not isinstance(error.value, StoreCorruptError) and error.value.exit_code == 1
    text = str(error.value)
    assert "partition 1 of" in text and "cut.zarr" in text and "not damaged" in text and "bytes" not in text, text


def test_a_connection_closed_once_the_store_was_opened_is_a_failed_connection_not_a_missing_endpoint():
    """A connection closed or refused while reading a partition (the store was opened through the same endpoint) is
    :class:`StorageConnectionError`; before anything was read it is a missing endpoint, exit 2, as before."""
    import aiohttp

    from dppca_dask._urls import storage_error
    from dppca_dask.errors import InvalidParameterError

    for error in (aiohttp.ServerDisconnectedError(), aiohttp.ClientPayloadError("cut")):
        during = storage_error(error, "s3://bucket/x.zarr", partition=3)
        assert isinstance(during, StorageConnectionError) and "partition 3 of 's3://bucket/x.zarr'" in str(during)
    before = storage_error(aiohttp.ServerDisconnectedError(), "s3://bucket/x.zarr")
    assert isinstance(before, InvalidParameterError) and "AWS_ENDPOINT_URL" in str(before)


def test_a_connection_cut_before_its_headers_is_retried_once_over_not_in_nested_rounds(s3, rng):
    """The request's own retries (s3fs's and botocore's) are not run again by the retries of a body read around
    them: with botocore at one attempt, a cut in every response's headers was tried 100 times over 25 s before, 20
    times over 6 s now; with the defaults, 250 times over 180 s before, 50 over 42 s now."""
    url = _store(s3, rng)
    host, port = s3.server.endpoint.removeprefix("http://").split(":")
    relay = CuttingRelay((host, int(port)), match=b"/X/data/", keep=200, in_body=False)
    relay.cuts = None
    try:
        through = open_matrix(url, storage_options={**s3.options(), "endpoint_url": relay.endpoint,
                                                    "config_kwargs": {"retries": {"max_attempts": 1}}})
        READ_AHEAD.clear()
        with pytest.raises(StorageConnectionError, match="partition 1 of"):
            through.read_partition_with_norms(1)
        READ_AHEAD.clear()
        assert 0 < relay.cut <= 20
    finally:
        relay.close()
