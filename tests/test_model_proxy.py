"""The model endpoint as a proxy (DESIGN §12): transparency (bytes, statuses, headers, streams
chunk by chunk), no open proxy (SSRF), credentials kept to the upstream, bounds, hostile input
and a failing upstream — a real sidecar in front of a raw upstream the test scripts byte by
byte."""

from __future__ import annotations

import base64
import contextlib
import gzip
import http.client
import json
import logging
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.harness import (
    RunningServer,
    http_request,
    run_detail,
    running_server,
    sidecar_config,
    wait_until,
)
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)
from tests.ports import free_port
from watchdog.shell.errors import StartupError
from watchdog.shell.model.http1 import H2_PREFACE, H2_REFUSAL

KEY = "sk-proxy-SECRET-0123456789abcdefXYZ"
COMPLETION = (b'{"id": "chatcmpl-raw1",  "object":"chat.completion", "created": 1, "model":"m",'
              b' "choices":[{"index":0,"message":{"role":"assistant","content":"hi"},'
              b'"finish_reason":"stop"}], "usage":{"prompt_tokens":3,"completion_tokens":1},'
              b' "x_unknown": [1, 2.50, "\\u00e9"]}')


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class RawUpstream:
    """A loopback upstream: each request is recorded, then ``reply`` writes the answer."""

    reply: Callable[[BaseHTTPRequestHandler, Seen], None]
    seen: list[Seen] = field(default_factory=list)
    broken_pipe: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                seen = Seen(self.command, self.path,
                            {k.lower(): v for k, v in self.headers.items()},
                            self.rfile.read(length))
                upstream.seen.append(seen)
                try:
                    upstream.reply(self, seen)
                except (BrokenPipeError, ConnectionResetError):
                    upstream.broken_pipe.set()

            do_GET = do_POST = do_DELETE = _any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes,
         headers: dict[str, str] | None = None) -> None:
    handler.send_response(status)
    for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def reset(handler: BaseHTTPRequestHandler) -> None:
    """The upstream's connection reset (an RST, with no FIN before it), what was written
    sent first."""
    handler.wfile.flush()
    handler.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                  struct.pack("ii", 1, 0))
    os.close(handler.connection.detach())
    handler.close_connection = True


def completion_reply(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
    send(handler, 200, COMPLETION, {"X-Upstream": "yes", "OpenAI-Processing-Ms": "7"})


@pytest.fixture
def upstream() -> Iterator[RawUpstream]:
    raw = RawUpstream(completion_reply)
    yield raw
    raw.close()


def sidecar_for(tmp_path: Path, upstream: RawUpstream, **overrides: Any) -> Any:
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=upstream.base + "/v1",
                            model_upstream_anthropic=upstream.base, **overrides)
    return running_server(config)


@pytest.fixture
def sidecar(tmp_path: Path, upstream: RawUpstream) -> Iterator[RunningServer]:
    with sidecar_for(tmp_path, upstream) as server:
        yield server


