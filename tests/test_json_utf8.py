"""JSON bodies from outside are UTF-8, read strictly: bytes that are not (a stray byte, a
UTF-8-encoded surrogate, UTF-16) are a 400 whose message says so, at the control API and at
the model endpoint, never a 500 and never a value read with a replacement character or a lone
surrogate in it. Real sidecars on 127.0.0.1, real HTTP requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any

import pytest

from tests.harness import RunningServer, http_request, running_server, sidecar_config
from watchdog.core.bounds import load_json

# (body, what the message says): bodies that are JSON objects but for their bytes
BAD_UTF8 = [
    (b'{"messages": 3, "note": "\xff"}', "not UTF-8: invalid start byte at byte 25"),
    (b'{"messages": 3, "note": "\xed\xa0\x80"}', "not UTF-8: invalid continuation byte"),
    (b'{"messages": 3, "\xc3": 1}', "not UTF-8: invalid continuation byte at byte 17"),
    (b'{"messages": 3, "note": "\xe2\x82"}', "not UTF-8"),
    ('{"messages": 3}'.encode("utf-16-le"), "not valid JSON"),
    (b'{"messages": 3, "note": "\\ud800"}', "unpaired UTF-16 surrogate"),
]


@pytest.mark.parametrize(("raw", "fragment"), BAD_UTF8)
def test_load_json_refuses_what_is_not_utf8(raw: bytes, fragment: str) -> None:
    with pytest.raises(ValueError) as refused:
        load_json(raw)
    assert fragment.removeprefix("not valid JSON") in str(refused.value)


def test_load_json_reads_utf8() -> None:
    assert load_json('{"note": "café ☕ 𝄞"}'.encode()) == {"note": "café ☕ 𝄞"}
    assert load_json(b'{"note": "\\ud834\\udd1e"}') == {"note": "𝄞"}  # a pair: one character


@pytest.mark.parametrize(("raw", "fragment"), BAD_UTF8)
@pytest.mark.parametrize("route", ["/v1/runs/beat-1/heartbeat", "/v1/sessions/s-1/checkpoints",
                                   "/v1/runs/beat-1/ack"])
def test_control_api_answers_400_with_the_reason(sidecar: RunningServer, route: str,
                                                 raw: bytes, fragment: str) -> None:
    status, answer = http_request("POST", sidecar.api + route, raw,
                                  {"Content-Type": "application/json"})
    assert status == 400, (status, answer)
    error = json.loads(answer)["error"]
    assert error["code"] == "bad_request"
    assert error["message"].startswith("request body is not valid JSON: ")
    if fragment != "not valid JSON":
        assert fragment in error["message"]
    # the sidecar still answers, and the heartbeat's run was never made
    status, _ = http_request("GET", sidecar.api + "/v1/runs/beat-1")
    assert status == 404


class _Upstream:
    """A model API on 127.0.0.1 that records what reaches it and answers a completion."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                upstream.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                body = json.dumps({"id": "c1", "object": "chat.completion", "model": "m",
                                   "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                       "role": "assistant", "content": "hi"}}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture(scope="module")
def upstream() -> Iterator[_Upstream]:
    upstream = _Upstream()
    yield upstream
    upstream.httpd.shutdown()
    upstream.httpd.server_close()


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory, upstream: _Upstream
            ) -> Iterator[RunningServer]:
    """One sidecar for the module: its control API, and its model endpoint before
    ``upstream``."""
    config = sidecar_config(tmp_path_factory.mktemp("state"), model_address="127.0.0.1:0",
                            model_upstream=upstream.base + "/v1")
    with running_server(config) as server:
        yield server


@pytest.mark.parametrize(("raw", "fragment"), BAD_UTF8)
def test_model_endpoint_answers_400_with_the_reason(sidecar: RunningServer, upstream: _Upstream,
                                                    raw: bytes, fragment: str) -> None:
    body = raw.replace(b'"messages": 3', b'"model": "m", "messages": []')
    if raw.startswith(b"{\x00"):
        body = '{"model": "m", "messages": []}'.encode("utf-16-le")
    relayed = len(upstream.bodies)
    status, answer = http_request("POST", sidecar.url("model") + "/v1/chat/completions", body,
                                  {"Content-Type": "application/json",
                                   "x-watchdog-run": "r-1"})
    assert status == 400, (status, answer)
    assert len(upstream.bodies) == relayed  # refused, not relayed half-read
    message = json.loads(answer)["error"]["message"]
    assert message.startswith("the request body cannot be read: ")
    if fragment != "not valid JSON":
        assert fragment.split(" at byte")[0] in message
    # a readable request of the same run goes on
    status, answer = http_request("POST", sidecar.url("model") + "/v1/chat/completions",
                                  b'{"model": "m", "messages": [{"role": "user", '
                                  b'"content": "caf\xc3\xa9"}]}',
                                  {"Content-Type": "application/json", "x-watchdog-run": "r-1"})
    assert status == 200, answer
    assert json.loads(upstream.bodies[-1])["messages"][0]["content"] == "café"
