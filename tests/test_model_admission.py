"""The compiled relay sends a new conversation's first request upstream before the event loop
has read it (``watchdog/shell/model/native.py``, ``native/relay/src/admit.rs``), once the loop
has said what a new run of its agent gets; and it sends nothing else that way.

Each served test holds the sidecar's event loop busy (a callback that waits on it) and looks
at what the upstream has received meanwhile: what went on without the loop, and what waited
for it. The upstream is a raw loopback server that records every request."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import http.client
import json
import logging
import os
import random
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from tests.harness import (
    ROOT,
    RunningServer,
    http_request,
    running_server,
    sidecar_config,
    wait_until,
)
from tests.spans import T0, SpanMaker, chat_attrs, records_of, tool_attrs
from tests.test_model_proxy import RawUpstream, Seen, send
from watchdog.core.bounds import load_json
from watchdog.core.model.book import _digest as conversation_digest
from watchdog.core.model.chat import ChatWire
from watchdog.core.model.messages import MessagesWire
from watchdog.core.model.responses import ResponsesWire
from watchdog.core.model.steer import SDK_MARKS
from watchdog.shell.model._relay import Relay
from watchdog.shell.model.headers import SESSION_HEADERS, SUBAGENT_HEADERS

KEY = "sk-admit-SECRET-0123456789"
AGENT = "admitted"
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
WIRES = {"chat": ChatWire(), "responses": ResponsesWire(), "messages": MessagesWire()}
REPLIES = {
    "/v1/chat/completions": {"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                             "model": "m", "choices": [{"index": 0, "message": {
                                 "role": "assistant", "content": "done"},
                                 "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
    "/v1/responses": {"id": "resp_1", "object": "response", "status": "completed", "model": "m",
                      "output": [{"type": "message", "id": "msg_1", "role": "assistant",
                                  "content": [{"type": "output_text", "text": "done"}]}],
                      "usage": {"input_tokens": 3, "output_tokens": 1}},
    "/v1/messages": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                     "content": [{"type": "text", "text": "done"}], "stop_reason": "end_turn",
                     "usage": {"input_tokens": 3, "output_tokens": 1}},
}
BUDGET_PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: admission-budgets
budgets:
  - agents: ["{agent}"]
    max_tool_calls: {calls}
"""


def tool_calls(count: int, made_up: str | None = None) -> bytes:
    """``count`` calls of ``search``, then one of ``made_up`` (a tool the request does not
    offer), if named."""
    calls = [{"id": f"call_{n}", "type": "function", "function": {
        "name": "search", "arguments": json.dumps({"q": n})}} for n in range(count)]
    if made_up is not None:
        calls.append({"id": "call_made_up", "type": "function", "function": {
            "name": made_up, "arguments": json.dumps({"answer": "made up"})}})
    return json.dumps({"id": "chatcmpl-t", "object": "chat.completion", "created": 1,
                       "model": "m", "choices": [{"index": 0, "message": {
                           "role": "assistant", "content": None, "tool_calls": calls},
                           "finish_reason": "tool_calls"}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 9}}).encode()


def reply(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
    path = seen.path.split("?", 1)[0]
    try:
        metadata = json.loads(seen.body).get("metadata", {})
        wanted, made_up = metadata.get("calls"), metadata.get("made_up")
    except (ValueError, AttributeError):
        wanted = made_up = None
    if wanted is not None:
        send(handler, 200, tool_calls(int(wanted), made_up))
    else:
        send(handler, 200, json.dumps(REPLIES.get(path, {"object": "list", "data": []})).encode())


SEARCH = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}}}}]


def chat(text: str, system: str = "You are terse.", **extra: Any) -> bytes:
    """An agent's first request: its system prompt, the user's task and its tools."""
    return json.dumps({"model": "m", "messages": [{"role": "system", "content": system},
                                                  {"role": "user", "content": text}],
                       "tools": SEARCH, **extra}).encode()


@pytest.fixture
def upstream() -> Iterator[RawUpstream]:
    raw = RawUpstream(reply)
    yield raw
    raw.close()


def sidecar(tmp_path: Path, upstream: RawUpstream, pack: str | None = None,
            state: str = "state") -> Any:
    rules: tuple[str, ...] = ()
    if pack is not None:
        path = tmp_path / "pack.yaml"
        path.write_text(pack)
        rules = (str(path),)
    return running_server(sidecar_config(
        tmp_path / state, model_address="127.0.0.1:0", model_relay="native",
        model_upstream=upstream.base + "/v1", model_upstream_anthropic=upstream.base,
        model_agent_name=AGENT, rules=rules))


