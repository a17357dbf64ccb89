"""The model endpoint (DESIGN §12) driven by the real ``openai`` and ``anthropic`` SDKs, pointed
at a real sidecar by base URL alone (no OpenTelemetry, no client SDK), in front of the scripted
upstream (tests/frameworks/fakellm.py). What the upstream saw at each request is asserted."""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.frameworks.fakellm import (
    FakeLLM,
    Step,
    ToolCall,
    answer,
    call,
    looping,
    offers_tools,
    steps,
)
from tests.harness import RunningServer, running_server, sidecar_config, wait_until
from tests.model_relays import model_relay  # noqa: F401 (each test on both relays)
from watchdog.core.model.steer import STRUCTURED_REPORT
from watchdog.shell.clock import ManualClock

KEY = "sk-test-SECRET-abcdef0123456789abcdef"
BUDGET_PACK = """\
apiVersion: agent-watchdog/v1
kind: RulePack
name: model-budgets
budgets:
  - agents: ["budgeted"]
    max_tool_calls: 3
  - agents: ["priced"]
    max_cost_usd: 0.00004
  - agents: ["tokened"]
    max_tokens: 150
"""
PRICED = "gpt-4o-mini"  # a model genai-prices knows
LEFT = re.compile(r"\[budget: (\d+) of (\d+) tool calls left")
TOOLS = [{"type": "function", "function": {
    "name": "search", "description": "Search.",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


@pytest.fixture
def llm() -> Iterator[FakeLLM]:
    with FakeLLM() as server:
        yield server


@pytest.fixture
def sidecar(tmp_path: Path, llm: FakeLLM) -> Iterator[RunningServer]:
    pack = tmp_path / "budgets.yaml"
    pack.write_text(BUDGET_PACK)
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url,
                            model_upstream_anthropic=llm.base_url.removesuffix("/v1"),
                            rules=(str(pack),))
    with running_server(config) as server:
        yield server


def client(sidecar: RunningServer, agent: str | None = None) -> openai.OpenAI:
    headers = {"x-watchdog-agent": agent} if agent else None
    return openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY, max_retries=0,
                         default_headers=headers)


def system_of(body: dict[str, Any]) -> str:
    return "\n".join(m["content"] for m in body["messages"] if m["role"] == "system")


def run_loop(chat: openai.OpenAI, model: str, stream: bool = False, limit: int = 10,
             messages: list[Any] | None = None, strict: bool = False) -> tuple[str, int]:
    """A hand-written agent loop: call the model, run the tools it asks for, until it
    answers. Returns its final output and how many tools it ran; ``messages`` (given empty)
    is left with the conversation as last sent. ``strict``: it reads ``choices[0]`` of every
    chunk, as an agent that never asked for usage may."""
    if messages is None:
        messages = []
    messages[:] = [{"role": "system", "content": "You are a researcher."},
                   {"role": "user", "content": "Find the answer."}]
    ran = 0
    for _ in range(limit):
        if stream:
            content, calls = "", {}
            with chat.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                              stream=True) as events:
                for chunk in events:
                    if not chunk.choices:
                        assert not strict, f"a chunk with no choices: {chunk}"
                        continue
                    delta = chunk.choices[0].delta
                    content += delta.content or ""
                    for part in delta.tool_calls or ():
                        entry = calls.setdefault(part.index, {"id": "", "name": "", "args": ""})
                        entry["id"] = part.id or entry["id"]
                        if part.function is not None:
                            entry["name"] += part.function.name or ""
                            entry["args"] += part.function.arguments or ""
            tool_calls = [{"id": c["id"], "type": "function",
                           "function": {"name": c["name"], "arguments": c["args"]}}
                          for c in calls.values()]
        else:
            response = chat.chat.completions.create(model=model, messages=messages,
                                                    tools=TOOLS)
            message = response.choices[0].message
            content = message.content or ""
            tool_calls = [c.model_dump() for c in message.tool_calls or ()]
        if not tool_calls:
            return content, ran
        messages.append({"role": "assistant", "content": content or None,
                         "tool_calls": tool_calls})
        for tool_call in tool_calls:
            ran += 1
            messages.append({"role": "tool", "tool_call_id": tool_call["id"],
                             "content": f"result {ran}"})
    raise AssertionError("the loop did not end")


def runs_of(sidecar: RunningServer, agent: str) -> list[dict[str, Any]]:
    return [run for run in sidecar.get_json(f"/v1/runs?agent={agent}")["runs"]]


@pytest.mark.parametrize("stream", [False, True])
def test_one_run_per_invocation_with_its_counts(sidecar: RunningServer, llm: FakeLLM,
                                                stream: bool) -> None:
    model = llm.script("plain", steps(call("search", q="a"), call("search", q="b"),
                                      answer("The answer is 42.")))
    output, ran = run_loop(client(sidecar, "plain-agent"), model, stream)
    assert output == "The answer is 42." and ran == 2
    requests = llm.requests(model)
    assert len(requests) == 3
    assert all("agent-watchdog" not in json.dumps(r) for r in requests)  # nothing applied
    run = wait_until(lambda: [r for r in runs_of(sidecar, "plain-agent") if r["state"] == "ended"],
                     "the run ends with its answer")[0]
    detail = sidecar.get_json(f"/v1/runs/{run['id']}")
    assert detail["signals"]["iterations"] == 3
    assert detail["signals"]["tool_calls"] == 2
    assert detail["terminal_state"] == "completed" and detail["has_final_answer"]


@pytest.mark.parametrize("stream", [False, True])
def test_budget_of_three_counts_down_then_withdraws_tools(sidecar: RunningServer,
                                                          llm: FakeLLM, stream: bool) -> None:
    model = llm.script("looper", looping("search", lambda i: {"q": f"page {i}"},
                                         answer_without_tools="REPORT: found pages 0-2"))
    output, ran = run_loop(client(sidecar, "budgeted"), model, stream)
    requests = llm.requests(model)
    assert ran == 3
    assert output == "REPORT: found pages 0-2"
    assert len(requests) == 4
    for left, body in zip((3, 2, 1), requests, strict=False):
        assert f"[budget: {left} of 3 tool calls left" in system_of(body), (left, body)
        assert body.get("tool_choice") is None
    assert all("stream_options" not in body for body in requests)  # as the client sent them
    last = requests[-1]
    assert last["tool_choice"] == "none" and last["tools"]  # definitions kept
    assert "Tools are withdrawn" in system_of(last)
    assert system_of(last).count("This run is being stopped") == 1  # (the report prompt's
    assert "Run counters: tool calls 3 of 3" in system_of(last)  # own, with the run's record)
    assert all(m["role"] != "user" or "agent-watchdog" not in str(m["content"])
               for m in last["messages"])
    run = wait_until(lambda: [r for r in runs_of(sidecar, "budgeted") if r["state"] == "ended"],
                     "the run ends with its report")[0]
    detail = sidecar.get_json(f"/v1/runs/{run['id']}")
    assert detail["signals"]["tool_calls"] == 3
    assert detail["has_final_answer"]
    assert detail["terminal_state"] == "tool_limit_reached"


def test_a_request_that_can_call_no_tool_gets_no_countdown(sidecar: RunningServer,
                                                            llm: FakeLLM) -> None:
    """A request whose ``tool_choice`` is ``"none"`` (a summary an agent asks for mid-run) can
    call no tool: it goes on as sent, no countdown in its instructions (which would change the
    prompt's prefix: a prompt-cache miss for nothing), and the run's next request with tools
    counts down as before."""
    model = llm.script("sider", looping("search", lambda i: {"q": f"page {i}"},
                                        answer_without_tools="So far: page 0."))
    chat = client(sidecar, "budgeted")
    messages: list[Any] = [{"role": "system", "content": "You are a researcher."},
                           {"role": "user", "content": "Find the answer."}]
    first = chat.chat.completions.create(model=model, messages=messages, tools=TOOLS)
    calls = [c.model_dump() for c in first.choices[0].message.tool_calls or ()]
    messages += [{"role": "assistant", "content": None, "tool_calls": calls},
                 {"role": "tool", "tool_call_id": calls[0]["id"], "content": "result 1"}]
    summary = chat.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                           tool_choice="none")
    assert summary.choices[0].message.content == "So far: page 0."
    chat.chat.completions.create(model=model, messages=messages, tools=TOOLS)
    requests = llm.requests(model)
    assert "[budget: 3 of 3 tool calls left" in system_of(requests[0])
    assert requests[1]["messages"] == messages and requests[1]["tool_choice"] == "none"
    assert "agent-watchdog" not in json.dumps(requests[1]), requests[1]
    assert "[budget: 2 of 3 tool calls left" in system_of(requests[2])


