"""Upstream faults on the requests the compiled relay sends on ahead of Python (a new
conversation's first request, a budgeted run's continuing requests with the countdown spliced
in, the bounded request whose answer it trims), and on the run's final request: an agent on
the ``openai`` SDK (a failed request sent again at once) runs a Chat Completions loop under a
rule pack's budget of 5 tool calls while the upstream fails one of its requests — a reset
before the head or mid-body, a stall before the head or mid-stream, 500 with a body, SSE split
across writes with CRLF lines and comments, a stream without ``[DONE]``, gzip. After each: no
tool call past the budget handed to the agent, the run's count of tool calls equal to what the
agent ran, no error in the log; and the upstream saw the same requests, and the agent the same
answers, on both relays. Also: the relay's conversation table full."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.faulty_upstream import FaultyUpstream
from tests.harness import RunningServer, http_request, running_server, sidecar_config, wait_until
from tests.test_model_admission import busy, chat, in_background, post, seen_with
from tests.test_model_continuation import (
    BOUND_PACK,
    bounded_agent,
    bounded_upstream,
    settled,
    untimed,
)
from tests.test_model_proxy import RawUpstream

LIMIT = 5  # the pack's budget of tool calls
CALLS = 2  # the tool calls the model asks for at each request
# (each fault at the run's requests 0 to 3: its first (ahead once the agent's first run is
# decided), 1 and 2 (continuing, ahead: "3 of 5 left", then bounded to 1 with "1 of 5"), 3
# (the final request, tools withdrawn))
FAULTS = ["reset_head", "reset_mid", "stall", "hold_mid", "500", "odd_sse", "no_done", "gzip"]
POSITIONS = range(4)
AGENTS = [f"agent-{n}" for n in range(1 + len(FAULTS) * len(POSITIONS))]
PACK = ("apiVersion: agent-watchdog/v1\nkind: RulePack\nname: ahead-faults\nbudgets:\n"
        f"  - agents: {json.dumps(AGENTS)}\n    max_tool_calls: {LIMIT}\n")
SEARCH: Any = [{"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}}}}]


def run_agent(port: int, agent: str, stream: bool) -> tuple[list[int], list[str]]:
    """The agent's loop until an answer with no tool call: the calls it was handed at each
    request, and the errors it met (each request it failed on is sent again, as is)."""
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/agent/{agent}/v1", api_key="k",
                           max_retries=0, timeout=10)  # (it sends again at once)
    conversation: list[Any] = [{"role": "system", "content": "You are terse."},
                               {"role": "user", "content": f"task of {agent}"}]
    handed: list[int] = []
    errors: list[str] = []
    while len(handed) < 8 and len(errors) < 4:
        try:
            calls = ask(client, conversation, stream)
        except (openai.APIError, ValueError) as exc:  # (the SDK's, of a stream cut short)
            errors.append(type(exc).__name__)
            continue
        handed.append(len(calls))
        if not calls:
            break
        conversation.append({"role": "assistant", "content": None, "tool_calls": calls})
        conversation += [{"role": "tool", "tool_call_id": call["id"],
                          "content": f"found {len(handed)}.{n}"} for n, call in enumerate(calls)]
    client.close()
    return handed, errors


def ask(client: openai.OpenAI, conversation: list[Any], stream: bool) -> list[dict[str, Any]]:
    """One request: the tool calls its answer hands over."""
    extra: Any = {"metadata": {"calls": str(CALLS)}}
    if not stream:
        message = client.chat.completions.create(model="m", messages=conversation,
                                                 tools=SEARCH, **extra).choices[0].message
        return [call.model_dump() for call in message.tool_calls or ()]
    calls: dict[int, dict[str, Any]] = {}
    ended = False
    for chunk in client.chat.completions.create(model="m", messages=conversation, tools=SEARCH,
                                                stream=True, **extra):
        for choice in chunk.choices:
            for delta in choice.delta.tool_calls or ():
                call = calls.setdefault(delta.index, {"id": "", "type": "function",
                                                      "function": {"name": "",
                                                                   "arguments": ""}})
                call["id"] += delta.id or ""
                if delta.function is not None:
                    call["function"]["name"] += delta.function.name or ""
                    call["function"]["arguments"] += delta.function.arguments or ""
            ended = ended or choice.finish_reason is not None
    if not ended:  # (a stream cut short the SDK read as ended)
        raise ValueError("the stream ended without a finish reason")
    return [calls[index] for index in sorted(calls)]


def executed(server: RunningServer, agent: str) -> int:
    """The tool calls the sidecar counts for ``agent``'s runs."""
    _, listed = http_request("GET", server.api + f"/v1/runs?agent={agent}")
    total = 0
    for run in json.loads(listed)["runs"]:
        _, detail = http_request("GET", server.api + f"/v1/runs/{run['id']}")
        total += json.loads(detail)["signals"]["tool_calls"]
    return total


