"""Both relays, end to end, trim alike: a scripted upstream answers every request with the same
bytes (a stream of three tool calls with odd events and odd JSON amid it, or a whole response),
a run with a budget of one tool call asks through a sidecar on each relay, and the agent gets
the same bytes from both: the ones the wire modules make of them (the Python relay's trim), with
one tool call handed over; each sidecar books the call with that one call handed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.harness import http_request, http_served, running_server, sidecar_config, wait_until
from tests.test_model_trim_native import python_stream, python_whole, whole, with_odd
from tests.test_model_wire import THREE, chat_stream

KEY = "sk-trim-0123456789"
STREAM = with_odd("chat", chat_stream(THREE))
WHOLE = whole("chat", THREE)


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = STREAM if body.get("stream") else WHOLE
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if body.get("stream")
                         else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        for at in range(0, len(data), 97):  # in pieces, as a network hands them
            self.wfile.write(data[at:at + 97])
            self.wfile.flush()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with http_served(Upstream) as url:
        yield url + "/v1"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_both_relays_hand_the_agent_the_same_trimmed_bytes(tmp_path: Path, upstream: str,
                                                           stream: bool) -> None:
    request = json.dumps({"model": "m", "stream": stream, "messages": [
        {"role": "user", "content": "find it"}], "tools": [{"type": "function", "function": {
            "name": "a", "parameters": {"type": "object"}}}]}).encode()
    expected = python_stream("chat", 1, [STREAM])[0] if stream else python_whole(
        "chat", 1, WHOLE)[0]
    got = {}
    for relay in ("python", "native"):
        config = sidecar_config(tmp_path / relay, model_address="127.0.0.1:0",
                                model_upstream=upstream, model_relay=relay)
        with running_server(config) as sidecar:
            status, body = http_request(
                "POST", sidecar.url("model") + "/v1/chat/completions", request, {
                    "Authorization": f"Bearer {KEY}", "Content-Type": "application/json",
                    "x-watchdog-agent": "trimmed", "x-watchdog-budget-tool-calls": "1"})
            assert status == 200, body
            got[relay] = body

            def handed() -> object:
                _, runs = http_request("GET", sidecar.api + "/v1/runs?agent=trimmed")
                listed = json.loads(runs)
                items = listed.get("runs", listed) if isinstance(listed, dict) else listed
                return [run.get("iterations") for run in items]
            wait_until(lambda: handed() == [1], f"{relay}: the call booked", timeout=10)
    assert got["python"] == got["native"] == expected
    assert expected != (STREAM if stream else WHOLE)  # trimmed: two of the three calls gone
    if not stream:  # (in the stream an odd event's call comes first and is the one kept)
        assert [call["function"]["name"] for call in json.loads(expected)["choices"][0][
            "message"]["tool_calls"]] == ["a"]