REPORT_SCHEMA = {"type": "json_schema", "json_schema": {"name": "answer", "strict": True,
    "schema": {"type": "object", "additionalProperties": False, "required": ["answer"],
               "properties": {"answer": {"type": "string"}}}}}


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_a_final_request_with_a_structured_format_asks_for_the_report_in_it(
        sidecar: RunningServer, llm: FakeLLM, api: str) -> None:
    """An agent whose answers must follow a strict JSON schema (``response_format``, the
    Responses API's ``text.format``) parses its final answer by it: at the budget, the final
    request keeps that format and asks for the report within it, not in Markdown sections the
    schema cannot hold, so the agent finishes normally with the report as its result."""
    report = json.dumps({"answer": "Searched pages 0-2; page 3 is left."})
    model = llm.script(f"schema-{api}", looping("search", lambda i: {"q": f"page {i}"},
                                                answer_without_tools=report))
    chat = client(sidecar, "budgeted")
    if api == "chat":
        messages: list[Any] = [{"role": "system", "content": "You are a researcher."},
                               {"role": "user", "content": "Find the answer."}]
        for _ in range(5):
            response = chat.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                                    response_format=REPORT_SCHEMA)
            calls = [c.model_dump() for c in response.choices[0].message.tool_calls or ()]
            if not calls:
                break
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            messages += [{"role": "tool", "tool_call_id": c["id"], "content": "result"}
                         for c in calls]
        output = response.choices[0].message.content
        final = llm.requests(model)[-1]
        told, kept = system_of(final), final["response_format"]
        assert kept == REPORT_SCHEMA
    else:
        text_format = {"format": {"type": "json_schema", **REPORT_SCHEMA["json_schema"]}}
        items: list[Any] = [{"role": "user", "content": "Find the answer."}]
        for _ in range(5):
            answer = chat.responses.create(model=model, instructions="You research.",
                                           input=items, tools=RESPONSES_TOOLS,
                                           text=text_format)  # type: ignore[arg-type]
            asked = [item for item in answer.output if item.type == "function_call"]
            if not asked:
                break
            for item in asked:
                items += [{"type": "function_call", "call_id": item.call_id,
                           "name": item.name, "arguments": item.arguments},
                          {"type": "function_call_output", "call_id": item.call_id,
                           "output": "result"}]
        output = answer.output_text
        final = llm.requests(model)[-1]
        told, kept = final["instructions"], final["text"]
        assert kept == text_format
    assert output == report
    assert final["tool_choice"] == "none" and "Tools are withdrawn" in told
    assert STRUCTURED_REPORT in told, told


@pytest.mark.parametrize(("agent", "spent"), [
    ("priced", "of the cost budget used — stop and report]"),
    ("tokened", "[budget: all 150 tokens used — stop and report]")])
def test_a_budget_in_dollars_or_tokens_counts_streams_whose_client_asked_no_usage(
        sidecar: RunningServer, llm: FakeLLM, agent: str, spent: str) -> None:
    """A streamed Chat Completions call reports its usage only when asked; this client does not
    ask. With a budget in dollars or tokens the endpoint asks for it, reads it and leaves its
    chunk out: each call is priced and its tokens counted, and at the budget the tools are
    withdrawn and the report is the agent's answer; the client never sees a chunk it did not
    ask for."""
    model = llm.script(PRICED, looping("search", lambda i: {"q": f"page {i}"},
                                       answer_without_tools="REPORT: counted pages"))
    output, ran = run_loop(client(sidecar, agent), model, stream=True, strict=True)
    requests = llm.requests(model)
    assert output == "REPORT: counted pages" and 1 <= ran < 9
    assert all(body["stream_options"] == {"include_usage": True} for body in requests)
    last = requests[-1]
    assert last["tool_choice"] == "none"
    assert spent in system_of(last)
    run = wait_until(lambda: [r for r in runs_of(sidecar, agent) if r["state"] == "ended"],
                     "the run ends with its report")[0]
    signals = sidecar.get_json(f"/v1/runs/{run['id']}")["signals"]
    assert signals["unpriced_calls"] == 0
    assert signals["cost_usd"] >= 0.00004 if agent == "priced" else signals["total_tokens"] >= 150


def at_once(sidecar: RunningServer, llm: FakeLLM, name: str, pick: Any,
            first: dict[str, Any], second: dict[str, Any]) -> tuple[Any, Any, str]:
    """Two requests of one run (``x-watchdog-run``, a budget of 2 tool calls) to the model
    scripted by ``pick``: ``first``'s answer held until ``second`` has come. Both answers and
    the model's name."""
    came = threading.Event()

    def hold(index: int) -> None:  # the first answer waits until the second request came
        if index == 0:
            came.wait(10)
        else:
            came.set()

    model = llm.script(name, pick, on_request=hold)
    chat = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY, max_retries=0,
                         default_headers={"x-watchdog-run": f"{name}-1",
                                          "x-watchdog-budget-tool-calls": "2"})
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(chat.chat.completions.create(
        model=model, **first)))
    thread.start()
    wait_until(lambda: len(llm.requests(model)) == 1, "the first request upstream")
    other = chat.chat.completions.create(model=model, **second)
    thread.join(10)
    return answers[0], other, model