def post(server: RunningServer, path: str, body: bytes,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One request on a connection of its own, with exactly these headers."""
    host, port = server.server.addresses["model"]
    connection = http.client.HTTPConnection(host, port, timeout=20)
    try:
        connection.request("POST", path, body, {
            "Content-Type": "application/json", "Authorization": f"Bearer {KEY}",
            **(headers or {})})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


class Held:
    """The sidecar's event loop, held by a callback until the ``with`` block ends."""

    def __init__(self, server: RunningServer) -> None:
        native = server.server.native
        assert native is not None
        self.relay = native.relay
        self.release, self.free = threading.Event(), threading.Event()
        self.queued = 0

    def waiting(self, count: int) -> None:
        """Until ``count`` more requests are queued for the loop's decision: the relay has
        read them and kept them for it (it sends on what it does not keep)."""
        wanted = self.queued + count
        wait_until(lambda: self.relay.queued_requests >= wanted,
                   lambda: f"{self.relay.queued_requests} of {wanted} requests queued")
        assert self.relay.queued_requests == wanted
        self.queued = wanted


@contextmanager
def busy(server: RunningServer) -> Iterator[Held]:
    held = Held(server)
    holding = threading.Event()

    def hold() -> None:
        holding.set()
        held.release.wait(30)
        held.free.set()

    server.loop.call_soon_threadsafe(hold)
    assert holding.wait(5)
    held.queued = held.relay.queued_requests
    try:
        yield held
    finally:
        held.release.set()
    assert held.free.wait(10)


def in_background(call: Callable[[], tuple[int, bytes]]) -> Callable[[], tuple[int, bytes]]:
    """``call`` on a thread of its own; the returned function waits for its answer."""
    result: list[tuple[int, bytes]] = []
    thread = threading.Thread(target=lambda: result.append(call()), daemon=True)
    thread.start()

    def answer() -> tuple[int, bytes]:
        thread.join(30)
        assert result, "no answer"
        return result[0]
    return answer


def seen_with(upstream: RawUpstream, marker: str) -> list[Seen]:
    return [seen for seen in upstream.seen if marker.encode() in seen.body]


def runs(server: RunningServer) -> list[dict[str, Any]]:
    status, body = http_request("GET", server.api + "/v1/runs?limit=100")
    assert status == 200
    return list(json.loads(body)["runs"])


# -- served ---------------------------------------------------------------------------------------

def test_a_new_conversations_first_request_goes_on_while_the_loop_is_busy(
        tmp_path: Path, upstream: RawUpstream) -> None:
    with sidecar(tmp_path, upstream) as server:
        assert post(server, PATHS["chat"], chat("task one"))[0] == 200  # decided by the loop
        with busy(server) as held:
            status, body = post(server, PATHS["chat"], chat("task two"))
            assert not held.free.is_set(), "the request waited for the loop"
        assert status == 200 and json.loads(body) == REPLIES[PATHS["chat"]]
        assert len(seen_with(upstream, "task two")) == 1
        # read and booked once the loop is free: a run of its own with its model call
        wait_until(lambda: len(runs(server)) == 2, "two runs")
        native = server.server.native
        assert native is not None and native.admitted == 1 and native.missed == 0
        wait_until(lambda: all(run["iterations"] == 1 for run in runs(server)),
                   lambda: f"each run's model call booked: {runs(server)}")


@pytest.mark.parametrize("token", [None, "t0ken-in-the-path-1234"])
def test_an_agent_named_in_the_path_goes_on_while_the_loop_is_busy(
        tmp_path: Path, upstream: RawUpstream, token: str | None) -> None:
    """An agent that can set only its base URL (the chart's gateway, with its token) names
    itself in the path: the relay reads it as the loop does, so its new conversations go on at
    once, to the API path, and their runs are named."""
    config = sidecar_config(
        tmp_path / "state", model_address="0.0.0.0:0" if token else "127.0.0.1:0",
        model_relay="native", model_upstream=upstream.base + "/v1", api_token=token,
        model_agent_name=AGENT)
    path = ("/token/" + token if token else "") + "/agent/billing-bot/v1/chat/completions"
    with running_server(config) as server:
        assert post(server, path, chat("task one"))[0] == 200  # decided by the loop
        with busy(server) as held:
            status, _ = post(server, path, chat("task two"))
            assert not held.free.is_set(), "the request waited for the loop"
        assert status == 200
        api = {"Authorization": f"Bearer {token}"} if token else None

        def named() -> list[str]:
            status, body = http_request("GET", server.api + "/v1/runs", headers=api)
            return [run["agent"] for run in json.loads(body)["runs"]] if status == 200 else []
        wait_until(lambda: named() == ["billing-bot"] * 2, lambda: f"two runs: {named()}")
        native = server.server.native
        assert native is not None and native.admitted == 1 and native.missed == 0
    assert [seen.path for seen in upstream.seen] == ["/v1/chat/completions"] * 2
    assert all("x-watchdog-agent" not in seen.headers for seen in upstream.seen)


def test_the_relay_reads_the_paths_agent_as_the_loop_or_leaves_it_to_the_loop() -> None:
    body, chat_path = chat("hello"), PATHS["chat"]
    by_header = Relay.first_digest("POST", chat_path, [("x-watchdog-agent", "bot-1")], body)
    assert by_header is not None
    for target in ("/agent/bot-1/v1/chat/completions", "/agent/bot%2D1/v1/chat/completions",
                   "/token/t/agent/bot-1/v1/chat/completions"):
        assert Relay.first_digest("POST", target, [], body) == by_header, target
    # the header's name wins; an empty one names none (the default)
    assert Relay.first_digest("POST", "/agent/other/v1/chat/completions",
                              [("x-watchdog-agent", "bot-1")], body) == by_header
    assert Relay.first_digest("POST", "/agent//v1/chat/completions", [], body) == \
        Relay.first_digest("POST", chat_path, [], body)
    # the token in the path is the endpoint's token
    token = ("x-watchdog-token", "secret")
    assert Relay.first_digest("POST", "/token/secret/agent/bot-1/v1/chat/completions", [], body,
                              token=token) is not None
    assert Relay.first_digest("POST", "/token/wrong/agent/bot-1/v1/chat/completions", [], body,
                              token=token) is None
    # anything it cannot be sure to read as the loop does is the loop's (which may refuse it)
    for target in ("/agent/../v1/chat/completions", "/agent/a%2fb/v1/chat/completions",
                   "/agent/%C3%A9/v1/chat/completions", "/agent/%00/v1/chat/completions",
                   "/agent/" + "a" * 201 + "/v1/chat/completions", "/agent/a b/v1/chat/completions",
                   "/agent/x/agent/y/v1/chat/completions", "/agent/x/token/t/v1/chat/completions",
                   "/token/t%41/v1/chat/completions", "/agent/%4/v1/chat/completions",
                   "/agent/x"):
        assert Relay.first_digest("POST", target, [], body) is None, target
    # so is a header's name the loop may refuse: empty, too long, not printable ASCII
    for named in ("", "a" * 201, "caf\u00e9", "a\tb"):
        assert Relay.first_digest("POST", chat_path, [("x-watchdog-agent", named)],
                                  body) is None, named


def test_what_goes_upstream_is_what_the_loop_would_have_sent(
        tmp_path: Path, upstream: RawUpstream) -> None:
    headers = {"Connection": "keep-alive, X-Hop", "X-Hop": "dropped", "Accept-Encoding": "gzip",
               "X-Custom": "kept", "OpenAI-Organization": "org-1", "X-Watchdog-Agent": AGENT}
    with sidecar(tmp_path, upstream) as server:
        assert post(server, PATHS["chat"], chat("task AAA"), headers)[0] == 200
        with busy(server) as held:
            assert post(server, PATHS["chat"], chat("task BBB"), headers)[0] == 200
            assert not held.free.is_set()
    (decided,), (admitted,) = seen_with(upstream, "task AAA"), seen_with(upstream, "task BBB")
    assert admitted.body == decided.body.replace(b"task AAA", b"task BBB")
    assert admitted.headers == decided.headers
    assert admitted.headers["accept-encoding"] == "identity"
    assert "x-hop" not in admitted.headers and "x-watchdog-agent" not in admitted.headers
    assert admitted.path == decided.path == "/v1/chat/completions"


def test_only_plain_first_requests_of_new_conversations_go_on_without_the_loop(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """Each of these waits for the loop: a conversation seen before, one going on, a run, a
    trace or a budget named, a body to inflate, instructions of the client SDK, content in
    parts, an agent whose new runs the loop has not judged, a continued response, other
    paths, a session or a sub-agent its client names. Plain first requests of all three APIs
    in the same window go on."""
    waiting: dict[str, tuple[str, bytes, dict[str, str]]] = {
        "seen-before": (PATHS["chat"], chat("task one"), {}),
        "going-on": (PATHS["chat"], json.dumps({"model": "m", "messages": [
            {"role": "user", "content": "going-on"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "c1", "type": "function",
                "function": {"name": "f", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]}).encode(), {}),
        "traced": (PATHS["chat"], chat("traced"), {
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}),
        "named-run": (PATHS["chat"], chat("named-run"), {"X-Watchdog-Run": "run-42"}),
        "budget-header": (PATHS["chat"], chat("budget-header"),
                          {"X-Watchdog-Budget-Tool-Calls": "10"}),
        "gzipped": (PATHS["chat"], gzip.compress(chat("gzipped")), {"Content-Encoding": "gzip"}),
        "sdk-steered": (PATHS["chat"], chat("sdk-steered", system="Be brief.\n\n[budget: 2 of "
                                            "5 tool calls left — wrap up soon]"), {}),
        "in-parts": (PATHS["chat"], json.dumps({"model": "m", "messages": [
            {"role": "user", "content": [{"type": "text", "text": "in-parts"}]}]}).encode(), {}),
        "other-agent": (PATHS["chat"], chat("other-agent"), {"X-Watchdog-Agent": "unjudged"}),
        "continued": (PATHS["responses"], json.dumps({
            "model": "m", "input": "continued", "previous_response_id": "resp_0"}).encode(), {}),
        "query": (PATHS["chat"] + "?x=1", chat("query"), {}),
        # a session the client names (each header Python reads: the relay's table has it)
        **{f"session-{name}": (PATHS["chat"], chat(f"session-{name}"), {name: "a-session"})
           for name in SESSION_HEADERS},
        # a sub-agent the client names (its run a child of its caller's: Python's to say)
        **{f"subagent-{name}": (PATHS["chat"], chat(f"subagent-{name}"), {name: "an-agent"})
           for name in SUBAGENT_HEADERS},
        "embeddings": ("/v1/embeddings", json.dumps({"model": "m", "input": "embeddings"}
                                                     ).encode(), {}),
    }
    plain = {
        "plain-chat": (PATHS["chat"], chat("plain-chat")),
        "plain-responses": (PATHS["responses"], json.dumps({
            "model": "m", "instructions": "Be brief.", "input": "plain-responses"}).encode()),
        "plain-messages": (PATHS["messages"], json.dumps({
            "model": "m", "max_tokens": 10, "system": "Be brief.",
            "messages": [{"role": "user", "content": "plain-messages"}]}).encode()),
    }
    with sidecar(tmp_path, upstream) as server:
        assert post(server, PATHS["chat"], chat("task one"))[0] == 200
        with busy(server) as held:
            answers = {name: in_background(lambda p=path, b=body, h=headers: post(server, p, b, h))
                       for name, (path, body, headers) in waiting.items()}
            for name, (path, body) in plain.items():
                assert post(server, path, body, {"anthropic-version": "2023-06-01"})[0] == 200, \
                    name
            held.waiting(len(waiting))
            assert not held.free.is_set()
            went = [name for name in waiting if name != "seen-before" and seen_with(
                upstream, name)] + (["seen-before"] if len(seen_with(upstream, "task one")) > 1
                                    else [])
            assert went == [], f"went on without the loop: {went}"
        for name, answer in answers.items():
            assert answer()[0] == 200, name
    assert all(seen_with(upstream, name) for name in plain)


def test_a_rule_pack_budget_bounds_what_goes_on_and_a_new_runs_countdown_goes_with_it(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """A budget of 5: a new run gets a bound of 5, and the relay trims the answer to it by
    itself. A budget of 3: a new run's first request carries the countdown; once the loop has
    decided one, the next new conversation's first request that offers tools goes on without
    the loop, the note written into it byte for byte as the loop writes it (the same request
    but for its task), and one that offers none waits for the loop (its countdown is the
    loop's to say)."""
    pack = BUDGET_PACK.format(agent=AGENT, calls=5) + """\
  - agents: ["tight"]
    max_tool_calls: 3
"""
    with sidecar(tmp_path, upstream, pack) as server:
        assert post(server, PATHS["chat"], chat("budget one"))[0] == 200
        with busy(server) as held:
            status, body = post(server, PATHS["chat"], chat("budget two",
                                                            metadata={"calls": "7"}))
            assert not held.free.is_set()
        assert status == 200
        handed = json.loads(body)["choices"][0]["message"]["tool_calls"]
        assert [call["id"] for call in handed] == [f"call_{n}" for n in range(5)]
        tight = {"X-Watchdog-Agent": "tight"}
        assert post(server, PATHS["chat"], chat("tight one"), tight)[0] == 200
        untooled = json.dumps({"model": "m", "messages": [
            {"role": "system", "content": "Title this."},
            {"role": "user", "content": "tight untooled"}]}).encode()
        with busy(server) as held:
            assert post(server, PATHS["chat"], chat("tight two"), tight)[0] == 200
            status, body = post(server, PATHS["chat"], chat("tight three",
                                                            metadata={"calls": "7"}), tight)
            answer = in_background(lambda: post(server, PATHS["chat"], untooled, tight))
            held.waiting(1)
            assert not held.free.is_set()
            assert not seen_with(upstream, "tight untooled")  # it waits for the loop
        assert answer()[0] == 200
        assert status == 200
        handed = json.loads(body)["choices"][0]["message"]["tool_calls"]
        assert [call["id"] for call in handed] == [f"call_{n}" for n in range(3)]
        (decided,), (admitted,) = seen_with(upstream, "tight one"), seen_with(upstream,
                                                                               "tight two")
        assert admitted.body == decided.body.replace(b"tight one", b"tight two")
        system = json.loads(admitted.body)["messages"][0]["content"]
        assert "[budget: 3 of 3 tool calls left" in system
        (untooled_seen,) = seen_with(upstream, "tight untooled")
        assert untooled_seen.body == untooled
        native = server.server.native
        assert native is not None
        wait_until(lambda: native.admitted == 3, lambda: f"{native.admitted} admitted")
        assert native.missed == 0 and native.noted == 2  # (the loop read each as it went)


@pytest.mark.parametrize("offers", [False, True])
def test_the_relays_trim_of_a_request_sent_on_ahead_reads_the_final_answer_tools_it_offers(
        tmp_path: Path, upstream: RawUpstream, offers: bool) -> None:
    """A budget of 5: a new run's first request goes on without the loop with its bound,
    trimmed by the relay; the model answers 7 searches and a call of ``final_result``. Where
    the request offers that tool, the call is the agent's answer: it passes beside the 5
    calls left. Where it does not (a tool the model made up, which the agent refuses as
    unknown), the call is work past the budget: trimmed, as the Python relay trims it, and
    the run books the 5 calls its agent got, their results counted."""
    pack = BUDGET_PACK.format(agent=AGENT, calls=5)
    answer = {"type": "function", "function": {"name": "final_result", "parameters": {
        "type": "object", "properties": {"answer": {"type": "string"}}}}}
    tools = [*SEARCH, answer] if offers else SEARCH
    with sidecar(tmp_path, upstream, pack) as server:
        assert post(server, PATHS["chat"], chat("made-up one"))[0] == 200  # (the loop's)
        with busy(server) as held:
            status, body = post(server, PATHS["chat"], chat(
                "made-up two", metadata={"calls": "7", "made_up": "final_result"},
                tools=tools))
            assert not held.free.is_set(), "the request waited for the loop"
        assert status == 200
        message = json.loads(body)["choices"][0]["message"]
        handed = message["tool_calls"]
        assert [call["id"] for call in handed] == [*(f"call_{n}" for n in range(5)), *(
            ["call_made_up"] if offers else [])]
        native = server.server.native
        assert native is not None
        if offers:  # (the loop reads what the relay sent on once it is free)
            wait_until(lambda: native.admitted + native.missed, "the request read")
            assert (native.admitted, native.missed) == (1, 0)
            return

        def booked() -> dict[str, Any] | None:
            going = [run for run in runs(server) if run["state"] != "ended"]
            if len(going) != 1:
                return None
            status, body = http_request("GET", f"{server.api}/v1/runs/{going[0]['id']}")
            signals: dict[str, Any] = json.loads(body)["signals"] if status == 200 else {}
            return signals if signals.get("finish_reason") == "tool_calls" else None
        signals = wait_until(booked, lambda: f"the call booked: {runs(server)}")
        assert (native.admitted, native.missed) == (1, 0)
        assert (signals["iterations"], signals["in_flight"]) == (1, 5), signals
        follow = json.loads(chat("made-up two", tools=tools))
        follow["messages"] += [message, *({"role": "tool", "tool_call_id": call["id"],
                                           "content": "found"} for call in handed)]
        assert post(server, PATHS["chat"], json.dumps(follow).encode())[0] == 200
        run = wait_until(lambda: next((run for run in runs(server)
                                       if run["iterations"] == 2), None), "the run went on")
        assert len(runs(server)) == 2, runs(server)
        assert (run["tool_calls"], run["errors"], run["terminal_state"]) == (
            5, 0, "tool_limit_reached"), run


def test_a_request_that_offers_no_tools_gets_no_countdown_and_teaches_nothing(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """A budget of 3: a first request that offers no tools (a title, a summary) has no tool
    call to count down, so it goes on as it came; what it got is not what a run that offers
    tools gets, so the relay learns nothing from it: the next new conversation's first request,
    which offers tools, waits for the loop and carries the countdown."""
    pack = BUDGET_PACK.format(agent=AGENT, calls=3)
    untooled = json.dumps({"model": "m", "messages": [
        {"role": "system", "content": "Title this."}, {"role": "user", "content": "title-only"}]}
    ).encode()
    with sidecar(tmp_path, upstream, pack) as server:
        assert post(server, PATHS["chat"], untooled)[0] == 200
        (seen,) = seen_with(upstream, "title-only")
        assert seen.body == untooled  # no countdown: nothing to count down
        with busy(server) as held:
            answer = in_background(lambda: post(server, PATHS["chat"], chat("with-tools")))
            held.waiting(1)
            assert not seen_with(upstream, "with-tools")  # it waits for the loop
        assert answer()[0] == 200
        (seen,) = seen_with(upstream, "with-tools")
        assert "[budget: 3 of 3 tool calls left" in json.loads(seen.body)["messages"][0][
            "content"]


def test_an_agent_with_a_dollar_budget_teaches_nothing_its_streams_ask_for_usage(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """A dollar budget prices every call, and a stream reports its usage only when asked,
    which only the loop writes: no first request of that agent goes on without the loop, and a
    streamed one goes upstream asking for its usage."""
    pack = BUDGET_PACK.format(agent=AGENT, calls=5).replace("max_tool_calls", "max_cost_usd")
    with sidecar(tmp_path, upstream, pack) as server:
        assert post(server, PATHS["chat"], chat("dollars one"))[0] == 200  # (whole: not asked)
        assert "stream_options" not in json.loads(seen_with(upstream, "dollars one")[0].body)
        with busy(server) as held:
            answer = in_background(lambda: post(server, PATHS["chat"], chat(
                "dollars two", stream=True)))
            held.waiting(1)
            assert not seen_with(upstream, "dollars two")  # it waits for the loop
        assert answer()[0] == 200
        (seen,) = seen_with(upstream, "dollars two")
        assert json.loads(seen.body)["stream_options"] == {"include_usage": True}


def test_a_session_restored_at_start_is_not_new(tmp_path: Path, upstream: RawUpstream) -> None:
    """A conversation whose session is in the store is not new after a restart (its session's
    earlier runs may decide what a new run gets); another's session named ``model:…`` does
    not trouble the start."""
    maker = SpanMaker()
    maker.span("invoke_agent other", {"gen_ai.operation.name": "invoke_agent",
                                      "gen_ai.agent.name": "other",
                                      "session.id": "model:not a digest"}, start=T0, end=T0 + 1)
    with sidecar(tmp_path, upstream) as server:
        assert post(server, PATHS["chat"], chat("resumed task"))[0] == 200
        service = server.server.service
        assert service is not None
        server.call(lambda: service.model_records(records_of(maker.take())))
        wait_until(lambda: len(runs(server)) == 2)
        assert "model:not a digest" in server.call(lambda: service.sessions.ids("model:"))
    with sidecar(tmp_path, upstream) as server:
        assert post(server, PATHS["chat"], chat("learning task"))[0] == 200
        with busy(server) as held:
            again = in_background(lambda: post(server, PATHS["chat"], chat("resumed task")))
            assert post(server, PATHS["chat"], chat("fresh task"))[0] == 200
            held.waiting(1)
            assert not held.free.is_set()
            assert len(seen_with(upstream, "resumed task")) == 1  # only the first sidecar's
        assert again()[0] == 200
        assert len(seen_with(upstream, "resumed task")) == 2


def test_a_rules_reload_makes_the_relay_ask_again(tmp_path: Path,
                                                 upstream: RawUpstream) -> None:
    with sidecar(tmp_path, upstream, BUDGET_PACK.format(agent=AGENT, calls=50)) as server:
        assert post(server, PATHS["chat"], chat("before reload"))[0] == 200
        (tmp_path / "pack.yaml").write_text(BUDGET_PACK.format(agent=AGENT, calls=2))
        ok, message = asyncio.run_coroutine_threadsafe(server.server.reload_rules(),
                                                       server.loop).result(10)
        assert ok, message
        with busy(server) as held:
            answer = in_background(lambda: post(server, PATHS["chat"], chat("after reload")))
            held.waiting(1)
            assert not seen_with(upstream, "after reload")
        assert answer()[0] == 200
        (seen,) = seen_with(upstream, "after reload")
        assert "[budget: 2 of 2 tool calls left" in json.loads(seen.body)["messages"][0]["content"]


def test_a_tool_failing_across_the_fleet_makes_the_relay_ask_again(
        tmp_path: Path, upstream: RawUpstream) -> None:
    """Three traced runs whose tool fails, told by their spans: an outage begins
    (``fleet.failing_tools``, which rules may read at a run's start), and what new runs get is
    judged again at once, with no model request in between."""
    maker = SpanMaker()
    for n in range(3):
        root = maker.open("invoke_agent demo", {"gen_ai.operation.name": "invoke_agent",
                                                "gen_ai.agent.name": "demo"}, start=T0)
        maker.span("chat m", chat_attrs(finish="tool_calls"), parent=root, start=T0 + n,
                   end=T0 + n + 0.5)
        maker.span("execute_tool search", tool_attrs("search", '{"q": "x"}', None),
                   parent=root, start=T0 + n + 0.6, end=T0 + n + 1,
                   exception=TimeoutError("upstream timed out"))
    with sidecar(tmp_path, upstream) as server:
        assert post(server, PATHS["chat"], chat("before outage"))[0] == 200
        # its call booked first: no event of the relay's is left to make the loop look again
        wait_until(lambda: [run["iterations"] for run in runs(server)] == [1], "the call booked")
        service = server.server.service
        assert service is not None
        server.call(lambda: service.model_records(records_of(maker.take())))
        assert server.call(lambda: "search" in service.core.fleet.failing())
        with busy(server) as held:
            answer = in_background(lambda: post(server, PATHS["chat"], chat("after outage")))
            held.waiting(1)
            assert not seen_with(upstream, "after outage")
        assert answer()[0] == 200


def test_a_request_the_loop_decides_otherwise_is_a_logged_miss_and_the_relay_asks_again(
        tmp_path: Path, upstream: RawUpstream, caplog: pytest.LogCaptureFixture) -> None:
    """What the relay learned made wrong on purpose (a bound of 1 where new runs get none):
    the request it sends on is read, found to differ, logged, and nothing more goes on without
    the loop until it has decided again."""
    caplog.set_level(logging.WARNING, logger="watchdog.model")
    with sidecar(tmp_path, upstream) as server:
        assert post(server, PATHS["chat"], chat("miss one"))[0] == 200
        native = server.server.native
        assert native is not None
        server.call(lambda: native.relay.admit_agent(AGENT, 1))
        assert post(server, PATHS["chat"], chat("miss two"))[0] == 200
        wait_until(lambda: native.missed == 1, "the miss seen")
        assert any("decided otherwise once read" in r.getMessage() for r in caplog.records)
        with busy(server) as held:
            answer = in_background(lambda: post(server, PATHS["chat"], chat("miss three")))
            held.waiting(1)
            assert not seen_with(upstream, "miss three")
        assert answer()[0] == 200
        wait_until(lambda: len(runs(server)) == 3, "each request a run")


# -- the relay reads requests as the loop does ---------------------------------------------

def bodies() -> Iterator[tuple[str, str, bytes]]:
    """(API, case, body): plain first requests, and near misses of every kind."""
    texts = ["hello", "héllo \u2603", "\U0001F600 emoji", "nul \u0000 char", "x" * 3000,
             "[budget: in the user's text]"]
    for text in texts:
        yield "chat", "plain", chat(text)
        yield "chat", "plain-ascii-escaped", json.dumps(json.loads(chat(text))).encode()
        yield "responses", "plain", json.dumps({"model": "m", "input": text}).encode()
        yield "messages", "plain", json.dumps({"model": "m", "messages": [
            {"role": "user", "content": text}]}).encode()
    yield "chat", "two users", json.dumps({"model": "m", "messages": [
        {"role": "user", "content": "first"}, {"role": "user", "content": "second"}]}).encode()
    yield "chat", "developer", json.dumps({"model": "m", "messages": [
        {"role": "developer", "content": "d"}, {"role": "user", "content": "u"}]}).encode()
    yield "chat", "empty first user", json.dumps({"model": "m", "messages": [
        {"role": "user", "content": ""}, {"role": "user", "content": "second"}]}).encode()
    yield "chat", "last is system", json.dumps({"model": "m", "messages": [
        {"role": "user", "content": "u"}, {"role": "system", "content": "s"}]}).encode()
    yield "chat", "assistant", json.dumps({"model": "m", "messages": [
        {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"},
        {"role": "user", "content": "again"}]}).encode()
    yield "chat", "no role", json.dumps({"model": "m", "messages": [{"content": "u"}]}).encode()
    yield "chat", "not a list", json.dumps({"model": "m", "messages": "u"}).encode()
    yield "chat", "no messages", b'{"model": "m"}'
    yield "chat", "not an object", b'["m"]'
    yield "chat", "not json", b'{"model": '
    # an integer Python does not convert: the loop refuses the body, so the relay sends none
    yield "chat", "long integer", chat("u")[:-1] + b', "seed": ' + b"1" * 4301 + b"}"
    yield "chat", "lone surrogate", b'{"messages": [{"role": "user", "content": "\\ud800"}]}'
    yield "chat", "duplicate keys", (b'{"messages": [{"role": "user", "content": "one", '
                                     b'"content": "two"}]}')
    for mark in SDK_MARKS:
        yield "chat", "sdk mark", chat("u", system=f"Be brief. {mark} 3 of 5]")
        yield "responses", "sdk mark", json.dumps({"model": "m", "instructions": mark,
                                                   "input": "u"}).encode()
        yield "messages", "sdk mark", json.dumps({"model": "m", "system": mark, "messages": [
            {"role": "user", "content": "u"}]}).encode()
    yield "chat", "system in parts", json.dumps({"model": "m", "messages": [
        {"role": "system", "content": [{"type": "text", "text": "s"}]},
        {"role": "user", "content": "u"}]}).encode()
    yield "responses", "plain list", json.dumps({"model": "m", "input": [
        {"role": "developer", "content": "d"}, {"role": "user", "content": "u"}]}).encode()
    yield "responses", "plain messages", json.dumps({"model": "m", "input": [
        {"type": "message", "role": "user", "content": "first"},
        {"type": "message", "role": "user", "content": "second"}]}).encode()
    yield "responses", "input parts", json.dumps({"model": "m", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "u"}]}]}).encode()
    yield "responses", "call output", json.dumps({"model": "m", "input": [
        {"role": "user", "content": "u"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "ok"},
        {"role": "user", "content": "again"}]}).encode()
    yield "responses", "last not user", json.dumps({"model": "m", "input": [
        {"role": "user", "content": "u"}, {"role": "system", "content": "s"}]}).encode()
    yield "responses", "sdk mark in input", json.dumps({"model": "m", "input": [
        {"role": "system", "content": SDK_MARKS[1] + "2 of 3]"},
        {"role": "user", "content": "u"}]}).encode()
    yield "responses", "previous", json.dumps({"model": "m", "input": "u",
                                               "previous_response_id": "resp_1"}).encode()
    yield "responses", "conversation", json.dumps({"model": "m", "input": "u",
                                                   "conversation": "conv_1"}).encode()
    yield "responses", "empty input", json.dumps({"model": "m", "input": ""}).encode()
    yield "messages", "two messages", json.dumps({"model": "m", "messages": [
        {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]}).encode()
    yield "messages", "tool result", json.dumps({"model": "m", "messages": [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                      "content": "ok"}]}]}).encode()


def assert_read_as_new_by_the_loop(api: str, body: bytes, agent: str, digest: str) -> None:
    """Python's wire reads ``body`` as a new conversation's first request too (no tool results,
    nothing of the model's, the user's last, no continued response, no instructions of the
    client SDK), of the conversation ``digest`` names (the book's ``_digest``)."""
    request = WIRES[api].read_request(json.loads(body))
    assert (not request.results and request.last_is_user
            and request.previous_response_id is None and request.anchor
            and not any(mark in request.instructions for mark in SDK_MARKS)), (api, body[:200])
    assert digest == conversation_digest(WIRES[api].api, agent, request.anchor)[:24], \
        (api, body[:200])


@pytest.mark.parametrize("agent", ["", AGENT, "ägent"])
def test_a_request_the_relay_reads_as_new_is_one_the_loop_reads_as_new(agent: str) -> None:
    """Whenever the relay reads a request as a new conversation's first, Python's wire reads it
    so too (no tool results, nothing of the model's, the user's last, no continued response,
    no instructions of the client SDK) and names the same conversation; and every plain one
    is read so."""
    admitted = 0
    for api, case, body in bodies():
        digest = Relay.first_digest("POST", PATHS[api], [], body, agent)
        if digest is None:
            assert case.startswith("plain") is False, (api, case, body[:80])
            continue
        admitted += 1
        assert_read_as_new_by_the_loop(api, body, agent, digest)
    assert admitted >= 3 * 6 + 6 + 2


def test_a_number_python_does_not_read_keeps_a_request_for_the_loop() -> None:
    """A number past a double's range (``1e400``, or 310 digits before the point) is one
    Python's endpoint does not read (``load_json``: the request goes on unobserved, neither
    bound nor counted down); the relay, whose JSON keeps numbers as their text, read it and
    sent the request on itself as a run's (its bound, a countdown's note). It leaves it to
    the loop now; numbers a double holds are read on both sides."""
    for number in ["1e400", "-1E309", "1" * 310 + ".5", "0.1e310", "1.8e308"]:
        body = chat("hello")[:-1] + b', "temperature": ' + number.encode() + b"}"
        with pytest.raises(ValueError, match="out of range"):
            load_json(body)
        assert Relay.first_digest("POST", PATHS["chat"], [], body) is None, number
    for number in ["1e308", "-1.7e308", "1e-400", "1" * 300, "-0.0", "12345678901234567890123"]:
        body = chat("hello")[:-1] + b', "temperature": ' + number.encode() + b"}"
        load_json(body)
        assert Relay.first_digest("POST", PATHS["chat"], [], body) is not None, number


# Run with the interpreter's integer digit limit of the environment it is started with: for
# each length of an integer in a request and in a streamed event, whether Python reads it
# (the Python relay's judge: bounds.load_json, json.loads) and whether the compiled relay does
# (Relay.first_digest, Relay.observed) — and, where both read the event, what text they read.
DIGITS_JUDGED = r"""
import json, sys
from tests.test_model_admission import PATHS, chat
from watchdog.core.bounds import load_json
from watchdog.core.model.chat import ChatWire
from watchdog.core.model.wire import read_stream
from watchdog.shell.model._relay import Relay

judged = []
for digits in json.loads(sys.argv[1]):
    number = b"1" * digits
    body = chat("hello")[:-1] + b', "seed": ' + number + b"}"
    try:
        load_json(body)
        python = True
    except ValueError:
        python = False
    native = Relay.first_digest("POST", PATHS["chat"], [], body) is not None
    stream = (b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"x"}}],"x":' + number
              + b'}\n\ndata: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":'
              + b'"stop"}]}\n\ndata: [DONE]\n\n')
    seen = Relay.observed("chat", stream)
    accumulator = ChatWire().accumulator()
    read_stream(accumulator, stream)
    text = accumulator.observation.text
    judged.append([digits, python, native, text, None if seen is None else seen[8]])
print(json.dumps([sys.get_int_max_str_digits(), judged]))
"""


@pytest.mark.parametrize("limit", ["", "640", "0"], ids=["default", "640", "none"])
def test_an_integer_is_read_by_the_compiled_relay_as_far_as_python_reads_it(
        limit: str) -> None:
    """The compiled relay read an integer of up to 4,000 digits whatever Python's limit
    (``PYTHONINTMAXSTRDIGITS``, 4,300 by default, 640 at least, 0 for none): a 4,100-digit one
    Python reads was left to Python's loop, and with a lower limit the relay read (and sent on
    ahead as a run's) a request Python refuses. It reads exactly what the interpreter it is
    imported into reads, which it asks at import: a request is a run's request on both relays
    alike, and a streamed event is read by the relay where Python reads it (the same text)."""
    lengths = [639, 640, 641, 3999, 4000, 4001, 4100, 4300, 4301, 6000]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTHONINTMAXSTRDIGITS", None)
    if limit:
        env["PYTHONINTMAXSTRDIGITS"] = limit
    done = subprocess.run([sys.executable, "-c", DIGITS_JUDGED, json.dumps(lengths)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    most, judged = json.loads(done.stdout)
    assert most == int(limit or 4300)
    for digits, python, native, text, seen in judged:
        assert python == (most == 0 or digits <= most), digits
        assert native == python, (digits, most)  # the request: both relays read it, or neither
        assert (seen is not None) == python, (digits, most)  # the event: the relay reads it
        assert seen in (None, text) and text == ("x" if python else ""), (digits, seen, text)


def test_headers_that_name_a_run_or_need_reading_keep_a_request_for_the_loop() -> None:
    body = chat("hello")
    assert Relay.first_digest("POST", PATHS["chat"], [], body) is not None
    for name, value in [("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
                        ("x-watchdog-run", "r"), ("x-watchdog-budget-tool-calls", "4"),
                        ("x-watchdog-anything", "1"), ("content-encoding", "gzip"),
                        ("x-watchdog-token", "t")]:
        assert Relay.first_digest("POST", PATHS["chat"], [(name, value)], body) is None, name
    assert Relay.first_digest("GET", PATHS["chat"], [], body) is None
    # a body of more than 256 KiB is not read on the relay's threads
    assert Relay.first_digest("POST", PATHS["chat"], [], chat("big", system="s" * 200_000))
    assert Relay.first_digest("POST", PATHS["chat"], [], chat("big", system="s" * 270_000)) \
        is None
    assert Relay.first_digest("POST", PATHS["chat"], [("content-encoding", "identity")],
                              body) is not None
    token = ("x-watchdog-token", "secret")
    assert Relay.first_digest("POST", PATHS["chat"], [], body, token=token) is None
    assert Relay.first_digest("POST", PATHS["chat"], [("x-watchdog-token", "wrong")], body,
                              token=token) is None
    assert Relay.first_digest("POST", PATHS["chat"], [("x-watchdog-token", "secret")], body,
                              token=token) is not None
    named = Relay.first_digest("POST", PATHS["chat"], [("x-watchdog-agent", "a2")], body, "a1")
    assert named == hashlib.sha256(b"chat\0a2\0hello").hexdigest()[:24]


def mutations(seed: int, count: int) -> Iterator[tuple[str, bytes]]:
    """Random near-first requests: roles, contents and keys changed, messages added."""
    rng = random.Random(seed)
    roles = ["system", "developer", "user", "assistant", "tool", "function", None, 1]
    contents: list[Any] = ["task", "", ["x"], [{"type": "text", "text": "x"}], {"text": "x"},
                          None, 5, "[grace: 1 tool call left]", "Ünïcode \u2028 line"]
    keys: list[tuple[str, Any]] = [("previous_response_id", "r"), ("conversation", "c"),
                                   ("instructions", "Be brief."), ("instructions", None),
                                   ("system", "s"), ("system", [{"type": "text"}]),
                                   ("tools", []), ("stream", True)]
    for _ in range(count):
        api = rng.choice(list(PATHS))
        items: list[Any] = []
        for _ in range(rng.randint(0, 4)):
            item: dict[str, Any] = {}
            if rng.random() < 0.9:
                item["role"] = rng.choice(roles)
            if rng.random() < 0.9:
                item["content"] = rng.choice(contents)
            if rng.random() < 0.2:
                item["type"] = rng.choice(["message", "function_call_output", "reasoning"])
            items.append(item if rng.random() < 0.95 else "loose")
        body: dict[str, Any] = {"model": "m"}
        if api == "responses":
            body["input"] = items if rng.random() < 0.7 else rng.choice(contents)
        else:
            body["messages"] = items
        for key, value in rng.sample(keys, rng.randint(0, 2)):
            body[key] = value
        yield api, json.dumps(body, ensure_ascii=rng.random() < 0.5).encode()


def test_random_near_first_requests_are_read_as_new_only_when_the_loop_reads_them_so() -> None:
    admitted = 0
    for api, body in mutations(20261129, 4000):
        digest = Relay.first_digest("POST", PATHS[api], [], body, AGENT)
        if digest is None:
            continue
        admitted += 1
        assert_read_as_new_by_the_loop(api, body, AGENT, digest)
    assert admitted > 50  # the generator reaches plain first requests too