def post(sidecar: RunningServer, path: str, body: bytes,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    return http_request("POST", sidecar.url("model") + path, body, {
        "Content-Type": "application/json", "Authorization": f"Bearer {KEY}",
        **(headers or {})})


def raw_http(sidecar: RunningServer, request: bytes) -> bytes:
    """Send ``request`` as written on a socket; the status line and headers of the answer."""
    host, port = sidecar.server.addresses["model"]
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.sendall(request)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    return answer


# -- transparency -------------------------------------------------------------------------------

def test_pass_through_byte_for_byte(sidecar: RunningServer, upstream: RawUpstream) -> None:
    body = b'{ "model" : "m",\n "messages": [{"role":"user","content":"hi \\u00e9"}],' \
           b' "new_feature": {"x": 1.50e0} }'
    status, answer = post(sidecar, "/v1/chat/completions?api-version=2025-01-01", body,
                          {"OpenAI-Organization": "org-1", "X-Custom": "kept"})
    assert status == 200
    assert answer == COMPLETION  # the upstream's bytes, not re-serialised
    seen = upstream.seen[-1]
    assert seen.body == body  # the agent's bytes, not re-serialised
    assert seen.path == "/v1/chat/completions?api-version=2025-01-01"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.headers["openai-organization"] == "org-1"
    assert seen.headers["x-custom"] == "kept"
    assert seen.headers["host"] == upstream.base.removeprefix("http://")


def test_other_v1_paths_pass_through(sidecar: RunningServer, upstream: RawUpstream) -> None:
    status, answer = http_request("GET", sidecar.url("model") + "/v1/models?limit=2",
                                  headers={"Authorization": f"Bearer {KEY}"})
    assert (status, answer) == (200, COMPLETION)
    assert upstream.seen[-1].method == "GET" and upstream.seen[-1].path == "/v1/models?limit=2"
    http_request("POST", sidecar.url("model") + "/v1/messages/count_tokens", b"{}",
                 {"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    assert upstream.seen[-1].path == "/v1/messages/count_tokens"  # the Anthropic upstream
    assert upstream.seen[-1].headers["x-api-key"] == KEY


def test_upstream_status_errors_and_headers_pass_through(tmp_path: Path) -> None:
    error = b'{"error": {"message": "Rate limit reached", "type": "rate_limit"}}'

    def limited(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        send(handler, 429, error, {"Retry-After": "20", "x-ratelimit-remaining": "0"})

    raw = RawUpstream(limited)
    try:
        with sidecar_for(tmp_path, raw) as sidecar:
            request = urllib.request.Request(
                sidecar.url("model") + "/v1/chat/completions", method="POST",
                data=b'{"model":"m","messages":[]}', headers={"Content-Type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as failure:
                urllib.request.urlopen(request, timeout=10)
            assert failure.value.code == 429
            assert failure.value.headers["Retry-After"] == "20"
            assert failure.value.headers["x-ratelimit-remaining"] == "0"
            assert failure.value.read() == error
    finally:
        raw.close()


def test_hop_by_hop_and_watchdog_headers_are_not_forwarded(sidecar: RunningServer,
                                                           upstream: RawUpstream) -> None:
    body = b'{"model":"m","messages":[]}'
    answer = raw_http(sidecar, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Connection: keep-alive, X-Drop-Me\r\nX-Drop-Me: 1\r\n"
                      b"Keep-Alive: timeout=5\r\nTE: trailers\r\n"
                      b"Proxy-Authorization: Basic xyz\r\nx-watchdog-agent: header-agent\r\n"
                      b"x-watchdog-budget-tool-calls: 5\r\nX-Kept: yes\r\n"
                      b"Content-Type: application/json\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    headers = upstream.seen[-1].headers
    assert headers["x-kept"] == "yes"
    for name in ("x-drop-me", "keep-alive", "te", "proxy-authorization",
                 "x-watchdog-agent", "x-watchdog-budget-tool-calls"):
        assert name not in headers, name


def test_a_stream_is_passed_on_chunk_by_chunk(tmp_path: Path) -> None:
    release = threading.Event()

    def slow_stream(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        first = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
                 "choices": [{"index": 0, "delta": {"content": "one"}, "finish_reason": None}]}
        handler.wfile.write(b"data: " + json.dumps(first).encode() + b"\n\n")
        handler.wfile.flush()
        release.wait(10)  # the second chunk only once the client has read the first
        last = {**first, "choices": [{"index": 0, "delta": {"content": " two"},
                                      "finish_reason": "stop"}]}
        handler.wfile.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
        handler.wfile.flush()
        handler.close_connection = True

    raw = RawUpstream(slow_stream)
    try:
        with sidecar_for(tmp_path, raw) as sidecar:
            request = urllib.request.Request(
                sidecar.url("model") + "/v1/chat/completions", method="POST",
                data=b'{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}',
                headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as response:
                first = response.readline() + response.readline()
                assert b'"one"' in first  # arrived while the upstream still holds the rest
                release.set()
                rest = response.read()
            assert b'" two"' in rest and rest.endswith(b"data: [DONE]\n\n")
    finally:
        release.set()
        raw.close()


def read_answer(sock: socket.socket) -> tuple[bytes, bytes]:
    """One whole answer (its head, then as many bytes of body as its Content-Length says)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed before an answer: {data[:300]!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "the connection closed inside an answer's body"
        body += chunk
    assert len(body) == length, "more bytes than the answer's length"
    return head, body


def test_what_http_1_1_clients_send_is_read(sidecar: RunningServer,
                                            upstream: RawUpstream) -> None:
    """On one keep-alive connection, as Java's HttpClient and OkHttp may send them: an offer to
    upgrade to cleartext HTTP/2 (answered in HTTP/1.1, its headers not passed on), a chunked
    body with no Content-Length, and ``Expect: 100-continue`` (the body sent only after the
    interim 100); the upstream gets each body whole, with its length."""
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    start = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    length = b"Content-Length: %d\r\n\r\n" % len(body)
    h2c = (b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
           b"HTTP2-Settings: AAEAAEAAAAIAAAAAAAMAAAAAAAQBAAAAAAUAAEAAAAYABgAA\r\n")
    chunked = b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        10, body[:10], len(body) - 10, body[10:])
    host, port = sidecar.server.addresses["model"]
    with socket.create_connection((host, port), timeout=5) as sock:
        for request in (start + h2c + length + body, start + h2c + chunked, start + chunked):
            sock.sendall(request)
            head, answer = read_answer(sock)
            assert head.startswith(b"HTTP/1.1 200 "), head
            assert answer == COMPLETION
        sock.sendall(start + b"Expect: 100-continue\r\n" + length)
        interim, rest = read_head(sock)
        assert interim.startswith(b"HTTP/1.1 100 ") and rest == b"", (interim, rest)
        sock.sendall(body)
        head, answer = read_answer(sock)
        assert head.startswith(b"HTTP/1.1 200 ") and answer == COMPLETION, head
    assert [seen.body for seen in upstream.seen] == [body] * 4
    for seen in upstream.seen:
        assert seen.headers["content-length"] == str(len(body))
        assert not {"upgrade", "http2-settings", "transfer-encoding", "expect"} & set(
            seen.headers), seen.headers


def test_an_expectation_other_than_100_continue_is_no_refusal(sidecar: RunningServer,
                                                              upstream: RawUpstream) -> None:
    """An ``Expect`` the endpoint does not know (RFC 9110 §10.1.1: a server MAY answer 417) is
    read as none, on both relays: the request goes on, without it (the aiohttp relay answered
    a plain-text 417, not in the API's shape, where the compiled relay passed the request on)."""
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    answer = raw_http_whole(sidecar, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                            b"Content-Type: application/json\r\nExpect: 200-ok\r\n"
                            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
                            % (len(body), body))
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
    assert [seen.body for seen in upstream.seen] == [body]
    assert "expect" not in upstream.seen[0].headers


def test_a_body_longer_than_taken_is_refused_before_it_is_sent(tmp_path: Path,
                                                               upstream: RawUpstream) -> None:
    """``Expect: 100-continue`` with a length past ``model_max_body_bytes``: both relays answer
    413 at once, in the API's shape, without asking for the body."""
    with sidecar_for(tmp_path, upstream, model_max_body_bytes=1024) as sidecar:
        host, port = sidecar.server.addresses["model"]
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
                         b"Content-Length: 5000\r\n\r\n")
            head, answer = read_answer(sock)
    assert head.startswith(b"HTTP/1.1 413 "), head
    assert json.loads(answer)["error"]["code"] == "request_too_large"
    assert upstream.seen == []


def test_a_wrong_token_with_100_continue_is_refused_before_its_body(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """``Expect: 100-continue`` with the gateway's token missing or wrong (its header, or the
    path's ``/token/<token>/``): both relays answer the 401 at once, never ``100 Continue``
    first (its body would be sent for nothing), the same answer as the request gets without
    ``Expect`` once its body is in; never echoed. With the right token, ``100 Continue``."""
    token = "t0ken-for-the-model-endpoint-1234"
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    config = sidecar_config(tmp_path / "state", model_address="0.0.0.0:0", api_token=token,
                            model_upstream=upstream.base + "/v1")
    with running_server(config) as sidecar:
        host, port = sidecar.server.addresses["model"]
        for target, given in (("/v1/chat/completions", ""),
                              ("/v1/chat/completions", "x-watchdog-token: wrong\r\n"),
                              ("/token/wrong/agent/bot/v1/chat/completions", "")):
            start = (f"POST {target} HTTP/1.1\r\nHost: x\r\n{given}"
                     "Content-Type: application/json\r\n").encode()
            length = b"Content-Length: %d\r\n\r\n" % len(body)
            with socket.create_connection((host, port), timeout=5) as sock:
                sock.sendall(start + b"Expect: 100-continue\r\n" + length)
                head, answer = read_answer(sock)
            assert head.startswith(b"HTTP/1.1 401 "), (target, given, head)
            with socket.create_connection((host, port), timeout=5) as sock:
                sock.sendall(start + length + body)
                plain_head, plain = read_answer(sock)
            assert plain_head.startswith(b"HTTP/1.1 401 ") and answer == plain, (answer, plain)
            assert json.loads(answer)["error"]["code"] == "unauthorized"
            assert token.encode() not in head + answer
        with socket.create_connection((host, port), timeout=5) as sock:
            sock.sendall(f"POST /token/{token}/v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                         "Content-Type: application/json\r\nExpect: 100-continue\r\n"
                         f"Content-Length: {len(body)}\r\n\r\n".encode())
            interim, rest = read_head(sock)
            assert interim.startswith(b"HTTP/1.1 100 ") and rest == b"", (interim, rest)
            sock.sendall(body)
            head, answer = read_answer(sock)
            assert head.startswith(b"HTTP/1.1 200 ") and answer == COMPLETION, head
    assert [seen.body for seen in upstream.seen] == [body]


def test_a_silent_or_idle_connection_is_closed_alike_on_both_relays(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """A connection that sends no request head within ``model_body_timeout`` (here 1 s; at
    most 10 s for a new connection's first), new or idle after an answer (keep-alive), is
    closed by either relay at that bound: the aiohttp relay kept an idle one 75 s and a new
    one 10 s whatever the bound, where the compiled relay kept both to the bound (60 s by
    default)."""
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    with sidecar_for(tmp_path, upstream, model_body_timeout=1.0) as sidecar:
        host, port = sidecar.server.addresses["model"]
        for idle in (False, True):
            with socket.create_connection((host, port), timeout=8) as sock:
                if idle:
                    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                 b"Content-Type: application/json\r\n"
                                 b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                    head, answer = read_answer(sock)
                    assert head.startswith(b"HTTP/1.1 200 ") and answer == COMPLETION, head
                since = time.monotonic()
                with contextlib.suppress(ConnectionResetError):  # (closed: its end, or reset)
                    assert sock.recv(1) == b"", idle
                waited = time.monotonic() - since
            assert 0.9 <= waited < 5.0, (idle, waited)


def test_http2_prior_knowledge_is_told_http_1_1_is_required(sidecar: RunningServer,
                                                           upstream: RawUpstream) -> None:
    """A client that starts with HTTP/2's preface (prior knowledge) is told in HTTP/2 that the
    endpoint speaks HTTP/1.1: the server's SETTINGS, then GOAWAY with HTTP_1_1_REQUIRED, then
    the end of the connection; whole or in pieces. Nothing reaches the upstream; the next
    connection is served (curl says what it was told)."""
    settings = bytes(3) + b"\x04\x00" + bytes(4)  # the client's SETTINGS, none set
    host, port = sidecar.server.addresses["model"]
    for pieces in ([H2_PREFACE + settings], [H2_PREFACE[:10], H2_PREFACE[10:] + settings]):
        with socket.create_connection((host, port), timeout=5) as sock:
            for piece in pieces:
                sock.sendall(piece)
            told = b""
            while chunk := sock.recv(65536):
                told += chunk
        assert told == H2_REFUSAL
        goaway = told[9:]
        assert goaway[3] == 7 and goaway[13:17] == b"\x00\x00\x00\x0d"  # HTTP_1_1_REQUIRED
    curl = subprocess.run(["curl", "-v", "--http2-prior-knowledge", "-o", "/dev/null",
                           sidecar.url("model") + "/v1/models"],
                          capture_output=True, text=True, timeout=30)
    assert curl.returncode != 0 and "GOAWAY, error=13" in curl.stderr, curl.stderr
    assert upstream.seen == []
    status, _ = http_request("GET", sidecar.url("model") + "/v1/models")
    assert status == 200


def endless(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
    """An upstream whose stream goes on for 30 s (a chunk each 50 ms): a client gone before
    its end must cancel it."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.end_headers()
    chunk = {"id": "c1", "object": "chat.completion.chunk", "model": "m",
             "choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": None}]}
    for _ in range(600):
        handler.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        handler.wfile.flush()
        time.sleep(0.05)


def test_client_disconnect_cancels_the_upstream_request(tmp_path: Path) -> None:
    raw = RawUpstream(endless)
    try:
        with sidecar_for(tmp_path, raw) as sidecar:
            host, port = sidecar.server.addresses["model"]
            body = b'{"model":"m","stream":true,"messages":[]}'
            with socket.create_connection((host, port), timeout=5) as sock:
                sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                             b"Content-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
                assert b"200" in sock.recv(4096)
            assert raw.broken_pipe.wait(10), "the upstream request was not cancelled"
    finally:
        raw.close()


# -- no open proxy ------------------------------------------------------------------------------

@pytest.mark.parametrize("target", [
    b"http://evil.example/v1/models", b"/v1/../admin", b"/v1/%2e%2e/admin",
    b"/v1/models%2f..%2f..%2fadmin", b"//evil.example/v1/models", b"/v2/models",
    b"/v1/models/..", b"/v1\\..\\admin", b"/admin",
    b"/token/t/../../admin", b"/token/t", b"/token//evil.example/v1/models",
    b"/token/t/token/t/v1/models",
    # the agent's name in the path: checked as the header is, and nothing after it but /v1/
    b"/agent/../v1/models", b"/agent/%2e%2e/v1/models", b"/agent/a%2fb/v1/models",
    b"/agent/a%5cb/v1/models", b"/agent/x/agent/y/v1/models", b"/agent/x/token/t/v1/models",
    b"/agent/x", b"/agent//evil.example/v1/models", b"/agent/%ff/v1/models",
    b"/agent/%00/v1/models", b"/agent/" + b"a" * 201 + b"/v1/models",
    b"/agent/x/../../admin", b"/token/t/agent/../../v1/models"])
def test_request_targets_reach_nothing_else(sidecar: RunningServer, upstream: RawUpstream,
                                            target: bytes) -> None:
    answer = raw_http(sidecar, b"GET " + target + b" HTTP/1.1\r\nHost: evil.example\r\n"
                      b"Content-Length: 0\r\n\r\n")
    assert answer.split(b" ", 2)[1] in (b"400", b"404"), answer[:200]
    assert upstream.seen == []


@pytest.mark.parametrize("target", [
    b"/agent/a%0ab/v1/models", b"/agent/a%0d%0aX-Evil:%201/v1/models",
    b"/token/t/agent/%0a/v1/models"])
def test_a_line_break_in_the_paths_agent_name_is_a_400_in_the_apis_shape(
        sidecar: RunningServer, upstream: RawUpstream, target: bytes) -> None:
    """An encoded CR or LF in the path's agent name is refused as any name that is not
    printable, on both relays: a 400 in the API's error shape that names the path's agent name
    (the aiohttp relay's route once matched no path with a line break in it: aiohttp's own
    plain-text 404)."""
    answer = raw_http_whole(sidecar, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n"
                            b"Connection: close\r\n\r\n")
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b" ", 2)[1] == b"400", answer[:300]
    error = json.loads(body)["error"]
    assert error["code"] == "bad_request"
    assert "the path's agent name" in error["message"]
    assert upstream.seen == []


def test_a_line_break_elsewhere_in_the_path_goes_on_as_any_other_path(
        sidecar: RunningServer, upstream: RawUpstream) -> None:
    """A path outside the steered APIs with an encoded line feed in it is passed through, on
    both relays (the aiohttp relay once answered it with aiohttp's own 404)."""
    answer = raw_http_whole(sidecar, b"GET /v1/files/a%0ab HTTP/1.1\r\nHost: x\r\n"
                            b"Connection: close\r\n\r\n")
    assert answer.split(b" ", 2)[1] == b"200", answer[:300]
    # (the aiohttp relay writes its percent-encodings in upper case: the same URI, RFC 3986 §2.1)
    assert [seen.path.lower() for seen in upstream.seen] == ["/v1/files/a%0ab"]


def test_a_token_put_after_v1_or_the_agent_is_told_where_it_goes(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """A gateway's token put anywhere but first in the path (``/v1/token/<token>/…``, after
    ``/agent/<name>/``: a base URL put together in the wrong order) is refused as before, a 401
    or a 404, its message saying where the token goes, on both relays; never echoed, and
    nothing reaches the upstream."""
    token = "t0ken-for-the-model-endpoint-1234"
    config = sidecar_config(tmp_path / "state", model_address="0.0.0.0:0", api_token=token,
                            model_upstream=upstream.base + "/v1")
    with running_server(config) as sidecar:
        for target, status in ((f"/v1/token/{token}/chat/completions", b"401"),
                               (f"/agent/bot/token/{token}/v1/chat/completions", b"404")):
            answer = raw_http_whole(sidecar, (
                f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Connection: close\r\nContent-Length: 2\r\n\r\n{}").encode())
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.split(b" ", 2)[1] == status, answer[:300]
            assert "/token/<token>/ goes first" in json.loads(body)["error"]["message"]
            assert token.encode() not in answer
    assert upstream.seen == []


def test_the_token_never_goes_on_to_the_upstream_in_the_target(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """A request that carries the right token (its header) and the token again in its target,
    past where the endpoint takes it off (``/v1/token/<token>/…``, a query, encoded or not),
    is refused with a 400 on both relays: sent on, the token would be in the upstream's path
    (its provider's access logs). Never echoed."""
    token = "t0ken-for-the-model-endpoint-1234"
    config = sidecar_config(tmp_path / "state", model_address="0.0.0.0:0", api_token=token,
                            model_upstream=upstream.base + "/v1")
    encoded = token.replace("-", "%2D")
    with running_server(config) as sidecar:
        for target in (f"/v1/token/{token}/chat/completions",
                       f"/v1/chat/completions?api-key={token}",
                       f"/token/{token}/v1/models/{encoded}"):
            answer = raw_http_whole(sidecar, (
                f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"x-watchdog-token: {token}\r\nConnection: close\r\n"
                "Content-Length: 2\r\n\r\n{}").encode())
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.split(b" ", 2)[1] == b"400", (target, answer[:300])
            assert "would go on to the upstream" in json.loads(body)["error"]["message"]
            assert token.encode() not in answer
        assert post_to(sidecar, f"/token/{token}/v1/chat/completions") == 200  # (taken off)
    assert [seen.path for seen in upstream.seen] == ["/v1/chat/completions"]


def test_the_token_as_a_name_is_refused_never_kept(
        tmp_path: Path, upstream: RawUpstream, caplog: pytest.LogCaptureFixture) -> None:
    """The token pasted where a request names its agent, run or session (the path's
    ``/agent/<name>/``, whole or in part; the ``x-watchdog-agent``, ``x-watchdog-run`` and
    ``x-session-id`` headers: a confused environment) is refused with a 400 on both relays,
    never echoed, before anything goes upstream or is booked: kept, the name would be in the
    runs the API lists, the metrics' labels and the logs. A new conversation's first chat
    request (the one the compiled relay sends on ahead of Python)."""
    caplog.set_level(logging.DEBUG)
    token = "t0ken-for-the-model-endpoint-1234"
    config = sidecar_config(tmp_path / "state", model_address="0.0.0.0:0", api_token=token,
                            model_upstream=upstream.base + "/v1")
    body = b'{"model":"m","messages":[{"role":"user","content":"Count the files."}]}'
    cases = [(f"/token/{token}/agent/{token}/v1/chat/completions", {}, "agent name"),
             (f"/token/{token}/agent/team-{token.replace('-', '%2D')}/v1/chat/completions",
              {}, "agent name"),
             (f"/agent/{token}/v1/chat/completions", {"x-watchdog-token": token},
              "agent name")]
    for header in ("x-watchdog-agent", "x-watchdog-run", "x-session-id"):
        cases.append((f"/token/{token}/v1/chat/completions", {header: token}, header))
    with running_server(config) as sidecar:
        for target, headers, where in cases:
            answer = raw_http_whole(sidecar, (
                f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + "".join(f"{name}: {value}\r\n" for name, value in headers.items())
                + f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n").encode()
                + body)
            head, _, said = answer.partition(b"\r\n\r\n")
            assert head.split(b" ", 2)[1] == b"400", (target, headers, answer[:300])
            message = json.loads(said)["error"]["message"]
            assert f"the token is in the {where}" in message or (
                where == "agent name" and "the token is in the path's agent name" in message), \
                message
            assert token.encode() not in answer
        assert upstream.seen == []
        assert sidecar.get_json("/v1/runs", {"Authorization": f"Bearer {token}"})["runs"] == []
        metrics = http_request("GET", sidecar.metrics + "/metrics")[1].decode()
        assert 'outcome="refused"' in metrics  # (counted: under the default agent)
        kept = metrics + caplog.text
    assert token not in kept and "team-" not in kept


def post_to(sidecar: RunningServer, target: str) -> int:
    answer = raw_http_whole(sidecar, (
        f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Connection: close\r\nContent-Length: 2\r\n\r\n{}").encode())
    return int(answer.split(b" ", 2)[1])


def test_connect_is_refused(sidecar: RunningServer, upstream: RawUpstream) -> None:
    answer = raw_http(sidecar, b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example:443"
                      b"\r\n\r\n")
    assert answer.split(b" ", 2)[1] in (b"400", b"404", b"405"), answer[:200]
    assert upstream.seen == []


def test_another_host_header_still_reaches_only_the_configured_upstream(
        sidecar: RunningServer, upstream: RawUpstream) -> None:
    status, _ = post(sidecar, "/v1/chat/completions", b'{"model":"m","messages":[]}',
                     {"Host": "evil.example"})
    assert status == 200
    assert upstream.seen[-1].headers["host"] == upstream.base.removeprefix("http://")


# -- credentials --------------------------------------------------------------------------------

def test_the_api_key_appears_nowhere(tmp_path: Path, upstream: RawUpstream,
                                     caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with sidecar_for(tmp_path, upstream, log_level="debug") as sidecar:
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                           "tools": [{"type": "function", "function": {"name": "t"}}]})
        for path in ("/v1/chat/completions", "/v1/models", "/v1/responses"):
            post(sidecar, path, body.encode(), {"x-api-key": KEY, "api-key": KEY})
        runs = sidecar.get_json("/v1/runs")["runs"]
        assert runs, "the calls are runs"
        dumped = json.dumps(runs) + "".join(
            json.dumps(sidecar.get_json(f"/v1/runs/{run['id']}")) for run in runs)
        _, metrics = http_request("GET", sidecar.metrics + "/metrics")
        sidecar.flush()
        state = b"".join(path.read_bytes() for path in (tmp_path / "state").rglob("*")
                         if path.is_file())
    assert KEY not in dumped
    assert KEY.encode() not in metrics
    assert KEY.encode() not in state
    assert KEY not in caplog.text
    assert b"agent_watchdog_model_requests_total" in metrics


# -- bounds and hostile input -------------------------------------------------------------------

def test_a_body_over_the_limit_is_413(tmp_path: Path, upstream: RawUpstream) -> None:
    with sidecar_for(tmp_path, upstream, model_max_body_bytes=1024) as sidecar:
        status, answer = post(sidecar, "/v1/chat/completions", b"{" + b" " * 2000 + b"}")
    assert status == 413
    error = json.loads(answer)["error"]
    assert error["code"] == "request_too_large" and "model_max_body_bytes" in error["message"]
    assert upstream.seen == []


def test_too_many_requests_in_flight_is_503(tmp_path: Path) -> None:
    """Past ``model_max_concurrent``: 503 with Retry-After, whatever the request's size."""
    release = threading.Event()

    def held(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        release.wait(10)
        completion_reply(handler, seen)

    raw = RawUpstream(held)
    try:
        with sidecar_for(tmp_path, raw, model_max_concurrent=1) as sidecar:
            results: list[int] = []
            first = threading.Thread(target=lambda: results.append(post(
                sidecar, "/v1/chat/completions", b'{"model":"m","messages":[]}')[0]))
            first.start()
            wait_until(lambda: raw.seen, what="the first request upstream", timeout=10)
            request = urllib.request.Request(
                sidecar.url("model") + "/v1/chat/completions", method="POST",
                data=b'{"model":"m","messages":[]}', headers={"Content-Type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as failure:
                urllib.request.urlopen(request, timeout=10)
            assert failure.value.code == 503
            assert failure.value.headers["Retry-After"] == "1"
            assert "model_max_concurrent" in json.loads(failure.value.read())["error"]["message"]
            # a body more than a socket's buffers take, declared or chunked: its client, still
            # sending it, reads the 503 (its body read and dropped, not left unread under it)
            large = many_messages(12 << 20)
            status, answer = post(sidecar, "/v1/chat/completions", large)
            assert status == 503
            assert "model_max_concurrent" in json.loads(answer)["error"]["message"]
            status, headers, answer = chunked_post(sidecar, large)
            assert (status, headers["Retry-After"]) == (503, "1")
            assert len(raw.seen) == 1
            release.set()
            first.join(10)
            assert results == [200]
    finally:
        release.set()
        raw.close()


def many_messages(size: int) -> bytes:
    """A chat request of about ``size`` bytes: a long history of small messages."""
    message = {"role": "user", "content": "x" * 40}
    count = size // len(json.dumps(message))
    return json.dumps({"model": "m", "messages": [message] * count}).encode()


def metric(sidecar: RunningServer, line: str) -> float:
    """The value of the exposition line that starts ``line`` (0 when absent)."""
    _, text = http_request("GET", sidecar.url("metrics") + "/metrics")
    for row in text.decode().splitlines():
        if row.startswith(line + " "):
            return float(row.rsplit(" ", 1)[1])
    return 0.0


def chunked_post(sidecar: RunningServer, body: bytes) -> tuple[int, dict[str, str], bytes]:
    """``body`` sent chunked (no Content-Length), 64 KiB a chunk; the answer."""
    host, port = sidecar.server.addresses["model"]
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        pieces = (body[at:at + 65536] for at in range(0, len(body), 65536))
        # (refused before it was all sent: its answer came first)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            connection.request("POST", "/v1/chat/completions", pieces,
                               {"Content-Type": "application/json"}, encode_chunked=True)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


BYTES_HELD = "agent_watchdog_model_request_bytes_in_flight"
OVER_BUDGET = 'agent_watchdog_model_overloaded_total{limit="model_max_inflight_bytes"}'


def test_request_bytes_past_the_inflight_budget_get_503_until_retried(tmp_path: Path) -> None:
    """Two held 1 MiB requests fill a 2.5 MiB budget: a third (12 MiB, more than a socket's
    buffers take), declared or chunked, gets 503 with Retry-After while its client is still
    sending it (counted; the bytes held stay within the budget) and, once they have ended,
    passes when retried."""
    release = threading.Event()

    def held(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        release.wait(10)
        completion_reply(handler, seen)

    raw = RawUpstream(held)
    body, large = many_messages(1 << 20), many_messages(12 << 20)
    budget = (5 << 20) // 2
    try:
        with sidecar_for(tmp_path, raw, model_max_inflight_bytes=budget) as sidecar:
            results: list[int] = []
            first = [threading.Thread(target=lambda: results.append(post(
                sidecar, "/v1/chat/completions", body)[0])) for _ in range(2)]
            for thread in first:
                thread.start()
            wait_until(lambda: len(raw.seen) == 2, what="two requests upstream", timeout=10)
            assert metric(sidecar, BYTES_HELD) == 2 * len(body) <= budget
            status, answer = post(sidecar, "/v1/chat/completions", large)
            assert status == 503
            assert "model_max_inflight_bytes" in json.loads(answer)["error"]["message"]
            status, headers, answer = chunked_post(sidecar, large)
            assert (status, headers["Retry-After"]) == (503, "1")
            assert json.loads(answer)["error"]["code"] == "overloaded"
            host, port = sidecar.server.addresses["model"]
            waits = raw_http(sidecar, (  # (refused before its body is sent)
                f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(large)}\r\n"
                f"Expect: 100-continue\r\n\r\n").encode())
            assert waits.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in waits.lower()
            assert metric(sidecar, OVER_BUDGET) == 3
            assert metric(sidecar, BYTES_HELD) == 2 * len(body)
            assert len(raw.seen) == 2
            release.set()
            for thread in first:
                thread.join(10)
            assert results == [200, 200]
            wait_until(lambda: metric(sidecar, BYTES_HELD) == 0, what="the bytes released")
            assert post(sidecar, "/v1/chat/completions", large)[0] == 200
            assert chunked_post(sidecar, large)[0] == 200
            assert [seen.body for seen in raw.seen[2:]] == [large, large]
    finally:
        release.set()
        raw.close()


def test_the_openai_sdk_retries_past_the_inflight_budget_on_its_own(tmp_path: Path) -> None:
    """The real ``openai`` SDK, whose requests it refuses for the bytes in flight: its client
    reads the 503 (not a connection closed under a body still being sent), waits the
    ``Retry-After`` it says, and sends the request again, which passes once the held requests
    have ended. The agent sees nothing but its answer, and the upstream gets its body once."""
    import openai

    release = threading.Event()

    def held(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        if len(seen.body) < (4 << 20):
            release.wait(10)
        completion_reply(handler, seen)

    raw = RawUpstream(held)
    body = many_messages(1 << 20)
    history = [{"role": "user", "content": "x" * (12 << 20)}]  # (one message: the SDK's
    # own work on a request is by message)
    statuses: list[tuple[int, str | None]] = []

    def answered(response: Any) -> None:  # what the SDK's own HTTP client read
        statuses.append((response.status_code, response.headers.get("retry-after")))
        if response.status_code == 503:
            release.set()

    http_client = openai.DefaultHttpxClient(event_hooks={"response": [answered]})
    try:
        with sidecar_for(tmp_path, raw, model_max_inflight_bytes=(5 << 20) // 2) as sidecar:
            first = [threading.Thread(target=post, args=(sidecar, "/v1/chat/completions", body))
                     for _ in range(2)]
            for thread in first:
                thread.start()
            wait_until(lambda: len(raw.seen) == 2, what="two requests upstream", timeout=10)
            client = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY,
                                   max_retries=3, http_client=http_client)
            began = time.monotonic()
            reply = client.chat.completions.with_raw_response.create(model="m", messages=history)
            took = time.monotonic() - began
            assert reply.parse().choices[0].message.content == "hi"
            assert statuses[0] == (503, "1") and statuses[-1][0] == 200, statuses
            assert reply.retries_taken == len(statuses) - 1 >= 1
            assert took >= 1.0  # the Retry-After it was told, not a reset's quick retry
            assert metric(sidecar, OVER_BUDGET) == reply.retries_taken
            for thread in first:
                thread.join(10)
            assert [len(seen.body) for seen in raw.seen[2:]] == [len(raw.seen[2].body)]
            assert json.loads(raw.seen[2].body)["messages"] == history
    finally:
        release.set()
        http_client.close()
        raw.close()


def test_one_request_alone_passes_past_the_inflight_budget(tmp_path: Path,
                                                            upstream: RawUpstream) -> None:
    """A request alone is taken whatever its size (a max-size request always passes), declared
    or chunked."""
    body = many_messages(3 << 20)
    with sidecar_for(tmp_path, upstream, model_max_inflight_bytes=1 << 20) as sidecar:
        assert post(sidecar, "/v1/chat/completions", body)[0] == 200
        assert chunked_post(sidecar, body)[0] == 200
        assert metric(sidecar, OVER_BUDGET) == 0
    assert [seen.body for seen in upstream.seen] == [body, body]


@pytest.mark.parametrize("body", [b"{not json", b'{"model": "m", "messages": "\xff\xfe"}',
                                  b"[1, 2]", b"", b'{"model": NaN}'])
def test_unreadable_bodies_pass_through_when_nothing_needs_reading(
        sidecar: RunningServer, upstream: RawUpstream, body: bytes) -> None:
    status, _ = post(sidecar, "/v1/chat/completions", body)
    assert status == 200  # the upstream's to judge
    assert upstream.seen[-1].body == body


@pytest.mark.parametrize("body", [
    b'{"model": "m", "seed": ' + b"1" * 4301 + b', "messages": []}',
    b'{"model": "m", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}", b"[" * 100_000])
def test_json_the_endpoint_cannot_judge_is_a_clear_400_never_passed_unread(
        sidecar: RunningServer, upstream: RawUpstream, body: bytes) -> None:
    """A body a model API's parser may read and Python's cannot (an integer of more than 4,300
    digits, nesting past Python's depth) is never passed on unread: the run it belongs to, and
    its budget, could not be told."""
    status, answer = post(sidecar, "/v1/chat/completions", body)
    assert status == 400
    assert "the request body cannot be read" in json.loads(answer)["error"]["message"]
    assert upstream.seen == []


@pytest.mark.parametrize("body", [b"{not json", b'{"model": "m", "x": "\xff\xfe"}', b"[1]"])
def test_unreadable_bodies_are_a_clear_400_when_the_run_is_steered(
        sidecar: RunningServer, upstream: RawUpstream, body: bytes) -> None:
    status, answer = post(sidecar, "/v1/chat/completions", body, {"x-watchdog-run": "r-1"})
    assert status == 400
    assert "the request body cannot be read" in json.loads(answer)["error"]["message"]
    assert upstream.seen == []


CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Look a up."}],
                   "tools": [{"type": "function", "function": {"name": "lookup"}}]}).encode()
CODINGS = {"gzip": gzip.compress, "deflate": zlib.compress,
           "x-deflate-raw": lambda data: zlib.compress(data, wbits=-zlib.MAX_WBITS)}


@pytest.mark.parametrize("coding", sorted(CODINGS))
def test_a_compressed_body_is_read_and_passed_on_as_it_came(
        sidecar: RunningServer, upstream: RawUpstream, coding: str) -> None:
    """A gzip or deflate body (raw deflate too, as some clients send it) is inflated to be
    read — its call is a run's — and passed on byte for byte with its Content-Encoding."""
    name = "deflate" if coding.startswith("x-deflate") else coding
    body = CODINGS[coding](CHAT)
    status, _ = post(sidecar, "/v1/chat/completions", body,
                     {"Content-Encoding": name, "x-watchdog-run": f"coded-{coding}"})
    assert status == 200
    assert (upstream.seen[-1].body, upstream.seen[-1].headers["content-encoding"]) == (body, name)
    run = wait_until(lambda: run_detail(sidecar.api, f"coded-{coding}"))
    assert run["signals"]["iterations"] == 1


def test_a_compressed_body_that_is_steered_goes_on_rewritten_and_plain(
        sidecar: RunningServer, upstream: RawUpstream) -> None:
    status, _ = post(sidecar, "/v1/chat/completions", gzip.compress(CHAT),
                     {"Content-Encoding": "gzip", "x-watchdog-budget-tool-calls": "3"})
    assert status == 200
    seen = upstream.seen[-1]
    assert "content-encoding" not in seen.headers
    sent = json.loads(seen.body)  # plain JSON: the countdown added to what the agent sent
    assert "[budget: 3 of 3 tool calls left" in sent["messages"][0]["content"]
    assert sent["messages"][1:] == json.loads(CHAT)["messages"]


@pytest.mark.parametrize(("coding", "body", "problem"), [
    ("gzip", b"\x1f\x8b not gzip", "is not valid gzip data"),
    ("gzip", gzip.compress(CHAT)[:-9], "is not valid gzip data"),
    ("br", CHAT, "Content-Encoding 'br' is not one the endpoint reads"),
    ("gzip", gzip.compress(b" " * 2_000_000 + CHAT), "inflated, it is larger than 1048576")])
def test_a_body_it_cannot_inflate_passes_unread_or_is_a_clear_400_when_steered(
        tmp_path: Path, upstream: RawUpstream, coding: str, body: bytes, problem: str) -> None:
    with sidecar_for(tmp_path, upstream, model_max_body_bytes=1 << 20) as sidecar:
        status, _ = post(sidecar, "/v1/chat/completions", body, {"Content-Encoding": coding})
        assert status == 200 and upstream.seen[-1].body == body  # the upstream's to judge
        status, answer = post(sidecar, "/v1/chat/completions", body,
                              {"Content-Encoding": coding, "x-watchdog-run": "r-1"})
        assert status == 400
        assert problem in json.loads(answer)["error"]["message"]
        assert len(upstream.seen) == 1


@pytest.mark.parametrize(("header", "value"), [
    ("x-watchdog-budget-tool-calls", "abc"), ("x-watchdog-budget-tool-calls", "2.5"),
    ("x-watchdog-budget-tool-calls", "-1"), ("x-watchdog-budget-seconds", "inf"),
    ("x-watchdog-budget-iterations", "1e99"), ("x-watchdog-budget-cost-usd", "nan"),
    # what float() takes and the headers' ASCII digits are not
    ("x-watchdog-budget-tool-calls", "1e3"), ("x-watchdog-budget-tool-calls", "+3"),
    ("x-watchdog-budget-tool-calls", "1_000"), ("x-watchdog-budget-tool-calls", "4 5"),
    ("x-watchdog-budget-tool-calls", "3.0"), ("x-watchdog-budget-cost-usd", "1e-3"),
    ("x-watchdog-budget-seconds", "1.5.0"), ("x-watchdog-budget-cost-usd", "."),
    ("x-watchdog-budget-tool-calls", "\u0663"), ("x-watchdog-budget-cost-usd", "\uff11"),
    ("x-watchdog-budget-tool-calls", "3\u00a0")])
def test_bad_budget_headers_are_a_clear_400(sidecar: RunningServer, upstream: RawUpstream,
                                            header: str, value: str) -> None:
    body = b'{"model":"m","messages":[{"role":"user","content":"budget"}]}'
    answer = raw_http_whole(sidecar, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                            b"Content-Type: application/json\r\nConnection: close\r\n"
                            + f"{header}: ".encode() + value.encode()
                            + b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    head, _, text = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400"), (value, head)
    message = json.loads(text)["error"]["message"]
    assert header in message and "is not allowed" in message
    # the largest allowed in the digits asked for (not 1e+06, an exponent the header refuses)
    assert message.endswith(("from 0 to 1000000", "from 0 to 2592000")), message
    assert upstream.seen == []


@pytest.mark.parametrize("header", ["x-watchdog-budget-tool-calls", "x-watchdog-agent",
                                    "x-watchdog-run"])
def test_a_watchdog_header_given_twice_apart_is_a_clear_400(
        sidecar: RunningServer, upstream: RawUpstream, header: str) -> None:
    """Two values of one ``x-watchdog-*`` header (a budget from the client's default headers
    and one from its environment): the last was taken on both relays, 50 tool calls over 1.
    Which was meant is the agent's to say: a 400 naming both, nothing sent upstream. The same
    value twice is one."""
    body = b'{"model":"m","messages":[{"role":"user","content":"twice"}]}'

    def sent(first: str, second: str) -> tuple[bytes, bytes]:
        answer = raw_http_whole(sidecar, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                                b"Content-Type: application/json\r\nConnection: close\r\n"
                                + f"{header}: {first}\r\n{header}: {second}\r\n".encode()
                                + b"Content-Length: %d\r\n\r\n" % len(body) + body)
        head, _, text = answer.partition(b"\r\n\r\n")
        return head, text

    head, text = sent("1", "50")
    assert head.startswith(b"HTTP/1.1 400"), head
    assert json.loads(text)["error"]["message"] == (
        f"{header} is given twice, '1' and '50': send it once")
    assert upstream.seen == []
    head, _ = sent("7", "7")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert len(upstream.seen) == 1


def raw_http_whole(sidecar: RunningServer, request: bytes) -> bytes:
    """Send ``request`` as written (it asks to close the connection); the whole answer."""
    host, port = sidecar.server.addresses["model"]
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_budget_headers_in_ascii_digits_are_the_runs_budget(sidecar: RunningServer,
                                                            upstream: RawUpstream) -> None:
    for k, (headers, budget) in enumerate((
            ({"x-watchdog-budget-tool-calls": "7", "x-watchdog-budget-cost-usd": "0.25"},
             {"max_tool_calls": 7, "max_cost_usd": 0.25}),
            ({"x-watchdog-budget-seconds": ".5", "x-watchdog-budget-iterations": "0"},
             {"max_seconds": 0.5, "max_iterations": 0}),
            ({"x-watchdog-budget-seconds": "30."}, {"max_seconds": 30}))):
        run = f"digits-{k}"
        status, _ = post(sidecar, "/v1/chat/completions",
                         b'{"model":"m","messages":[{"role":"user","content":"d"}]}',
                         {**headers, "x-watchdog-run": run})
        assert status == 200, headers
        detail = wait_until(lambda run=run: sidecar.get_json(f"/v1/runs/{run}"), "the run")
        assert {key: detail["budget"][key] for key in budget} == budget


def test_an_agent_header_that_is_no_utf8_or_no_name_harms_nothing(
        sidecar: RunningServer, upstream: RawUpstream) -> None:
    """``x-watchdog-agent`` as raw bytes that are no UTF-8 (Latin-1 "agënt") names the run with
    U+FFFD in their place, on both relays alike, and nothing else: the metrics still scrape and
    the run is kept. A name with a control character, or longer than 200, is a clear 400."""
    body = b'{"model":"m","messages":[{"role":"user","content":"latin-1 agent"}]}'
    head = raw_http(sidecar, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/json\r\nx-watchdog-agent: ag\xebnt\r\n"
                    b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    assert head.startswith(b"HTTP/1.1 200"), head
    runs = wait_until(lambda: [run for run in sidecar.get_json("/v1/runs")["runs"]
                               if run["agent"] == "ag\ufffdnt"], "the run named")
    assert len(runs) == 1
    status, text = http_request("GET", sidecar.url("metrics") + "/metrics")
    assert status == 200 and 'agent="ag\ufffdnt"'.encode() in text
    for bad in ("tab\there", "x" * 201):
        status, answer = post(sidecar, "/v1/chat/completions", body, {"x-watchdog-agent": bad})
        assert status == 400, bad
        assert "x-watchdog-agent" in json.loads(answer)["error"]["message"]
    assert len(upstream.seen) == 1


def test_upstream_down_is_502_in_the_apis_shape(tmp_path: Path) -> None:
    port = free_port()  # nobody listens on it
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=f"http://127.0.0.1:{port}/v1",
                            model_upstream_anthropic=f"http://127.0.0.1:{port}")
    with running_server(config) as sidecar:
        status, answer = post(sidecar, "/v1/chat/completions", b'{"model":"m","messages":[]}')
        assert status == 502
        assert json.loads(answer)["error"]["code"] == "upstream_unreachable"
        status, answer = post(sidecar, "/v1/messages", b'{"model":"m","messages":[]}')
        assert status == 502
        assert json.loads(answer)["type"] == "error"


def test_upstream_timeout_is_504(tmp_path: Path) -> None:
    released = threading.Event()

    def stalled(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        released.wait(30)  # says nothing until the test is over
        completion_reply(handler, seen)

    raw = RawUpstream(stalled)
    try:
        with sidecar_for(tmp_path, raw, model_upstream_timeout=0.3) as sidecar:
            status, answer = post(sidecar, "/v1/chat/completions",
                                  b'{"model":"m","messages":[]}')
        assert status == 504
        assert "model_upstream_timeout" in json.loads(answer)["error"]["message"]
    finally:
        released.set()
        raw.close()


def test_odd_sse_from_upstream_never_crashes(tmp_path: Path) -> None:
    odd = (b"data: {not json}\n\n: a comment\n\nevent: ping\n\ndata: [1,2]\n\n"
           b"data: {\"choices\": \"no\"}\n\ndata: {\"choices\": [{\"delta\": {\"tool_calls\":"
           b" [{\"index\": \"x\"}]}}]}\r\n\r\ndata: " + b"x" * 70_000 + b"\n\n"
           b"data: {\"id\": 5, \"usage\": {\"prompt_tokens\": -3}}\n\ndata: unterminated")

    def garbage(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Content-Length", str(len(odd)))
        handler.end_headers()
        handler.wfile.write(odd)

    raw = RawUpstream(garbage)
    try:
        with sidecar_for(tmp_path, raw) as sidecar:
            body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}'
            for headers in ({}, {"x-watchdog-budget-tool-calls": "2"}):
                status, answer = post(sidecar, "/v1/chat/completions", body, headers)
                assert status == 200 and answer == odd  # passed on as it came
            status, _ = http_request("GET", sidecar.url("model") + "/v1/models")
            assert status == 200  # still serving
    finally:
        raw.close()


CUT_STREAM = (b'data: {"choices":[{"index":0,"delta":{"content":"The answer is"}}]}\n\n'
              b'data: {"choices":[{"index":0,"delta":{"content":" partial"}}]}\n\n')


@pytest.mark.parametrize("framing", ["chunked", "length", "reset"])
def test_an_upstream_cut_off_mid_stream_is_cut_off_for_the_client_too(
        tmp_path: Path, framing: str) -> None:
    """An upstream whose stream breaks off (its connection closed mid-body: an unfinished
    chunked body, or fewer bytes than its length said; or reset, a body of no length said that
    ends with its connection: a reset is no end, RFC 9112 §8): the client sees its answer
    broken off too, never an answer that ended, on both relays, with a bound on tool calls, a
    budget in dollars (its stream read event by event) or neither; the sidecar serves on."""
    def cut(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        if framing == "chunked":
            handler.send_header("Transfer-Encoding", "chunked")
            handler.end_headers()
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(CUT_STREAM), CUT_STREAM))
        elif framing == "length":
            handler.send_header("Content-Length", str(len(CUT_STREAM) + 500))
            handler.end_headers()
            handler.wfile.write(CUT_STREAM)
        else:
            handler.send_header("Connection", "close")
            handler.end_headers()
            handler.wfile.write(CUT_STREAM)
            handler.wfile.flush()
            time.sleep(0.1)  # (its events on their way before the reset)
            reset(handler)
        handler.wfile.flush()
        handler.close_connection = True

    raw = RawUpstream(cut)
    try:
        with sidecar_for(tmp_path, raw) as sidecar:
            host, port = sidecar.server.addresses["model"]
            body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}'
            for headers in ({}, {"x-watchdog-budget-tool-calls": "2"},
                            {"x-watchdog-budget-cost-usd": "5"}):
                connection = http.client.HTTPConnection(host, port, timeout=10)
                connection.request("POST", "/v1/chat/completions", body, {
                    "Content-Type": "application/json", **headers})
                response = connection.getresponse()
                assert response.status == 200
                with pytest.raises(http.client.IncompleteRead) as broken:
                    response.read()
                assert b"The answer is" in broken.value.partial, headers
                connection.close()
            assert len(raw.seen) == 3
            # each call booked as a failed one (no answer: the run goes on, and the same
            # first request sent again is its run's, not another's), and the sidecar serves on
            runs = wait_until(lambda: (r := sidecar.get_json("/v1/runs")["runs"])
                              and r[0]["errors"] == 3 and r, "three failed calls")
            assert [(run["iterations"], run["errors"], run["state"]) for run in runs] == [
                (3, 3, "active")]
            _, metrics = http_request("GET", sidecar.metrics + "/metrics")
            assert 'agent_watchdog_model_requests_total{agent="unknown",api="chat",' \
                   'outcome="upstream_error"} 3.0' in metrics.decode()
    finally:
        raw.close()


def test_an_http10_client_that_keeps_alive_gets_the_end_of_a_stream(tmp_path: Path) -> None:
    """An HTTP/1.0 client (no chunked bodies) asking to keep its connection: a stream of no
    length said reaches it whole and ends with the connection, on both relays."""
    def streamed(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        data = CUT_STREAM + b"data: [DONE]\n\n"
        handler.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))

    raw = RawUpstream(streamed)
    try:
        with sidecar_for(tmp_path, raw) as sidecar:
            host, port = sidecar.server.addresses["model"]
            body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}'
            with socket.create_connection((host, port), timeout=10) as sock:
                sock.sendall(b"POST /v1/chat/completions HTTP/1.0\r\nHost: x\r\n"
                             b"Connection: keep-alive\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(body) + body)
                answer = b""
                while chunk := sock.recv(65536):  # (a timeout here: the end never came)
                    answer += chunk
            head, _, rest = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.") and b" 200 " in head.split(b"\r\n")[0]
            assert rest.endswith(b"data: [DONE]\n\n") and b"The answer is" in rest, answer
    finally:
        raw.close()


def test_json_nested_deeper_than_a_parser_goes_never_crashes(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A whole response and a stream event nested 5,000 deep (past Python's and serde's
    parsers), to a run with no bound: passed on as they came, read as unreadable JSON, nothing
    logged as a failure. (With a bound, such JSON cannot be judged: docs/model-endpoint.md.)"""
    deep = b"[" * 5000 + b"]" * 5000
    whole, stream = b'{"choices": ' + deep + b"}", b"data: " + deep + b"\n\ndata: [DONE]\n\n"

    def nested(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        streamed = b'"stream":true' in seen.body
        send(handler, 200, stream if streamed else whole,
             {"Content-Type": "text/event-stream" if streamed else "application/json"})

    raw = RawUpstream(nested)
    caplog.set_level(logging.ERROR)
    try:
        with sidecar_for(tmp_path, raw) as sidecar:
            for streamed in (b"false", b"true"):
                body = (b'{"model":"m","stream":' + streamed +
                        b',"messages":[{"role":"user","content":"deep ' + streamed + b'"}]}')
                status, answer = post(sidecar, "/v1/chat/completions", body)
                assert status == 200 and answer == (stream if streamed == b"true" else whole)
            wait_until(lambda: len(json.loads(http_request(
                "GET", sidecar.api + "/v1/runs?limit=10")[1])["runs"]) >= 2, "the runs")
    finally:
        raw.close()
    assert not [r.getMessage() for r in caplog.records if r.name.startswith("watchdog")]


def test_the_environments_proxy_is_used(tmp_path: Path, upstream: RawUpstream,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY (HTTPS_PROXY for an https upstream) reaches the upstream through the
    proxy: here the raw upstream plays the proxy and sees the absolute-form target."""
    monkeypatch.setenv("HTTP_PROXY", upstream.base)
    monkeypatch.setenv("NO_PROXY", "localhost,127.0.0.1")  # the test talks to the sidecar
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream="http://llm.invalid:9/v1")
    with running_server(config) as sidecar:
        status, answer = post(sidecar, "/v1/chat/completions", b'{"model":"m","messages":[]}')
    assert (status, answer) == (200, COMPLETION)
    assert [seen.path for seen in upstream.seen] == ["http://llm.invalid:9/v1/chat/completions"]
    assert upstream.seen[-1].headers["authorization"] == f"Bearer {KEY}"


def test_proxy_for_reads_the_environment_once() -> None:
    from watchdog.shell.model.headers import proxy_for

    env = {"HTTPS_PROXY": "http://user%40corp:pw@proxy:3128", "no_proxy": "localhost,.internal"}
    proxy = proxy_for("https://api.openai.com/v1", env)
    assert proxy is not None and proxy[0] == "http://proxy:3128"
    assert proxy[1] == "Basic " + base64.b64encode(b"user@corp:pw").decode()
    assert proxy_for("https://llm.internal/v1", env) is None
    assert proxy_for("http://api.openai.com/v1", env) is None  # no HTTP_PROXY
    assert proxy_for("https://api.anthropic.com", {}) is None


def test_a_failure_to_observe_never_fails_the_call(sidecar: RunningServer, upstream: RawUpstream,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from watchdog.core.model.book import ModelBook

    def broken(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("a bug in the run book")

    monkeypatch.setattr(ModelBook, "identify", broken)
    monkeypatch.setattr(ModelBook, "call_record", broken)
    body = b'{"model":"m","messages":[{"role":"user","content":"x"}]}'
    status, answer = post(sidecar, "/v1/chat/completions", body)
    assert (status, answer) == (200, COMPLETION)  # forwarded, answered, unobserved
    assert upstream.seen[-1].body == body
    _, metrics = http_request("GET", sidecar.metrics + "/metrics")
    assert b'agent_watchdog_run_failures_total{stage="model_request"} 1.0' in metrics


# -- the relay's fast paths: the head held for the first bytes, the SSE reader -----------------

def read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """The status line and headers of an answer read from ``sock``, and what came with them in
    the same read."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, "the answer ended before its head"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def stream_request(sidecar: RunningServer, path: str, headers: dict[str, str]) -> socket.socket:
    body = b'{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}]}'
    host, port = sidecar.server.addresses["model"]
    sock = socket.create_connection((host, port), timeout=10)
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json",
             f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]
    sock.sendall("\r\n".join(lines).encode() + b"\r\n\r\n" + body)
    return sock


EVENT = (b'data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,'
         b'"delta":{"content":"one"},"finish_reason":null}]}\n\n')


def test_the_head_goes_on_at_once_even_when_the_first_event_is_slow(tmp_path: Path) -> None:
    """An upstream that sends its head and then thinks: the agent has the status and headers
    before the first event, on every path (read, trimmed, passed through)."""
    release = threading.Event()

    def thinking(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("X-Upstream", "thinking")
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.flush()
        release.wait(10)
        handler.wfile.write(EVENT + b"data: [DONE]\n\n")
        handler.close_connection = True

    raw = RawUpstream(thinking)
    try:
        with sidecar_for(tmp_path, raw) as sidecar:
            for path, headers in (("/v1/chat/completions", {}),
                                  ("/v1/chat/completions", {"x-watchdog-budget-tool-calls": "2"}),
                                  ("/v1/other/stream", {})):
                release.clear()
                with stream_request(sidecar, path, headers) as sock:
                    head, early = read_head(sock)  # while the upstream still holds the event
                    assert head.startswith(b"HTTP/1.1 200") and b"X-Upstream: thinking" in head
                    assert b'"one"' not in early, path
                    release.set()
                    rest = early
                    while b"[DONE]" not in rest:
                        chunk = sock.recv(65536)
                        assert chunk, path
                        rest += chunk
                    assert b'"one"' in rest, path
    finally:
        release.set()
        raw.close()


def test_the_sse_reader_reads_the_same_events_however_the_stream_is_cut() -> None:
    from watchdog.core.model.wire import SSEReader

    stream = (EVENT + b"data:no-space\n\n: comment\n\nevent: ping\ndata: {}\n\n"
              b'data: {"text":"line\xe2\x80\xa8sep"}\n\n' + b"data: a\r\ndata: b\r\n\r\n"
              + EVENT + b"data: [DONE]\n\n")

    def events(cuts: list[int]) -> list[tuple[bytes, str | None, str | None]]:
        reader, out, start = SSEReader(), [], 0
        for end in [*cuts, len(stream)]:
            out += [(e.raw, e.name, e.data) for e in reader.feed(stream[start:end])]
            start = end
        assert reader.rest() == b""
        return out

    whole = events([])
    assert [data for _, _, data in whole] == [
        EVENT[6:-2].decode(), "no-space", None, "{}", '{"text":"line\u2028sep"}', "a\nb",
        EVENT[6:-2].decode(), "[DONE]"]
    assert whole[3][1] == "ping" and b"".join(raw for raw, _, _ in whole) == stream
    assert events(list(range(1, len(stream)))) == whole  # a byte at a time
    for size in (2, 3, 7, 64, 150):
        assert events(list(range(size, len(stream), size))) == whole, size


def test_a_plain_text_delta_is_read_without_parsing_and_nothing_else_is() -> None:
    """The chat stream's fast path gives exactly the text a full parse gives, and only for a
    chunk with nothing else the observation reads; the rest is parsed whole."""
    from watchdog.core.model.wire import plain_content

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        return json.dumps({"id": "c1", "object": "chat.completion.chunk", "created": 1,
                           "model": "m", "choices": [{"index": 0, "delta": delta,
                                                      "logprobs": None,
                                                      "finish_reason": finish}], **extra},
                          separators=(",", ":"), ensure_ascii=False)

    plain = [chunk({"content": "word "}), chunk({"content": ""}),
             chunk({"content": 'say "usage" and "tool_calls"\n\t\\ é \u2028 😀'}),
             chunk({"content": '"delta":{"content":"x"}'}), chunk({"content": "u"}, usage=None),
             json.dumps({"choices": [{"delta": {"content": "bare"}}]}, separators=(",", ":"))]
    for data in plain:
        assert plain_content(data) == json.loads(data)["choices"][0]["delta"]["content"], data
    whole = [chunk({"content": "done"}, "stop"), chunk({}, "tool_calls"),
             chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}),
             chunk({"content": "x"}, usage={"prompt_tokens": 3, "completion_tokens": 1}),
             chunk({"role": "assistant", "content": ""}), chunk({"content": "x", "refusal": None}),
             json.dumps({"choices": [{"delta": {"content": "spaced"}}]}),  # not compact: parsed
             json.dumps({"choices": [{"delta": {"content": "a"}}, {"delta": {"content": "b"}}]},
                        separators=(",", ":")),
             json.dumps({"choices": {"delta": {"content": "no list"}}}, separators=(",", ":")),
             chunk({"content": 5}), "[DONE]", "not json"]
    for data in whole:
        assert plain_content(data) is None, data


def test_the_relay_unset_is_native_where_built_and_native_unbuilt_is_refused(
        tmp_path: Path, upstream: RawUpstream, monkeypatch: pytest.MonkeyPatch) -> None:
    """``model_relay`` unset: the compiled relay serves when it is built, the aiohttp one when
    it is not; ``native`` asked for but not built stops the start with what to do."""
    with sidecar_for(tmp_path, upstream, model_relay=None) as sidecar:
        assert sidecar.server.native is not None  # make test builds it
        assert post(sidecar, "/v1/chat/completions", json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode())[0] == 200
    monkeypatch.setitem(sys.modules, "watchdog.shell.model._relay", None)  # not importable
    monkeypatch.delattr(sys.modules["watchdog.shell.model"], "_relay", raising=False)
    with sidecar_for(tmp_path / "unbuilt", upstream, model_relay=None) as sidecar:
        assert sidecar.server.native is None
        assert post(sidecar, "/v1/chat/completions", json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode())[0] == 200
    with pytest.raises(StartupError) as failure, \
            sidecar_for(tmp_path / "refused", upstream, model_relay="native"):
        pass
    assert "model_relay: native needs the compiled relay" in str(failure.value)
    assert "model_relay: python" in str(failure.value)