def test_parallel_requests_of_one_run_share_its_budget_and_none_is_left_empty(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Two requests of one run with the model at once, a budget of 2 tool calls: the first
    holds both calls it may be handed, so the second can be handed none. Its tools are
    withdrawn with the note and it gets the model's text, never an answer trimmed to
    nothing; the first gets its two calls."""
    def pick(index: int, body: dict[str, Any]) -> Step:
        if offers_tools(body):
            return Step(tool_calls=(ToolCall("search", {"q": "a"}), ToolCall("search", {"q": "b"})))
        return answer("REPORT: in text")

    ask = {"messages": [{"role": "user", "content": "Find both."}], "tools": TOOLS}
    first, other, model = at_once(sidecar, llm, "parallel", pick, ask, ask)
    assert other.choices[0].message.content == "REPORT: in text"
    assert not other.choices[0].message.tool_calls
    withdrawn = llm.requests(model)[1]
    assert withdrawn["tool_choice"] == "none" and withdrawn["tools"]
    assert "[budget: 0 of 2 tool calls left — no tool will run; report now]" in json.dumps(
        withdrawn["messages"], ensure_ascii=False)
    assert [call.function.name for call in first.choices[0].message.tool_calls] == [
        "search", "search"]


def test_a_request_that_offers_no_tools_holds_none_of_its_runs_calls(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """A request of a run that offers no tools (the title an agent asks its small model for as
    its task's first request goes out, as Crush does) with the model while the run's request
    that offers tools comes: it can be handed no tool call, so it holds none of the budget;
    the other is offered its tools, counted down from all 2, and gets its two calls."""
    def pick(index: int, body: dict[str, Any]) -> Step:
        if offers_tools(body):
            return Step(tool_calls=(ToolCall("search", {"q": "a"}), ToolCall("search", {"q": "b"})))
        return answer("Finding both")

    title, task, model = at_once(
        sidecar, llm, "titled", pick,
        {"messages": [{"role": "user", "content": "A title for: Find both."}]},
        {"messages": [{"role": "user", "content": "Find both."}], "tools": TOOLS})
    assert title.choices[0].message.content == "Finding both"
    offered = llm.requests(model)[1]
    assert offered.get("tool_choice") != "none"
    assert "[budget: 2 of 2 tool calls left — wrap up soon]" in system_of(offered)
    assert [call.function.name for call in task.choices[0].message.tool_calls or []] == [
        "search", "search"]


STOP_RULE = """\
rules:
  - name: stop-at-two
    description: A test's abort at two tool calls.
    when: "!run.ended && run.agent == 'stopper' && run.tool_calls >= 2"
    action: abort
    severity: critical
    terminal_state: loop_detected
    message: "[stopped: two tool calls are enough]"
"""


NOTIFY_RULE = """\
rules:
  - name: search-is-down
    description: A test's notify at two tool calls, as the fleet's tool-outage tells a run.
    when: "!run.ended && run.agent == 'told' && run.tool_calls >= 2"
    action: notify
    severity: warning
    message: "[fleet: search has failed for 3 runs — don't retry it]"
"""


@pytest.mark.parametrize("stream", [False, True])
def test_a_notify_is_added_to_the_next_requests_instructions(tmp_path: Path, llm: FakeLLM,
                                                              stream: bool) -> None:
    pack = tmp_path / "notify.yaml"
    pack.write_text(BUDGET_PACK + NOTIFY_RULE)
    config = sidecar_config(tmp_path / "state-notify", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, rules=(str(pack),))
    model = llm.script("told", steps(call("search", q="a"), call("search", q="b"),
                                     call("search", q="c"), answer("done")))
    with running_server(config) as server:
        output, ran = run_loop(client(server, "told"), model, stream)
        notes = ["[fleet: search has failed" in system_of(body) for body in llm.requests(model)]
        run_id = runs_of(server, "told")[0]["id"]
        directives = wait_until(lambda: server.get_json(f"/v1/runs/{run_id}")["directives"])
    assert (output, ran) == ("done", 3)
    assert [d["rule"] for d in directives] == ["search-is-down"]
    assert notes == [False, False, True, True]  # from the request after the second call on


SLOW_TOOL_RULE = """\
rules:
  - name: tool-too-slow
    description: A test's abort of a run whose tool takes too long (decided by the timer).
    when: "!run.ended && run.agent == 'slow-tool' && run.elapsed_seconds > 1.0"
    action: abort
    severity: critical
    terminal_state: time_limit_reached
    message: "[stopped: the tool took too long]"
"""


def test_an_abort_decided_before_a_restart_stops_the_runs_next_request_after_it(
        tmp_path: Path, llm: FakeLLM) -> None:
    pack = tmp_path / "slow.yaml"
    pack.write_text(BUDGET_PACK + SLOW_TOOL_RULE)
    config = sidecar_config(tmp_path / "state-restart", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, rules=(str(pack),),
                            eval_interval=3600.0)  # (the timer runs when the test says)
    model = llm.script("slowtool", looping("search", lambda i: {"q": f"page {i}"}))
    messages: list[Any] = [{"role": "system", "content": "You are a researcher."},
                           {"role": "user", "content": "Find the answer."}]
    clock = ManualClock()
    with running_server(config, clock) as server:
        asked = client(server, "slow-tool").chat.completions.create(
            model=model, messages=messages, tools=TOOLS).choices[0].message
        run_id = runs_of(server, "slow-tool")[0]["id"]
        # the abort comes while the agent runs its tool (the timer's, 2 s after the request by
        # the wall clock its model call was timed with: a slow start must not eat the 2 s);
        # then the sidecar restarts
        clock.advance(time.time() - clock.now() + 2.0)
        assert server.server.service is not None
        server.call(server.server.service.tick)
        server.stored()
        stop = server.get_json(f"/v1/runs/{run_id}")["directives"]
        assert [d["rule"] for d in stop] == ["tool-too-slow"]
    messages += [{"role": "assistant", "content": None,
                  "tool_calls": [c.model_dump() for c in asked.tool_calls or ()]},
                 {"role": "tool", "tool_call_id": (asked.tool_calls or [])[0].id,
                  "content": "result 1"}]
    with running_server(config, clock) as server:  # the same state directory
        answer = client(server, "slow-tool").chat.completions.create(
            model=model, messages=messages, tools=TOOLS).choices[0].message
        run = server.get_json(f"/v1/runs/{run_id}")
    assert "[stopped: the tool took too long]" in (answer.content or "")
    assert not answer.tool_calls
    assert len(llm.requests(model)) == 1  # the upstream saw only the request before the stop
    assert (run["terminal_state"], run["terminal_reason"]) == ("time_limit_reached",
                                                               "tool-too-slow")


@pytest.fixture
def error_sidecar(tmp_path: Path, llm: FakeLLM) -> Iterator[RunningServer]:
    pack = tmp_path / "budgets.yaml"
    pack.write_text(BUDGET_PACK + STOP_RULE)
    config = sidecar_config(tmp_path / "state-error", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url,
                            model_upstream_anthropic=llm.base_url.removesuffix("/v1"),
                            rules=(str(pack),),
                            model_abort="error")
    with running_server(config) as server:
        yield server


@pytest.fixture
def stop_sidecar(tmp_path: Path, llm: FakeLLM) -> Iterator[RunningServer]:
    pack = tmp_path / "budgets.yaml"
    pack.write_text(BUDGET_PACK + STOP_RULE)
    config = sidecar_config(tmp_path / "state-stop", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url,
                            model_upstream_anthropic=llm.base_url.removesuffix("/v1"),
                            rules=(str(pack),))
    with running_server(config) as server:
        yield server


@pytest.mark.parametrize("stream", [False, True])
def test_abort_is_answered_without_calling_upstream(stop_sidecar: RunningServer, llm: FakeLLM,
                                                    stream: bool) -> None:
    model = llm.script("stopped", looping("search", lambda i: {"q": f"page {i}"}))
    chat = client(stop_sidecar, "stopper")
    messages: list[Any] = []
    output, ran = run_loop(chat, model, stream, messages=messages)
    assert ran == 2
    assert len(llm.requests(model)) == 2  # the third request never reached the upstream
    assert "[stopped: two tool calls are enough]" in output
    assert "2 tool calls" in output  # the run's report: its progress so far
    # any later request of that run gets the same answer, and the upstream nothing
    again = chat.chat.completions.create(model=model, messages=messages, tools=TOOLS)
    assert "[stopped: two tool calls are enough]" in (again.choices[0].message.content or "")
    assert len(llm.requests(model)) == 2


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_call_budget_is_counted_down_before_its_last_call(
        sidecar: RunningServer, llm: FakeLLM, stream: bool) -> None:
    """``x-watchdog-budget-iterations: 4``: the last of the 4 model calls is the run's final
    request (tools withdrawn, the report asked for), so the default pack's countdown tells the
    model before it: the request with 2 calls left carries the true count."""
    model = llm.script("iterations", looping("search", lambda i: {"q": f"page {i}"},
                                             "REPORT: in text"))
    chat = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY, max_retries=0,
                         default_headers={"x-watchdog-budget-iterations": "4"})
    output, ran = run_loop(chat, model, stream)
    assert (output, ran) == ("REPORT: in text", 3)
    told = [re.findall(r"\[budget: [^\]]*\]", system_of(body)) for body in llm.requests(model)]
    assert told == [[], [], ["[budget: 2 of 4 model calls left — wrap up soon]"],
                    ["[budget: model calls used — this is the last of 4: report]"]], told
    assert llm.requests(model)[-1]["tool_choice"] == "none"


@pytest.mark.parametrize("stream", [False, True])
def test_a_conversation_that_goes_on_from_the_stop_answer_gets_the_error(
        stop_sidecar: RunningServer, llm: FakeLLM, stream: bool) -> None:
    """An agent that does not take the stop answer as its run's end sends it on with a new
    user message (a framework's validation retry: "answer in the schema"). That request is
    the stopped run's, not the session's next run: the upstream gets nothing, and the answer
    is the API's error with the stop note, which the agent raises. A new conversation of the
    same agent is a run of its own, as before."""
    model = llm.script("stopped-retry", looping("search", lambda i: {"q": f"page {i}"}))
    chat = client(stop_sidecar, "stopper")
    messages: list[Any] = []
    output, ran = run_loop(chat, model, stream, messages=messages)
    assert (ran, len(llm.requests(model))) == (2, 2)
    assert "[stopped: two tool calls are enough]" in output
    # the agent's validation fails; it says so, the stop answer in its history (stripped)
    messages += [{"role": "assistant", "content": output.strip()},
                 {"role": "user", "content": "Validation failed: answer with a JSON object."}]
    with pytest.raises(openai.BadRequestError) as failure:
        chat.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                     stream=stream)
    assert failure.value.code == "watchdog_aborted"
    assert "two tool calls are enough" in failure.value.message
    assert len(llm.requests(model)) == 2  # nothing reached the upstream
    # a conversation of its own goes upstream: the stop was that run's
    fresh = chat.chat.completions.create(model=model, messages=[
        {"role": "user", "content": "Another task."}], tools=TOOLS)
    assert fresh.choices[0].message.tool_calls
    assert len(llm.requests(model)) == 3


@pytest.mark.parametrize("stream", [False, True])
def test_a_conversation_that_asks_again_from_the_stop_answer_gets_it_again(
        stop_sidecar: RunningServer, llm: FakeLLM, stream: bool) -> None:
    """An agent that asks its model to go on from its own answer, the conversation ending on
    it with nothing after it (tiny-agents does so once after a text answer that followed tool
    results, and takes one with no tool call as its end), did not reject the stop answer: it
    gets it again, not the error, nothing upstream; up to 3 times a run, the 4th the error."""
    model = llm.script("stopped-again", looping("search", lambda i: {"q": f"page {i}"}))
    chat = client(stop_sidecar, "stopper")
    messages: list[Any] = []
    output, _ran = run_loop(chat, model, stream, messages=messages)
    assert "[stopped: two tool calls are enough]" in output
    messages.append({"role": "assistant", "content": output})
    for _ in range(3):
        again = chat.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                             stream=stream)
        text = "".join(chunk.choices[0].delta.content or "" for chunk in again
                       if chunk.choices) if stream else again.choices[0].message.content
        assert text == output
    with pytest.raises(openai.BadRequestError) as failure:
        chat.chat.completions.create(model=model, messages=messages, tools=TOOLS)
    assert failure.value.code == "watchdog_aborted"
    assert len(llm.requests(model)) == 2  # nothing reached the upstream


def test_a_new_message_after_the_models_own_report_is_the_next_run(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """At its budget the run ends with the model's report; a request of the run after it gets
    that report again from the endpoint. A new user message after the report is the
    session's next run, as after any answer: it goes upstream (no error)."""
    model = llm.script("reported", looping("search", lambda i: {"q": f"page {i}"},
                                           answer_without_tools="REPORT: three pages"))
    chat = client(sidecar, "budgeted")
    messages: list[Any] = []
    output, ran = run_loop(chat, model, messages=messages)
    assert (output, ran) == ("REPORT: three pages", 3)
    sent = len(llm.requests(model))
    again = chat.chat.completions.create(model=model, messages=messages, tools=TOOLS)
    assert again.choices[0].message.content == "REPORT: three pages"
    assert len(llm.requests(model)) == sent  # answered by the endpoint
    messages += [{"role": "assistant", "content": output},
                 {"role": "user", "content": "Now look at page 4."}]
    going_on = chat.chat.completions.create(model=model, messages=messages, tools=TOOLS)
    assert going_on.choices[0].message.tool_calls
    assert len(llm.requests(model)) == sent + 1


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_the_stop_answer_sent_on_gets_the_error_on_the_other_apis(
        stop_sidecar: RunningServer, llm: FakeLLM, api: str) -> None:
    """As for Chat Completions: the Responses API with the conversation sent whole and
    Anthropic Messages, the stop answer in the history (a text block, an output_text part)
    and a retry prompt after it: the API's error with the stop note, nothing upstream."""
    import anthropic

    model = llm.script(f"stopped-{api}", looping("search", lambda i: {"q": f"page {i}"}))
    history: list[Any] = [{"role": "user", "content": "Find the answer."}]
    claude = anthropic.Anthropic(base_url=stop_sidecar.url("model"), api_key=KEY, max_retries=0,
                                 default_headers={"x-watchdog-agent": "stopper"})
    chat = client(stop_sidecar, "stopper")

    def ask() -> str | None:
        """One request: the stop answer's text, else None (the tools asked for, run)."""
        if api == "messages":
            message = claude.messages.create(model=model, max_tokens=512, messages=history,
                                             tools=ANTHROPIC_TOOLS)  # type: ignore[arg-type]
            uses = [block for block in message.content if block.type == "tool_use"]
            if not uses:
                history.append({"role": "assistant", "content": [
                    block.model_dump() for block in message.content]})
                return "".join(block.text for block in message.content if block.type == "text")
            history.append({"role": "assistant",
                            "content": [block.model_dump() for block in message.content]})
            history.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use.id, "content": "result"}
                for use in uses]})
            return None
        response = chat.responses.create(model=model, input=history,
                                          tools=RESPONSES_TOOLS)  # type: ignore[arg-type]
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            history.append({"role": "assistant", "content": [
                {"type": "output_text", "text": response.output_text}]})
            return response.output_text
        for item in calls:
            history.extend([{"type": "function_call", "call_id": item.call_id,
                             "name": item.name, "arguments": item.arguments},
                            {"type": "function_call_output", "call_id": item.call_id,
                             "output": "result"}])
        return None

    answers = [ask() for _ in range(3)]
    assert answers[:2] == [None, None] and "two tool calls are enough" in (answers[2] or "")
    assert len(llm.requests(model)) == 2
    history.append({"role": "user", "content": "Validation failed: answer in the schema."})
    failure = anthropic.BadRequestError if api == "messages" else openai.BadRequestError
    with pytest.raises(failure) as raised:
        ask()
    assert "watchdog_aborted" in str(raised.value.body)
    assert "two tool calls are enough" in str(raised.value.body)
    assert len(llm.requests(model)) == 2


