"""Both relays, end to end, trim alike: a scripted upstream answers every request with the same
bytes (a stream of three tool calls with odd events and odd JSON amid it, or a whole response),
a run with a budget of one tool call asks through a sidecar on each relay, and the agent gets
the same bytes from both: the ones the wire modules make of them (the Python relay's trim), with
one tool call handed over; each sidecar books the call with that one call handed."""

from __future__ import annotations

import gzip
import http.client
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.frameworks.fakellm import Step
from tests.harness import http_request, http_served, running_server, sidecar_config, wait_until
from tests.test_model_trim_native import ANSWERS, python_stream, python_whole, whole, with_odd
from tests.test_model_wire import THREE, chat_stream
from watchdog.shell.model._relay import Relay

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
        if body["model"] == "gzip":  # (though asked for identity)
            data = gzip.compress(data)
            self.send_header("Content-Encoding", "gzip")
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


@pytest.mark.parametrize("coding", ["identity", "gzip"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_both_relays_hand_the_agent_the_same_trimmed_bytes(tmp_path: Path, upstream: str,
                                                           stream: bool, coding: str) -> None:
    """(An upstream that compresses though asked not to: the same bytes, plain. The request
    offers no final-answer tool: the odd events' ``final_result`` call, one the model made up,
    is work, trimmed.)"""
    request = json.dumps({"model": coding, "stream": stream, "messages": [
        {"role": "user", "content": "find it"}], "tools": [{"type": "function", "function": {
            "name": "a", "parameters": {"type": "object"}}}]}).encode()
    expected = python_stream("chat", 1, [STREAM], offered=())[0] if stream else python_whole(
        "chat", 1, WHOLE, offered=())[0]
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


ODD = {"nan": b"NaN", "long_int": b"1" * 4301, "deep": b"[" * 200 + b"]" * 200,
       "deeper": b"[" * 5000 + b"]" * 5000}


def odd_data(odd: bytes, stream: bool) -> bytes:
    """The stream of three calls with ``odd`` in every event that carries a call, or the whole
    response with ``odd`` in it."""
    if not stream:
        return WHOLE[:-1] + b', "x": ' + odd + b"}"
    return b"\n\n".join(event[:-1] + b', "x": ' + odd + b"}" if b'"tool_calls"' in event
                        else event for event in chat_stream(THREE).split(b"\n\n"))


class OddUpstream(Upstream):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        odd = ODD[body["messages"][-1]["content"]]
        data = odd_data(odd, bool(body.get("stream")))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if body.get("stream")
                         else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def handed_calls(body: bytes, stream: bool) -> set[int]:
    """The tool calls the agent was handed (their indexes)."""
    def loads(data: bytes) -> Any:  # (an integer of any length, as a client may read it)
        return json.loads(data, parse_int=lambda text: int(text) if len(text) < 20 else None)
    if not stream:
        return set(range(len(loads(body)["choices"][0]["message"].get("tool_calls") or [])))
    return {call["index"] for event in body.split(b"\n\n") if event.startswith(b"data: {")
            for choice in loads(event[6:])["choices"]
            for call in choice["delta"].get("tool_calls") or []}


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
def test_json_a_relay_cannot_judge_never_hands_a_call_past_the_bound(tmp_path: Path,
                                                                     stream: bool) -> None:
    """A response whose calls come with JSON a relay's parser cannot judge (``NaN`` and nesting
    past 128 levels for the compiled relay; an integer of more than 4,300 digits and nesting
    past Python's depth for the Python relay), to a run with a bound of one call: where the
    relay judges it, the agent gets one call; where it cannot, a stream is broken off there
    (the client reads it cut short) and a whole response is answered 502, so no call passes
    unjudged."""
    judges = {"python": lambda data: (python_stream("chat", 1, [data]) if stream
                                      else python_whole("chat", 1, data)) is not None,
              "native": lambda data: Relay.trimmed("chat", 1, [data], stream, *ANSWERS)
              is not None}
    with http_served(OddUpstream) as url:
        for relay in ("python", "native"):
            config = sidecar_config(tmp_path / relay, model_address="127.0.0.1:0",
                                    model_upstream=url + "/v1", model_relay=relay)
            with running_server(config) as sidecar:
                for case, odd in ODD.items():
                    request = json.dumps({"model": "m", "stream": stream, "messages": [
                        {"role": "user", "content": case}]}).encode()
                    broken = False
                    try:
                        status, body = http_request(
                            "POST", sidecar.url("model") + "/v1/chat/completions", request, {
                                "Authorization": f"Bearer {KEY}",
                                "Content-Type": "application/json",
                                "x-watchdog-budget-tool-calls": "1"})
                    except http.client.IncompleteRead as exc:  # cut after some events
                        status, body, broken = 200, exc.partial, True
                    except http.client.RemoteDisconnected:  # cut before its head went out
                        status, body, broken = 0, b"", True
                    judged = judges[relay](odd_data(odd, stream))
                    said = (relay, case, status, broken, body[:200])
                    if judged:
                        assert status == 200 and not broken, said
                        assert handed_calls(body, stream) == {0}, said
                    elif stream:  # broken off, not ended: the client sees it cut short
                        assert broken and b"[DONE]" not in body, said
                        assert handed_calls(body, stream) == set(), said
                    else:
                        assert status == 502 and b"response_unjudged" in body, said
    assert {case for case, odd in ODD.items() if not judges["python"](odd_data(odd, stream))
            } == {"long_int", "deeper"}
    assert {case for case, odd in ODD.items() if not judges["native"](odd_data(odd, stream))
            } == {"nan", "deep", "deeper"}


class LongUpstream(Upstream):
    """A whole response of three calls padded past 64 KiB, with its length said or not."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        data = LONG
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.path.endswith("/chat/completions"):
            self.send_header("Content-Length", str(len(data)))
        else:  # (the Responses path, answered with the same chat body, unsaid length)
            self.send_header("Transfer-Encoding", "chunked")
            data = b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)
        self.end_headers()
        self.wfile.write(data)


LONG = WHOLE[:-1] + b', "pad": "' + b"x" * 100_000 + b'"}'


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"],
                         ids=["length", "chunked"])
def test_a_whole_response_too_long_to_read_is_not_passed_with_a_bound(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """A whole response longer than the relays read (``MAX_RESPONSE_BYTES``, made 64 KiB
    here), its length said or not: without a bound it passes as it came; with a bound on tool
    calls it cannot be judged, so both relays answer 502 rather than pass its calls."""
    from watchdog.shell.model import native, streams
    for module in (native, streams):
        monkeypatch.setattr(module, "MAX_RESPONSE_BYTES", 64 * 1024)
    request = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x"}],
                          "input": "x"}).encode()
    with http_served(LongUpstream) as url:
        for relay in ("python", "native"):
            config = sidecar_config(tmp_path / relay, model_address="127.0.0.1:0",
                                    model_upstream=url + "/v1", model_relay=relay)
            with running_server(config) as sidecar:
                for bound, expected in (({}, 200), ({"x-watchdog-budget-tool-calls": "1"},
                                                    502)):
                    status, body = http_request("POST", sidecar.url("model") + path, request, {
                        "Authorization": f"Bearer {KEY}", "Content-Type": "application/json",
                        **bound})
                    said = (relay, bound, status, body[:200])
                    assert status == expected, said
                    assert body == LONG if status == 200 else b"response_unjudged" in body, said


REFUSAL = json.dumps({"error": {"message": "Unrecognized request argument supplied: "
                                "stream_options", "type": "invalid_request_error",
                                "param": None, "code": None}}).encode()
OTHER_400 = json.dumps({"error": {"message": "context too long", "type":
                                  "invalid_request_error", "code": "context_length"}}).encode()


class StrictUpstream(Upstream):
    """An OpenAI-compatible server that takes no field it does not know: a request naming
    ``stream_options`` is refused (400 naming it), sent as the user's text says (``length``,
    ``chunked``, ``close``: no length, the connection closed after it; ``gzip``: compressed
    though identity was asked); one whose text starts with "too long" gets another 400 (gzip
    for "too long gzip"); else a streamed answer with no usage (it reports none)."""

    seen: ClassVar[list[bytes]] = []

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        StrictUpstream.seen.append(raw)
        body = json.loads(raw)
        text = body["messages"][-1]["content"]
        if "stream_options" in body or text.startswith("too long"):
            data = OTHER_400 if text.startswith("too long") else REFUSAL
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            if text.endswith("gzip"):
                data = gzip.compress(data)
                self.send_header("Content-Encoding", "gzip")
            if text.endswith("chunked"):
                self.send_header("Transfer-Encoding", "chunked")
                data = b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)
            elif text.endswith("close"):
                self.send_header("Connection", "close")
                self.close_connection = True
            else:
                self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        data = b"".join(event + b"\n\n" for event in chat_stream(Step(text="All done.")).split(
            b"\n\n") if event and b'"choices": []' not in event)  # no usage: none asked
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def streamed(text: str) -> bytes:
    return json.dumps({"model": "m", "stream": True, "messages": [
        {"role": "user", "content": text}]}).encode()


def ask(sidecar: Any, text: str) -> tuple[int, dict[str, str], bytes]:
    """A streamed chat request of ``text``, as a client sends it: status, headers, body."""
    request = streamed(text)
    host, port = sidecar.server.addresses["model"]
    connection = http.client.HTTPConnection(host, port, timeout=10)
    try:
        connection.request("POST", "/v1/chat/completions", request, {
            "Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, \
            response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("refusal", ["length", "chunked", "close", "gzip"])
def test_an_upstream_that_refuses_stream_options_gets_the_request_as_the_client_sent_it(
        tmp_path: Path, refusal: str) -> None:
    """A run with a dollar budget asks a stream for its usage; an upstream that takes no
    unknown field refuses that (400 naming ``stream_options``, with its length said or not,
    compressed or not): both relays send the request again as its client sent it, and the
    agent gets its answer (the call unpriced); later requests are not asked. Another 400
    (compressed too) is passed on as it came, once."""
    pack = tmp_path / "dollars.yaml"
    pack.write_text("apiVersion: agent-watchdog/v1\nkind: RulePack\nname: dollars\nbudgets:\n"
                    "  - agents: ['*']\n    max_cost_usd: 5\n")
    with http_served(StrictUpstream) as url:
        for relay in ("python", "native"):
            config = sidecar_config(tmp_path / relay, model_address="127.0.0.1:0",
                                    model_upstream=url + "/v1", model_relay=relay,
                                    rules=(str(pack),))
            with running_server(config) as sidecar:
                for coding in ("", "gzip"):  # another 400: as it came (asked, refused not)
                    StrictUpstream.seen.clear()
                    status, headers, body = ask(sidecar, f"too long {coding}".strip())
                    said = (relay, coding, status, headers, body[:200])
                    assert (status, len(StrictUpstream.seen)) == (400, 1), said
                    assert headers.get("content-encoding", "") == coding, said
                    assert (gzip.decompress(body) if coding else body) == OTHER_400, said
                StrictUpstream.seen.clear()
                status, _, body = ask(sidecar, f"find it {refusal}")
                said = (relay, status, body[:300])
                assert status == 200 and b"done." in body and b"[DONE]" in body, said
                sent = [json.loads(raw) for raw in StrictUpstream.seen]
                assert [body.get("stream_options") for body in sent] == [
                    {"include_usage": True}, None], said
                # as its client sent it
                assert StrictUpstream.seen[1] == streamed(f"find it {refusal}"), said
                StrictUpstream.seen.clear()  # refused once: not asked again
                assert ask(sidecar, "find it again")[0] == 200
                assert len(StrictUpstream.seen) == 1, (relay, StrictUpstream.seen)
                assert b"stream_options" not in StrictUpstream.seen[0]