def booked(server: RunningServer) -> None:
    native = server.server.native
    if native is not None:
        wait_until(lambda: server.call(lambda: not native.pending and not native.ended),
                   "every call that ended booked")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_upstream_faults_on_requests_sent_ahead_keep_the_budget_and_the_counts(
        tmp_path: Path, stream: bool, caplog: pytest.LogCaptureFixture) -> None:
    seen: dict[str, tuple[list[Any], list[bytes]]] = {}
    caplog.set_level(logging.WARNING, logger="watchdog")
    for relay in ("python", "native"):
        pack = tmp_path / f"pack-{relay}.yaml"
        pack.write_text(PACK)
        upstream = FaultyUpstream()
        outcomes: list[Any] = []
        try:
            with running_server(sidecar_config(
                    tmp_path / f"state-{relay}", model_address="127.0.0.1:0",
                    model_relay=relay, model_upstream=upstream.base + "/v1",
                    rules=(str(pack),), model_upstream_timeout=0.5)) as server:
                port = server.server.addresses["model"][1]
                agents = iter(AGENTS)
                for fault, position in [(None, 0)] + [(f, p) for f in FAULTS
                                                      for p in POSITIONS]:
                    agent = next(agents)
                    if fault is not None:
                        upstream.faults[upstream.count + position] = fault
                    handed, errors = run_agent(port, agent, stream)
                    booked(server)
                    counted = executed(server, agent)
                    assert sum(handed) <= LIMIT, (relay, fault, position, handed)
                    assert counted == sum(handed), (relay, fault, position, handed, counted)
                    outcomes.append((fault, position, handed, errors))
                if relay == "native":
                    native = server.server.native
                    assert native is not None
                    assert native.continued > 0 and native.missed == 0
        finally:
            upstream.close()
        seen[relay] = (outcomes, [untimed(request.body) for request in upstream.seen])
    assert seen["native"][0] == seen["python"][0]
    assert seen["native"][1] == seen["python"][1]
    problems = [record for record in caplog.records
                if record.levelno >= logging.ERROR or record.exc_info]
    assert not problems, [record.getMessage() for record in problems]


def test_a_full_conversation_table_keeps_first_requests_for_the_loop_only(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The relay remembers 262,144 conversations at most: once it is full, the sidecar says
    so once, a new conversation's first request waits for the event loop (it cannot tell it
    is new), and a continuing request the loop proved still goes on ahead."""
    caplog.set_level(logging.WARNING, logger="watchdog")
    pack = tmp_path / "pack.yaml"
    pack.write_text(BOUND_PACK)
    upstream = RawUpstream(bounded_upstream(0.0))
    try:
        with running_server(sidecar_config(
                tmp_path / "state", model_address="127.0.0.1:0", model_relay="native",
                model_upstream=upstream.base + "/v1", rules=(str(pack),))) as server:
            native = server.server.native
            assert native is not None
            assert bounded_agent(server, "steady", 1, "before") == [1] * 7 + [0]
            server.call(lambda: native._know(f"{n:024x}" for n in range(1 << 18)))
            full = [record.getMessage() for record in caplog.records
                    if "remembers as many conversations" in record.getMessage()]
            assert full == ["the model endpoint's relay remembers as many conversations as it "
                            "can: every new conversation's first request is now read before it "
                            "is sent on"]
            before = server.call(lambda: (native.admitted, native.continued))
            with busy(server) as held:
                waiting = in_background(lambda: post(server, "/v1/chat/completions", chat(
                    "a new task", metadata={"calls": "0"}), {"X-Watchdog-Agent": "steady"}))
                held.waiting(1)  # (kept for the loop)
                assert not seen_with(upstream, "a new task")
            assert waiting()[0] == 200
            assert bounded_agent(server, "steady", 1, "after",
                                 settle=settled(server)) == [1] * 7 + [0]
            admitted, continued = server.call(lambda: (native.admitted, native.continued))
            assert continued - before[1] == 6  # every continuing request but the final one
            assert admitted - before[0] == 6  # (continuing ones only: no first request)
    finally:
        upstream.close()