def respond(chat: openai.OpenAI, stream: bool, **request: Any) -> Any:
    """One Responses request, streamed (the SDK's final response) or not."""
    if stream:
        with chat.responses.stream(**request) as events:
            return events.get_final_response()
    return chat.responses.create(**request)


def chained_loop(chat: openai.OpenAI, model: str, requests: int, stream: bool,
                 sent: list[tuple[str | None, list[Any]]] | None = None) -> Any:
    """A Responses tool loop chained by ``previous_response_id`` (each call's output sent
    back), ``requests`` requests long: the last response; ``sent`` (given empty) gets each
    request's ``previous_response_id`` and ``input``."""
    items: list[Any] = [{"role": "user", "content": "Find the answer."}]
    previous: str | None = None
    for _ in range(requests):
        if sent is not None:
            sent.append((previous, items))
        response = respond(chat, stream, model=model, input=items, tools=RESPONSES_TOOLS,
                           previous_response_id=previous)
        previous = response.id
        items = [{"type": "function_call_output", "call_id": item.call_id, "output": "result"}
                 for item in response.output if item.type == "function_call"]
    return response


@pytest.mark.parametrize("stream", [False, True])
def test_a_chained_conversation_that_goes_on_from_the_stop_answer_gets_the_error(
        stop_sidecar: RunningServer, llm: FakeLLM, stream: bool) -> None:
    """The Responses API with the conversation chained by ``previous_response_id``: a request
    that goes on from the stop answer's id with a retry prompt gets the error with the stop
    note, and the upstream nothing."""
    model = llm.script("stopped-chained", looping("search", lambda i: {"q": f"page {i}"}))
    chat = client(stop_sidecar, "stopper")
    response = chained_loop(chat, model, 3, stream)
    previous = response.id
    assert "two tool calls are enough" in response.output_text
    assert len(llm.requests(model)) == 2
    with pytest.raises(openai.BadRequestError) as failure:
        chat.responses.create(model=model, previous_response_id=previous, input=[
            {"role": "user", "content": "Validation failed: answer in the schema."}],
            tools=RESPONSES_TOOLS)  # type: ignore[arg-type]
    assert failure.value.code == "watchdog_aborted"
    assert "two tool calls are enough" in failure.value.message
    assert len(llm.requests(model)) == 2


@pytest.mark.parametrize(("how", "restart"), [
    ("whole", True), ("stream", True), ("chained", True), ("conversation", False),
    ("conversation", True)])
def test_a_retry_after_a_stop_gets_the_error_after_a_restart_and_in_a_kept_conversation(
        tmp_path: Path, llm: FakeLLM, how: str, restart: bool) -> None:
    """The stop answer's digests and ids are the stopped run's, stored with it: a retry that
    goes on from it after the sidecar restarted (the same state directory) gets the error
    with the stop note, never a new run with a fresh budget at the upstream. A conversation
    the server keeps (``conversation``: its requests carry no answer nor id to go on from)
    is the stopped run's from its stop on, as a chain from the stop answer's id is."""
    pack = tmp_path / "budgets.yaml"
    pack.write_text(BUDGET_PACK + STOP_RULE)
    config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                            model_upstream=llm.base_url, rules=(str(pack),))
    model = llm.script(f"stop-kept-{how}", looping("search", lambda i: {"q": f"page {i}"}))
    retry = {"role": "user", "content": "Validation failed: answer with a JSON object."}
    messages: list[Any] = []
    previous = None
    with contextlib.ExitStack() as servers:
        server = servers.enter_context(running_server(config))
        chat = client(server, "stopper")
        if how in ("whole", "stream"):
            output, _ = run_loop(chat, model, how == "stream", messages=messages)
            messages += [{"role": "assistant", "content": output.strip()}, retry]
        elif how == "chained":
            response = chained_loop(chat, model, 3, False)
            output, previous = response.output_text, response.id
        else:
            response, _ = stored_turn(chat, model, "Find it.", conversation="conv_stopped")
            output = response.output_text
        assert "two tool calls are enough" in output
        assert len(llm.requests(model)) == 2
        if restart:  # the same state directory
            servers.close()
            server = servers.enter_context(running_server(config))
            chat = client(server, "stopper")
        with pytest.raises(openai.BadRequestError) as failure:
            if how in ("whole", "stream"):
                chat.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                             stream=how == "stream")
            else:
                more = {"previous_response_id": previous} if previous else {
                    "conversation": "conv_stopped"}
                chat.responses.create(model=model, input=[retry], tools=RESPONSES_TOOLS,
                                      **more)  # type: ignore[arg-type]
        assert failure.value.code == "watchdog_aborted"
        assert "two tool calls are enough" in failure.value.message
        assert len(llm.requests(model)) == 2  # nothing reached the upstream
        assert len(runs_of(server, "stopper")) == 1  # no new run


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("instructions", [None, "Be brief."])
def test_the_instructions_a_response_echoes_are_the_clients_own(
        sidecar: RunningServer, llm: FakeLLM, stream: bool, instructions: str | None) -> None:
    """A Responses request whose note went into ``instructions`` (the agent gave none, or gave
    them there): the upstream's response echoes the instructions it was sent, and the agent
    gets back the ones it sent (none: null, as the API echoes none; Koog reads a string there
    as a list and fails), streamed (every event that carries the response) and not; the note
    itself reaches the model."""
    model = llm.script(f"echo-{stream}-{instructions}", looping(
        "search", lambda i: {"q": f"page {i}"}, answer_without_tools="REPORT: echoed"))
    output, echoed = echoing_loop(client(sidecar, "budgeted"), model, stream,
                                  "absent" if instructions is None else instructions)
    assert output == "REPORT: echoed"
    sent = [body.get("instructions") or "" for body in llm.requests(model)]
    assert "[budget: 3 of 3" in sent[0] and "[budget:" in sent[-1], sent  # (notes went there)
    assert echoed and echoed == [instructions] * len(echoed), echoed


@pytest.mark.parametrize("stream", [False, True])
def test_abort_as_an_error(error_sidecar: RunningServer, llm: FakeLLM, stream: bool) -> None:
    model = llm.script("stopped", looping("search", lambda i: {"q": f"page {i}"}))
    with pytest.raises(openai.BadRequestError) as failure:
        run_loop(client(error_sidecar, "stopper"), model, stream)
    assert failure.value.status_code == 400
    assert failure.value.code == "watchdog_aborted"
    assert "two tool calls are enough" in failure.value.message
    assert len(llm.requests(model)) == 2


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls_past_the_budget_are_trimmed(sidecar: RunningServer, llm: FakeLLM,
                                                stream: bool) -> None:
    two = Step(tool_calls=(ToolCall("search", {"q": "x"}), ToolCall("search", {"q": "y"})))
    model = llm.script("parallel", lambda _i, body: two if offers_tools(body)
                       else answer("REPORT: done"))
    output, ran = run_loop(client(sidecar, "budgeted"), model, stream)
    assert ran == 3  # 2, then 1 of the 2 asked: never past the budget of 3
    assert output == "REPORT: done"
    requests = llm.requests(model)
    assert len(requests) == 3
    assert "[budget: 1 of 3 tool calls left" in system_of(requests[1])
    assert requests[2]["tool_choice"] == "none"


