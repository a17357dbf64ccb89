"""The compiled relay's own bounds on a client's connection (``native/relay/src/lib.rs``): a
request's head must arrive within ``model_body_timeout``, as its body must (both relays:
tests/test_model_faults.py), and a connection that sends nothing, at its start or between
requests, is closed after as long. (The aiohttp relay closes an idle keep-alive connection
after aiohttp's 75 s and sets no bound on a head.)"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness import RunningServer, running_server, sidecar_config
from tests.test_model_proxy import RawUpstream, completion_reply

BOUND = 0.5  # model_body_timeout, seconds


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[RunningServer]:
    upstream = RawUpstream(completion_reply)
    try:
        with running_server(sidecar_config(
                tmp_path / "state", model_address="127.0.0.1:0", model_relay="native",
                model_upstream=upstream.base + "/v1", model_upstream_anthropic=upstream.base,
                model_body_timeout=BOUND)) as server:
            yield server
    finally:
        upstream.close()


def closed_after(sock: socket.socket) -> float:
    """Seconds until the endpoint closes ``sock`` (it sends nothing more meanwhile)."""
    started = time.monotonic()
    assert sock.recv(65536) == b""
    return time.monotonic() - started


BODY = b'{"model":"m","messages":[]}'
REQUEST = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY))


@pytest.mark.parametrize("sent", [b"", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n",
                                  REQUEST], ids=["nothing", "half_a_head", "one_request"])
def test_a_connection_that_stops_sending_is_closed_after_model_body_timeout(
        sidecar: RunningServer, sent: bytes) -> None:
    host, port = sidecar.server.addresses["model"]
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(sent)
        if sent == REQUEST:  # answered, then idle on its keep-alive connection
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
                answer += sock.recv(65536)
            assert answer.startswith(b"HTTP/1.1 200 ")
        assert closed_after(sock) < BOUND + 5