@pytest.mark.parametrize("stream", [False, True])
def test_several_answers_are_each_trimmed_and_the_first_is_counted(
        sidecar: RunningServer, llm: FakeLLM, stream: bool) -> None:
    """A request for ``n`` = 2 answers, each asking for two calls: the agent takes the first
    (``choices[0]``), which is what the run counts; every answer it gets is trimmed to the
    calls left, so whichever it took, none goes past the budget."""
    two = Step(tool_calls=(ToolCall("search", {"q": "x"}), ToolCall("search", {"q": "y"})))
    model = llm.script("answers", lambda _i, body: two if offers_tools(body)
                       else answer("REPORT: done"))
    chat = client(sidecar, "budgeted")
    messages: list[Any] = [{"role": "system", "content": "You are a researcher."},
                           {"role": "user", "content": "Find the answer."}]
    ran, offered = 0, []
    for _ in range(5):
        calls: dict[int, dict[int, dict[str, str]]] = {}  # by choice, by call index
        content = ""
        if stream:
            with chat.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                              n=2, stream=True) as events:
                for chunk in events:
                    for choice in chunk.choices:
                        content += (choice.delta.content or "") if choice.index == 0 else ""
                        for part in choice.delta.tool_calls or ():
                            made = calls.setdefault(choice.index, {}).setdefault(
                                part.index, {"id": "", "name": "", "arguments": ""})
                            made["id"] = part.id or made["id"]
                            if part.function is not None:
                                made["name"] += part.function.name or ""
                                made["arguments"] += part.function.arguments or ""
        else:
            response = chat.chat.completions.create(model=model, messages=messages,
                                                    tools=TOOLS, n=2)
            content = response.choices[0].message.content or ""
            for choice in response.choices:
                for i, c in enumerate(choice.message.tool_calls or ()):
                    calls.setdefault(choice.index, {})[i] = {
                        "id": c.id, "name": c.function.name, "arguments": c.function.arguments}
        offered.append(sorted(len(made) for made in calls.values()))
        taken = list(calls.get(0, {}).values())
        if not taken:
            break
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}} for c in taken]})
        for made in taken:
            ran += 1
            messages.append({"role": "tool", "tool_call_id": made["id"], "content": "nothing"})
    assert (content, ran) == ("REPORT: done", 3)
    assert offered == [[2, 2], [1, 1], []], offered  # (1 left: each answer trimmed to it)
    requests = llm.requests(model)
    assert [LEFT.findall(system_of(body)) for body in requests] == [
        [("3", "3")], [("1", "3")], []]
    assert requests[-1]["tool_choice"] == "none"
    run = wait_until(lambda: [r for r in runs_of(sidecar, "budgeted") if r["state"] == "ended"],
                     "the run ends with its report")[0]
    detail = sidecar.get_json(f"/v1/runs/{run['id']}")
    assert (detail["signals"]["iterations"], detail["signals"]["tool_calls"]) == (3, 3)
    assert detail["terminal_state"] == "tool_limit_reached"


# -- legacy functions (Chat Completions' function_call) ----------------------------------------

FUNCTIONS = [TOOLS[0]["function"]]


def functions_loop(chat: openai.OpenAI, model: str, stream: bool, limit: int = 10
                   ) -> tuple[str, int, list[str]]:
    """An agent on the legacy shape, as older LangChain function agents and AutoGen 0.2 are:
    ``functions`` offered, the model's ``function_call`` run, its result sent back as a
    ``function`` message (a name, no call id; the second one says it failed). Returns its final
    output, how many functions it ran, and each answer's finish reason as the agent got it."""
    messages: list[Any] = [{"role": "system", "content": "You are a researcher."},
                           {"role": "user", "content": "Find the answer."}]
    ran, finishes = 0, []
    for _ in range(limit):
        if stream:
            content, name, arguments, finish = "", "", "", ""
            with chat.chat.completions.create(model=model, messages=messages,
                                              functions=FUNCTIONS, stream=True) as events:
                for chunk in events:
                    if not chunk.choices:
                        continue
                    delta = chunk.choices[0].delta
                    content += delta.content or ""
                    if delta.function_call is not None:
                        name += delta.function_call.name or ""
                        arguments += delta.function_call.arguments or ""
                    finish = chunk.choices[0].finish_reason or finish
        else:
            choice = chat.chat.completions.create(model=model, messages=messages,
                                                  functions=FUNCTIONS).choices[0]
            content, finish = choice.message.content or "", choice.finish_reason
            called = choice.message.function_call
            name, arguments = (called.name, called.arguments) if called else ("", "")
        finishes.append(finish)
        if not name:
            return content, ran, finishes
        ran += 1
        messages += [{"role": "assistant", "content": content or None,
                      "function_call": {"name": name, "arguments": arguments}},
                     {"role": "function", "name": name,
                      "content": "Error: no such page" if ran == 2 else f"result {ran}"}]
    raise AssertionError("the loop did not end")


@pytest.mark.parametrize("stream", [False, True])
def test_legacy_functions_are_counted_down_then_withdrawn(sidecar: RunningServer,
                                                          llm: FakeLLM, stream: bool) -> None:
    """An agent offered ``functions`` whose model answers with ``function_call``: its calls
    are the run's tool calls (each with the result its ``function`` message sent back), the
    countdown comes, and at the budget the functions are withdrawn (``function_call: none``,
    their definitions kept); the run ends at its budget with the report as its answer."""
    model = llm.script("legacy", looping("search", lambda i: {"q": f"page {i}"},
                                         answer_without_tools="REPORT: found pages 0-2"))
    output, ran, finishes = functions_loop(client(sidecar, "budgeted"), model, stream)
    assert (output, ran) == ("REPORT: found pages 0-2", 3)
    assert finishes == ["function_call"] * 3 + ["stop"]
    requests = llm.requests(model)
    assert len(requests) == 4
    for left, body in zip((3, 2, 1), requests, strict=False):
        assert f"[budget: {left} of 3 tool calls left" in system_of(body), (left, body)
        assert "function_call" not in body
    last = requests[-1]
    assert last["function_call"] == "none" and last["functions"] == FUNCTIONS
    assert "tools" not in last and "tool_choice" not in last
    assert "Tools are withdrawn" in system_of(last)
    run = wait_until(lambda: [r for r in runs_of(sidecar, "budgeted") if r["state"] == "ended"],
                     "the run ends with its report")[0]
    detail = sidecar.get_json(f"/v1/runs/{run['id']}")
    assert detail["signals"]["tool_calls"] == 3
    assert detail["signals"]["tools"] == {"search": 3}
    assert detail["has_final_answer"]
    assert detail["terminal_state"] == "tool_limit_reached"
    assert detail["signals"]["errors"] == 1  # the failed result its function message answered


@pytest.mark.parametrize("stream", [False, True])
def test_a_legacy_function_call_past_the_budget_never_reaches_the_agent(
        sidecar: RunningServer, llm: FakeLLM, stream: bool) -> None:
    """A model that calls a function though ``function_call`` is none: the call is trimmed
    from the final answer, whole or streamed, and the agent ends with the report."""
    model = llm.script("legacy-stubborn", lambda _i, body: Step(
        text="REPORT: done" if body.get("function_call") == "none" else None,
        tool_calls=(ToolCall("search", {"q": "again"}),)))
    output, ran, finishes = functions_loop(client(sidecar, "budgeted"), model, stream)
    assert (output, ran) == ("REPORT: done", 3)
    assert finishes[-1] == "stop"
    assert len(llm.requests(model)) == 4
    run = wait_until(lambda: [r for r in runs_of(sidecar, "budgeted") if r["state"] == "ended"],
                     "the run ends with its report")[0]
    assert sidecar.get_json(f"/v1/runs/{run['id']}")["signals"]["tool_calls"] == 3


# -- Anthropic Messages -------------------------------------------------------------------------

ANTHROPIC_TOOLS = [{"name": "search", "description": "Search.",
                    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]


def anthropic_loop(sidecar: RunningServer, model: str, agent: str, stream: bool,
                   limit: int = 10, **options: Any) -> tuple[str, int]:
    import anthropic  # here: only these tests need the SDK, not every process collecting them

    claude = anthropic.Anthropic(base_url=sidecar.url("model"), api_key=KEY, max_retries=0,
                                 default_headers={"x-watchdog-agent": agent})
    messages: list[Any] = [{"role": "user", "content": "Find the answer."}]
    ran = 0
    for _ in range(limit):
        if stream:
            with claude.messages.stream(model=model, max_tokens=512, system="You research.",
                                        messages=messages, tools=ANTHROPIC_TOOLS,
                                        **options) as events:
                message = events.get_final_message()
        else:
            message = claude.messages.create(model=model, max_tokens=512, system="You research.",
                                             messages=messages, tools=ANTHROPIC_TOOLS, **options)
        uses = [block for block in message.content if block.type == "tool_use"]
        text = "".join(block.text for block in message.content if block.type == "text")
        if not uses:
            return text, ran
        messages.append({"role": "assistant", "content": [b.model_dump() for b in message.content]})
        results = []
        for use in uses:
            ran += 1
            results.append({"type": "tool_result", "tool_use_id": use.id,
                            "content": f"result {ran}"})
        messages.append({"role": "user", "content": results})
    raise AssertionError("the loop did not end")


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_budget_counts_down_then_withdraws_tools(sidecar: RunningServer, llm: FakeLLM,
                                                           stream: bool) -> None:
    model = llm.script("claude-loop", looping("search", lambda i: {"q": f"page {i}"},
                                              answer_without_tools="REPORT: pages 0-2"))
    output, ran = anthropic_loop(sidecar, model, "budgeted", stream)
    assert (output, ran) == ("REPORT: pages 0-2", 3)
    requests = llm.requests(model)
    assert len(requests) == 4
    for left, body in zip((3, 2, 1), requests, strict=False):
        assert body["system"].startswith("You research.")
        assert f"[budget: {left} of 3 tool calls left" in body["system"]
        assert "tool_choice" not in body
    assert requests[-1]["tool_choice"] == {"type": "none"} and requests[-1]["tools"]
    assert "Tools are withdrawn" in requests[-1]["system"]
    run = wait_until(lambda: [r for r in runs_of(sidecar, "budgeted")
                              if r["state"] == "ended"], "the run ends with its report")[0]
    assert run["tool_calls"] == 3 and run["iterations"] == 4 and run["has_final_answer"]


@pytest.mark.parametrize("option", ["output_config", "output_format"])
def test_an_anthropic_final_request_with_a_json_format_asks_for_the_report_in_it(
        sidecar: RunningServer, llm: FakeLLM, option: str) -> None:
    """Messages' structured outputs (``output_config.format``, and the beta's
    ``output_format``), as the OpenAI APIs' response formats: the final request keeps the
    format and asks for the report within it."""
    answer_format = {"type": "json_schema",
                     "schema": REPORT_SCHEMA["json_schema"]["schema"]}  # type: ignore[index]
    report = json.dumps({"answer": "Searched pages 0-2."})
    model = llm.script(f"claude-schema-{option}", looping(
        "search", lambda i: {"q": f"page {i}"}, answer_without_tools=report))
    given = {"output_config": {"format": answer_format}} if option == "output_config" \
        else {"extra_body": {"output_format": answer_format}}
    output, ran = anthropic_loop(sidecar, model, "budgeted", False, **given)
    assert (output, ran) == (report, 3)
    final = llm.requests(model)[-1]
    assert final["tool_choice"] == {"type": "none"} and "Tools are withdrawn" in final["system"]
    assert STRUCTURED_REPORT in final["system"], final["system"]
    kept = final["output_config"]["format"] if option == "output_config" \
        else final["output_format"]
    assert kept == answer_format


def test_an_anthropic_request_whose_tool_choice_is_none_gets_no_countdown(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """Anthropic's ``tool_choice: {"type": "none"}`` withdraws the tools it keeps defined, as
    OpenAI's ``"none"`` does: that request goes on as sent (its system prompt, the cached
    prefix, unchanged), and the run's next request with tools counts down as before."""
    import anthropic  # (as anthropic_loop)

    model = llm.script("claude-aside", looping("search", lambda i: {"q": f"page {i}"},
                                               answer_without_tools="So far: page 0."))
    claude = anthropic.Anthropic(base_url=sidecar.url("model"), api_key=KEY, max_retries=0,
                                 default_headers={"x-watchdog-agent": "budgeted"})
    messages: list[Any] = [{"role": "user", "content": "Find the answer."}]
    first = claude.messages.create(model=model, max_tokens=512, system="You research.",
                                   messages=messages, tools=ANTHROPIC_TOOLS)
    (use,) = [block for block in first.content if block.type == "tool_use"]
    messages += [{"role": "assistant", "content": [b.model_dump() for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": "result 1"}]}]
    aside = claude.messages.create(model=model, max_tokens=512, system="You research.",
                                   messages=messages, tools=ANTHROPIC_TOOLS,
                                   tool_choice={"type": "none"})
    assert [block.text for block in aside.content if block.type == "text"] == \
        ["So far: page 0."]
    claude.messages.create(model=model, max_tokens=512, system="You research.",
                           messages=messages, tools=ANTHROPIC_TOOLS)
    requests = llm.requests(model)
    assert "[budget: 3 of 3 tool calls left" in requests[0]["system"]
    assert requests[1]["system"] == "You research.", requests[1]["system"]
    assert requests[1]["tool_choice"] == {"type": "none"}
    assert "[budget: 2 of 3 tool calls left" in requests[2]["system"]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_abort(stop_sidecar: RunningServer, llm: FakeLLM, stream: bool) -> None:
    model = llm.script("claude-stop", looping("search", lambda i: {"q": f"page {i}"}))
    output, ran = anthropic_loop(stop_sidecar, model, "stopper", stream)
    assert ran == 2 and len(llm.requests(model)) == 2
    assert "[stopped: two tool calls are enough]" in output


# -- OpenAI Responses ---------------------------------------------------------------------------

RESPONSES_TOOLS: list[Any] = [{"type": "function", "name": "search", "description": "Search.",
                               "parameters": {"type": "object",
                                              "properties": {"q": {"type": "string"}}}}]


def responses_loop(sidecar: RunningServer, model: str, agent: str, stream: bool,
                   limit: int = 10) -> tuple[str, int]:
    chat = client(sidecar, agent)
    items: list[Any] = [{"role": "user", "content": "Find the answer."}]
    ran = 0
    for _ in range(limit):
        if stream:
            with chat.responses.stream(model=model, instructions="You research.", input=items,
                                       tools=RESPONSES_TOOLS) as events:
                response = events.get_final_response()
        else:
            response = chat.responses.create(model=model, instructions="You research.",
                                             input=items, tools=RESPONSES_TOOLS)
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return response.output_text, ran
        for call_item in calls:
            ran += 1
            items.append({"type": "function_call", "call_id": call_item.call_id,
                          "name": call_item.name, "arguments": call_item.arguments})
            items.append({"type": "function_call_output", "call_id": call_item.call_id,
                          "output": f"result {ran}"})
    raise AssertionError("the loop did not end")


@pytest.mark.parametrize("stream", [False, True])
def test_responses_budget_counts_down_then_withdraws_tools(sidecar: RunningServer,
                                                           llm: FakeLLM, stream: bool) -> None:
    model = llm.script("resp-loop", looping("search", lambda i: {"q": f"page {i}"},
                                            answer_without_tools="REPORT: pages 0-2"))
    output, ran = responses_loop(sidecar, model, "budgeted", stream)
    assert (output, ran) == ("REPORT: pages 0-2", 3)
    requests = llm.requests(model)
    assert len(requests) == 4
    for left, body in zip((3, 2, 1), requests, strict=False):
        assert body["instructions"].startswith("You research.")
        assert f"[budget: {left} of 3 tool calls left" in body["instructions"]
    assert requests[-1]["tool_choice"] == "none" and requests[-1]["tools"]
    run = wait_until(lambda: [r for r in runs_of(sidecar, "budgeted")
                              if r["state"] == "ended"], "the run ends with its report")[0]
    assert run["tool_calls"] == 3 and run["iterations"] == 4 and run["has_final_answer"]


def leave_at_done_loop(sidecar: RunningServer, model: str, agent: str) -> tuple[str, int]:
    """A hand-written streaming agent that stops reading at ``data: [DONE]`` and closes its
    connection at once, not waiting for the stream's end (as many HTTP clients do)."""
    import http.client
    from urllib.parse import urlsplit

    address = urlsplit(sidecar.url("model"))
    messages: list[Any] = [{"role": "system", "content": "You research."},
                           {"role": "user", "content": "Find the answer."}]
    ran = 0
    for _ in range(10):
        text, calls = "", {}
        connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
        connection.request("POST", "/v1/chat/completions", json.dumps(
            {"model": model, "messages": messages, "tools": TOOLS, "stream": True}), {
            "Authorization": f"Bearer {KEY}", "x-watchdog-agent": agent,
            "Content-Type": "application/json"})
        events = connection.getresponse()
        for raw in events:
            line = raw.decode().strip()
            if line == "data: [DONE]":
                break
            for choice in json.loads(line.removeprefix("data: "))["choices"] if line else ():
                text += choice["delta"].get("content") or ""
                for part in choice["delta"].get("tool_calls") or ():
                    entry = calls.setdefault(part["index"], {"id": "", "name": "", "args": ""})
                    entry["id"] = part.get("id") or entry["id"]
                    entry["name"] += part.get("function", {}).get("name") or ""
                    entry["args"] += part.get("function", {}).get("arguments") or ""
        connection.close()  # at [DONE], the stream's end not waited for
        if not calls:
            return text, ran
        messages.append({"role": "assistant", "content": text or None, "tool_calls": [
            {"id": c["id"], "type": "function",
             "function": {"name": c["name"], "arguments": c["args"]}} for c in calls.values()]})
        for entry in calls.values():
            ran += 1
            messages.append({"role": "tool", "tool_call_id": entry["id"],
                             "content": f"result {ran}"})
    raise AssertionError("the loop did not end")


LATE = 0.5  # seconds an upstream keeps a stream open after its last event


@pytest.mark.parametrize("api", ["chat", "responses", "messages", "chat, left at [DONE]"])
def test_a_stream_whose_end_comes_late_is_counted_at_its_last_event(
        sidecar: RunningServer, llm: FakeLLM, api: str) -> None:
    """The upstream closes each stream LATE seconds after its last event (as through a slow
    proxy); the agent sends its next request once it has the last event, or leaves at it. The
    next request finds the call counted: the countdown true on each request, no call past the
    budget, the answer the agent's."""
    model = llm.script(f"late-{api}", looping("search", lambda i: {"q": f"page {i}"},
                                              answer_without_tools="REPORT: pages 0-2"),
                       linger=LATE)
    loop = {"chat": lambda: run_loop(client(sidecar, "budgeted"), model, True),
            "responses": lambda: responses_loop(sidecar, model, "budgeted", True),
            "messages": lambda: anthropic_loop(sidecar, model, "budgeted", True),
            "chat, left at [DONE]": lambda: leave_at_done_loop(sidecar, model, "budgeted")}[api]
    assert loop() == ("REPORT: pages 0-2", 3)
    requests = llm.requests(model)
    assert len(requests) == 4
    for left, body in zip((3, 2, 1), requests, strict=False):
        instructions = body.get("instructions") or body.get("system") or system_of(body)
        assert f"[budget: {left} of 3 tool calls left" in instructions


@pytest.mark.parametrize("stream", [False, True])
def test_responses_abort(stop_sidecar: RunningServer, llm: FakeLLM, stream: bool) -> None:
    model = llm.script("resp-stop", looping("search", lambda i: {"q": f"page {i}"}))
    output, ran = responses_loop(stop_sidecar, model, "stopper", stream)
    assert ran == 2 and len(llm.requests(model)) == 2
    assert "[stopped: two tool calls are enough]" in output


def echoing_loop(chat: openai.OpenAI, model: str, stream: bool, instructions: Any,
                 limit: int = 10) -> tuple[str, list[Any]]:
    """A Responses tool loop whose requests give ``instructions`` (``"absent"``: none) until an
    answer with no tool call: its text, and the ``instructions`` echoed by every response
    object it read (each streamed event's that carries one, or the whole response)."""
    items: list[Any] = [{"role": "user", "content": "Find the answer."}]
    more = {} if instructions == "absent" else {"instructions": instructions}
    echoed: list[Any] = []
    for _ in range(limit):
        if stream:
            with chat.responses.stream(model=model, input=items, tools=RESPONSES_TOOLS,
                                       **more) as events:  # type: ignore[arg-type]
                echoed += [event.response.instructions for event in events
                           if getattr(event, "response", None) is not None]
                response = events.get_final_response()
        else:
            response = chat.responses.create(model=model, input=items, tools=RESPONSES_TOOLS,
                                              **more)  # type: ignore[arg-type]
            echoed.append(response.instructions)
        if not went_on(items, response):
            return response.output_text, echoed
    raise AssertionError("the loop did not end")


def went_on(items: list[Any], response: Any) -> bool:
    """Whether a Responses answer called tools: then ``items`` goes on with each call and its
    result (``"result"``)."""
    calls = [item for item in response.output if item.type == "function_call"]
    for item in calls:
        items += [{"type": "function_call", "call_id": item.call_id, "name": item.name,
                   "arguments": item.arguments},
                  {"type": "function_call_output", "call_id": item.call_id,
                   "output": "result"}]
    return bool(calls)


# what a client may give as a Responses request's instructions: none, null, a string, items
GIVEN_INSTRUCTIONS = ("absent", None, "You research.",
                      [{"role": "developer", "content": "You research."}])


def read_echo(echoed: object) -> object:
    """An echoed ``instructions`` as the client sent it (the SDK reads input items as models)."""
    if isinstance(echoed, list):
        return [item.model_dump(exclude_none=True, exclude={"type"})
                if hasattr(item, "model_dump") else item for item in echoed]
    return echoed


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("instructions", GIVEN_INSTRUCTIONS,
                         ids=["absent", "null", "string", "items"])
def test_the_stop_answer_echoes_the_clients_instructions(
        stop_sidecar: RunningServer, llm: FakeLLM, stream: bool, instructions: Any) -> None:
    """The abort's answer is the endpoint's own (the upstream is not called): on the Responses
    API it echoes the ``instructions`` the client sent, as the upstream's answers do (the
    API echoes them; a client may read them back), in every response object of a stream too,
    never ``null`` for instructions given."""
    model = llm.script(f"stop-echo-{stream}-{GIVEN_INSTRUCTIONS.index(instructions)}",
                       looping("search", lambda i: {"q": f"page {i}"}))
    output, echoed = echoing_loop(client(stop_sidecar, "stopper"), model, stream,
                                  instructions)
    assert "[stopped: two tool calls are enough]" in output
    assert len(llm.requests(model)) == 2  # the third request, answered by the endpoint
    given = None if instructions == "absent" else instructions
    assert [read_echo(each) for each in echoed] == [given] * len(echoed), echoed


def json_format_loop(sidecar: RunningServer, model: str, api: str, kind: str,
                     stream: bool) -> str:
    """An agent whose answers must follow a JSON format (``kind``: ``json_object``, or
    REPORT_SCHEMA's strict schema), as each API asks for it, run until it answers: its answer's
    text, streamed or not, read by the SDK."""
    schema = REPORT_SCHEMA["json_schema"]
    if api == "messages":
        return anthropic_loop(sidecar, model, "stopper", stream, output_config={
            "format": {"type": "json_schema", "schema": schema["schema"]}})[0]  # type: ignore[index]
    chat = client(sidecar, "stopper")
    if api == "responses":
        text = {"format": {"type": kind, **(schema if kind == "json_schema" else {})}}
        items: list[Any] = [{"role": "user", "content": "Find the answer."}]
        for _ in range(5):
            response = respond(chat, stream, model=model, input=items, tools=RESPONSES_TOOLS,
                               text=text)
            if not went_on(items, response):
                return response.output_text
        raise AssertionError("the loop did not end")
    response_format = REPORT_SCHEMA if kind == "json_schema" else {"type": "json_object"}
    messages: list[Any] = [{"role": "user", "content": "Find the answer."}]
    for _ in range(5):
        content, asked = "", []
        if stream:
            for chunk in chat.chat.completions.create(
                    model=model, messages=messages, tools=TOOLS, stream=True,
                    response_format=response_format):  # type: ignore[arg-type]
                delta = chunk.choices[0].delta
                content += delta.content or ""
                asked += [part.index for part in delta.tool_calls or ()]
        else:
            message = chat.chat.completions.create(
                model=model, messages=messages, tools=TOOLS,
                response_format=response_format).choices[0].message  # type: ignore[arg-type]
            content = message.content or ""
            asked = list(range(len(message.tool_calls or ())))
        if not asked:
            return content
        calls = [{"id": f"call_{len(messages)}", "type": "function",
                  "function": {"name": "search", "arguments": "{}"}}]
        messages += [{"role": "assistant", "content": None, "tool_calls": calls},
                     {"role": "tool", "tool_call_id": calls[0]["id"], "content": "result"}]
    raise AssertionError("the loop did not end")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_an_abort_answers_a_json_object_request_with_a_json_object(
        stop_sidecar: RunningServer, llm: FakeLLM, api: str, stream: bool) -> None:
    """A request whose answer must be a JSON object (``response_format`` / ``text.format``
    ``json_object``) is answered, at an abort, with one that carries the stop note: the agent
    parses its final answer as it parses every answer, not a note in prose."""
    model = llm.script(f"json-stop-{api}", looping("search", lambda i: {"q": f"page {i}"}))
    output = json_format_loop(stop_sidecar, model, api, "json_object", stream)
    answer = json.loads(output)
    assert answer["code"] == "watchdog_aborted", answer
    assert "[stopped: two tool calls are enough]" in answer["message"], answer
    assert len(llm.requests(model)) == 2  # the third request never reached the upstream


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_an_abort_answers_a_schema_request_with_the_apis_error(
        stop_sidecar: RunningServer, llm: FakeLLM, api: str, stream: bool) -> None:
    """A request whose answer must follow the agent's own JSON schema has no honest answer
    carrying a stop note (the schema has only the agent's fields): at an abort it gets the
    API's error, as ``model_abort: error`` gives (HTTP 400, ``watchdog_aborted``, the note its
    message), which the SDK raises and does not retry, rather than prose its parser fails on."""
    import anthropic  # (as anthropic_loop)

    model = llm.script(f"schema-stop-{api}", looping("search", lambda i: {"q": f"page {i}"}))
    failed = anthropic.BadRequestError if api == "messages" else openai.BadRequestError
    with pytest.raises(failed) as failure:  # type: ignore[call-overload]
        json_format_loop(stop_sidecar, model, api, "json_schema", stream)
    assert failure.value.status_code == 400
    assert "watchdog_aborted" in str(failure.value.body), failure.value.body
    assert "[stopped: two tool calls are enough]" in failure.value.message
    assert len(llm.requests(model)) == 2


def stored_turn(chat: openai.OpenAI, model: str, task: Any, previous: str | None = None,
                conversation: str | None = None) -> tuple[Any, int]:
    """One turn of a conversation the server keeps (its last response, the tools it ran):
    each request sends only the new input, and the id of the response it continues — or the
    id of the ``conversation``, the same on every request."""
    more: dict[str, Any] = {"previous_response_id": previous} if previous else {}
    if conversation is not None:
        more = {"conversation": conversation}
    response = chat.responses.create(model=model, input=task, tools=RESPONSES_TOOLS, **more)
    ran = 0
    while any(item.type == "function_call" for item in response.output):
        outputs: list[Any] = []
        for item in response.output:
            if item.type == "function_call":
                ran += 1
                outputs.append({"type": "function_call_output", "call_id": item.call_id,
                                "output": f"result {ran}"})
        more = {"conversation": conversation} if conversation is not None else {
            "previous_response_id": response.id}
        response = chat.responses.create(model=model, input=outputs, tools=RESPONSES_TOOLS,
                                         **more)
        assert ran < 10
    return response, ran


def test_responses_previous_response_id_continues_the_run(sidecar: RunningServer,
                                                          llm: FakeLLM) -> None:
    """A conversation the server keeps: each request sends only the tool outputs and the id
    of the response it continues; it is the same run, counted and steered as one."""
    model = llm.script("stored", looping("search", lambda i: {"q": f"page {i}"},
                                         answer_without_tools="REPORT: stored"))
    chat = client(sidecar, "budgeted")
    response, ran = stored_turn(chat, model, "Find it.")
    assert (response.output_text, ran) == ("REPORT: stored", 3)
    requests = llm.requests(model)
    assert [f"[budget: {left} of 3" in (body.get("instructions") or "")
            for body, left in zip(requests, (3, 2, 1), strict=False)] == [True] * 3
    assert requests[-1]["tool_choice"] == "none"
    runs = wait_until(lambda: [r for r in runs_of(sidecar, "budgeted")
                               if r["state"] == "ended"], "the run ends")
    assert len(runs) == 1 and runs[0]["tool_calls"] == 3 and runs[0]["iterations"] == 4


def test_a_kept_conversations_shorter_requests_stay_in_its_run(sidecar: RunningServer,
                                                               llm: FakeLLM) -> None:
    """Requests by ``conversation`` send only their new items: two tool outputs, then one. The
    shorter request is the same run going on, not an agent that started over."""
    model = llm.script("kept-parallel", steps(
        Step(tool_calls=(ToolCall("search", {"q": "a"}), ToolCall("search", {"q": "b"}))),
        call("search", q="c"), answer("found")))
    chat = client(sidecar, "kept-parallel")
    response, ran = stored_turn(chat, model, "Find it.", conversation="conv_parallel")
    assert (response.output_text, ran) == ("found", 3)
    assert [len(body["input"]) for body in llm.requests(model)[1:]] == [2, 1]
    wait_until(lambda: [run for run in runs_of(sidecar, "kept-parallel")
                        if run["state"] == "ended"], "the run ends")
    runs = runs_of(sidecar, "kept-parallel")
    assert [(run["tool_calls"], run["iterations"], run["terminal_state"]) for run in runs] == [
        (3, 3, "completed")], runs


@pytest.mark.parametrize("by", ["previous_response_id", "conversation"])
def test_a_new_user_message_after_a_kept_conversations_run_ended_is_the_next_run(
        sidecar: RunningServer, llm: FakeLLM, by: str) -> None:
    """A conversation the server keeps, continued with a new user message once its run has
    ended (the OpenAI Agents SDK's ``previousResponseId`` or ``conversationId``, a chat app's
    next turn): the session's next run, with its own count, its countdown from the whole
    budget, and its model called. By ``conversation``, whose requests after the first carry no
    user message, each turn is one run (its id names the conversation)."""
    model = llm.script(f"stored-turns-{by}", looping("search", lambda i: {"q": f"page {i}"},
                                                     answer_without_tools="REPORT: stored"))
    chat = client(sidecar, "budgeted")
    kept = "conv_0123456789abcdef" if by == "conversation" else None
    first, ran = stored_turn(chat, model, "Find it.", conversation=kept)
    assert (first.output_text, ran) == ("REPORT: stored", 3)
    second, ran = stored_turn(chat, model, [{"role": "user", "content": "And the other one?"}],
                              None if kept else first.id, kept)
    assert (second.output_text, ran) == ("REPORT: stored", 3)
    requests = llm.requests(model)
    assert len(requests) == 8
    assert [LEFT.findall(body.get("instructions") or "") for body in requests] == [
        [("3", "3")], [("2", "3")], [("1", "3")], []] * 2
    assert [body.get("tool_choice") for body in requests] == [None, None, None, "none"] * 2
    runs = wait_until(lambda: len(r := [run for run in runs_of(sidecar, "budgeted")
                                        if run["state"] == "ended"]) == 2 and r,
                      "the conversation's two runs end")
    assert [(run["tool_calls"], run["iterations"], run["terminal_state"]) for run in runs] == [
        (3, 4, "tool_limit_reached")] * 2
    assert len({run["session"] for run in runs}) == 1 and runs[0]["session"]


@pytest.mark.parametrize("after_ms", [0, 20, 150])
def test_two_invocations_with_the_same_first_request_are_two_runs_with_their_own_budgets(
        sidecar: RunningServer, llm: FakeLLM, after_ms: int) -> None:
    """Staggered identical prompts (an eval harness, a job queue): invocation B sends the very
    same first request as A right after A's first answer was read, while A's tool runs. The
    answer A got was whole and readable, so B's request is no resend of A's: B is a run of its
    own, and each counts down from its own budget of 3 (not one run of 3 tool calls that winds
    both down)."""
    model = llm.script(f"staggered-{after_ms}", looping(
        "search", lambda i: {"q": f"page {i}"}, answer_without_tools="REPORT: staggered"))
    agent = f"staggered-{after_ms}"
    chat = openai.OpenAI(base_url=sidecar.url("model") + "/v1", api_key=KEY, max_retries=0,
                         default_headers={"x-watchdog-agent": agent,
                                          "x-watchdog-budget-tool-calls": "3"})

    def invocation(name: str) -> Iterator[int]:
        """One agent loop, a step per model call: yields the tool calls it ran so far."""
        messages: list[Any] = [{"role": "system", "content": "You are a researcher."},
                               {"role": "user", "content": "Find the answer."}]
        ran = 0
        for _ in range(8):
            message = chat.chat.completions.create(model=model, messages=messages,
                                                   tools=TOOLS).choices[0].message
            if not message.tool_calls:
                assert message.content == "REPORT: staggered", name
                return
            messages.append(message.model_dump(exclude_none=True))
            for tool_call in message.tool_calls:
                ran += 1
                messages.append({"role": "tool", "tool_call_id": tool_call.id,
                                 "content": f"{name} result {ran}"})
            yield ran

    a, b = invocation("A"), invocation("B")
    assert next(a) == 1  # A's first answer read, its tool run; its next request not yet sent
    time.sleep(after_ms / 1000)
    assert next(b) == 1  # B's first request, the same as A's first
    assert list(a) == [2, 3] and list(b) == [2, 3]
    lefts = [LEFT.findall(system_of(body)) for body in llm.requests(model)]
    # A 3, B 3, then A's 2, 1, report, then B's 2, 1, report: each its own countdown
    assert lefts == [[("3", "3")], [("3", "3")], [("2", "3")], [("1", "3")], [],
                     [("2", "3")], [("1", "3")], []], lefts
    runs = wait_until(lambda: len(r := [run for run in runs_of(sidecar, agent)
                                        if run["state"] == "ended"]) == 2 and r,
                      "both invocations' runs end")
    assert [(run["tool_calls"], run["iterations"], run["terminal_state"]) for run in runs] == [
        (3, 4, "tool_limit_reached")] * 2, runs


@pytest.mark.parametrize("bad", [0, 1])
def test_an_answer_the_client_could_not_read_and_asked_again_hands_nothing_over(
        tmp_path: Path, bad: int) -> None:
    """A streamed answer with a ``data:`` line that is not JSON: the endpoint passes it on
    whole, but the ``openai`` SDK raises on that line, and the agent sends the same request
    again. The calls of the answer it could not read were never run: the request that only
    resends the one before is a retry, not the run going on, and the budget (5) is spent by
    the calls the agent ran, each counted once. The first answer (``bad`` 0) too: its
    request sent again is the same run's, not a twin run (one left active, its calls
    pending, until ``run_end_timeout``)."""
    from tests.test_model_proxy import RawUpstream

    answers = iter(range(1000))

    def stream(handler: Any, seen: Any) -> None:
        body = json.loads(seen.body)
        number = next(answers)
        chunks = [{"id": f"chatcmpl-{number}", "object": "chat.completion.chunk",
                   "created": 1, "model": "m", "choices": [{"index": 0, "delta": delta,
                                                           "finish_reason": finish}]}
                  for delta, finish in (
                      ({"role": "assistant", "tool_calls": [
                          {"index": slot, "id": f"call-{number}-{slot}", "type": "function",
                           "function": {"name": "search",
                                        "arguments": json.dumps({"q": f"{number}.{slot}"})}}
                          for slot in range(2)]} if body.get("tool_choice") != "none"
                       else {"role": "assistant", "content": "REPORT"}, None),
                      ({}, "tool_calls" if body.get("tool_choice") != "none" else "stop"))]
        events = [b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks]
        if number == bad:  # a line the client cannot read, at the answer's end
            events.append(b"data: not json\n\n")
        events.append(b"data: [DONE]\n\n")
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Content-Length", str(sum(map(len, events))))
        handler.end_headers()
        handler.wfile.write(b"".join(events))

    raw = RawUpstream(stream)
    try:
        config = sidecar_config(tmp_path / "state", model_address="127.0.0.1:0",
                                model_upstream=raw.base + "/v1")
        with running_server(config) as server:
            chat = openai.OpenAI(base_url=server.url("model") + "/v1", api_key=KEY,
                                 max_retries=0, default_headers={
                                     "x-watchdog-agent": "unread",
                                     "x-watchdog-budget-tool-calls": "5"})
            messages: list[Any] = [{"role": "user", "content": "Find it."}]
            handed, ran, failed = [], 0, 0
            opened: list[Any] = []  # the stream that failed, open until the test's end
            for _ in range(8):
                calls: dict[int, dict[str, str]] = {}
                content = ""
                events = chat.chat.completions.create(model="m", messages=messages,
                                                      tools=TOOLS, stream=True)
                try:  # (the stream is left open, as by an agent that reads it in a loop)
                    for chunk in events:
                        delta = chunk.choices[0].delta if chunk.choices else None
                        content += (delta.content or "") if delta else ""
                        for part in (delta.tool_calls or ()) if delta else ():
                            entry = calls.setdefault(part.index, {"id": "", "args": ""})
                            entry["id"] = part.id or entry["id"]
                            entry["args"] += part.function.arguments or "" \
                                if part.function else ""
                except json.JSONDecodeError:  # the SDK cannot read the answer: asked again
                    failed += 1
                    opened.append(events)
                    continue
                handed.append(len(calls))
                if not calls:
                    break
                messages.append({"role": "assistant", "content": None, "tool_calls": [
                    {"id": call["id"], "type": "function",
                     "function": {"name": "search", "arguments": call["args"]}}
                    for call in calls.values()]})
                for call in calls.values():
                    ran += 1
                    messages.append({"role": "tool", "tool_call_id": call["id"],
                                     "content": f"result {ran}"})
            assert failed == 1 and content == "REPORT"
            assert (handed, ran) == ([2, 2, 1, 0], 5)
            run = wait_until(lambda: next((r for r in server.get_json(
                "/v1/runs?limit=10")["runs"] if r["agent"] == "unread"
                and r["state"] == "ended"), None), "the run ended")
            assert (run["iterations"], run["tool_calls"]) == (5, 5), run
            runs = server.get_json("/v1/runs?agent=unread")["runs"]
            assert [r["id"] for r in runs] == [run["id"]], runs  # no twin
    finally:
        raw.close()
