"""Steering a home-grown loop with the framework-free pair ``run.before_model_call()`` /
``run.before_tool_call()`` (DESIGN §8): the OpenAI client against the scripted model server,
spans exported to a real sidecar by the client's own ``setup_tracing``, no waiting."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agent_watchdog_client import ToolRefused, Watchdog
from openai import OpenAI
from opentelemetry import trace

from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.steering import (
    LATENCIES,
    LATENCY_IDS,
    REPORT,
    check_countdown,
    check_final,
    check_grace,
    cycling,
    ended,
    searching,
)
from tests.harness import RunningServer
from tests.ports import free_port

SEARCH = {"type": "function", "function": {"name": "search", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}
LIST = {"type": "function", "function": {"name": "list", "parameters": {
    "type": "object", "properties": {"dir": {"type": "string"}}, "required": ["dir"]}}}
READ = {"type": "function", "function": {"name": "read", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}}


def agent_loop(client: OpenAI, model: str, wd: Watchdog, ran: list[str],
               tools: list[dict[str, Any]] | None = None) -> str:
    """The README's home-grown loop: ask, run the tools asked for, until an answer."""
    tracer = wd.tracer()
    messages: list[Any] = [{"role": "user", "content": "Find the file."}]
    while True:
        turn = wd_run().before_model_call()
        system = "You are a careful research agent.\n\n" + turn.instructions
        with tracer.start_as_current_span("chat", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.request.model": model}):
            response = client.chat.completions.create(
                model=model, messages=[{"role": "system", "content": system}, *messages],
                tools=[] if turn.final else (tools or [SEARCH]))
        message = response.choices[0].message
        if not message.tool_calls:
            wd_run().set_final_answer(message.content or "")
            return message.content or ""
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            arguments = json.loads(call.function.arguments)
            with tracer.start_as_current_span(f"execute_tool {call.function.name}", attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": call.function.name,
                    "gen_ai.tool.call.arguments": call.function.arguments}):
                try:
                    wd_run().before_tool_call(call.function.name)
                    ran.append(str(next(iter(arguments.values()))))
                    result = f"2 results for {ran[-1]}"
                except ToolRefused as refused:
                    result = refused.message
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


def wd_run() -> Any:
    from agent_watchdog_client import current_run

    run = current_run()
    assert run is not None
    return run


@pytest.mark.parametrize("latency", LATENCIES, ids=LATENCY_IDS)
def test_home_grown_loop_countdown_cap_and_report(sidecar: RunningServer, llm: FakeLLM,
                                                  latency: float) -> None:
    model = llm.script(f"home-budget-{latency}", searching(), delay=latency)
    wd = Watchdog(sidecar.api)
    provider = wd.setup_tracing(service_name="home-grown", endpoint=sidecar.otlp_http
                                + "/v1/traces", set_global=False)
    ran: list[str] = []
    client = OpenAI(base_url=llm.base_url, api_key="sk-fake")
    with wd.run(agent="explorer", max_tool_calls=10) as run:
        output = agent_loop(client, model, wd, ran)
    wd.close()

    requests = llm.requests(model)
    assert len(ran) == 10 and len(requests) == 11
    check_countdown(requests, lambda index: index, 10)
    check_final(requests)
    assert output == REPORT and run.report_text == REPORT
    detail = ended(sidecar, run.id, provider.force_flush)
    assert detail["terminal_state"] == "tool_limit_reached"
    assert detail["has_final_answer"] is True
    assert detail["signals"]["tool_calls"] == 10
    provider.shutdown()
    assert trace.get_tracer_provider() is not provider


@pytest.mark.parametrize("latency", LATENCIES, ids=LATENCY_IDS)
def test_home_grown_loop_tool_cycle_grace_is_a_hard_cap(sidecar: RunningServer, llm: FakeLLM,
                                                        latency: float) -> None:
    model = llm.script(f"home-cycle-{latency}", cycling(), delay=latency)
    wd = Watchdog(sidecar.api)
    provider = wd.setup_tracing(service_name="home-grown", endpoint=sidecar.otlp_http
                                + "/v1/traces", set_global=False)
    ran: list[str] = []
    client = OpenAI(base_url=llm.base_url, api_key="sk-fake")
    with wd.run(agent="explorer", max_tool_calls=50) as run:
        output = agent_loop(client, model, wd, ran, [LIST, READ])
    wd.close()

    check_grace(llm.requests(model), len(ran))
    assert output == REPORT and run.report_text == REPORT
    detail = ended(sidecar, run.id, provider.force_flush)
    assert detail["terminal_state"] == "loop_detected"
    assert detail["has_final_answer"] is True
    provider.shutdown()



def test_home_grown_loop_stop_at_the_budget_reaches_the_sidecar_on_the_spans(
        sidecar: RunningServer, llm: FakeLLM) -> None:
    """No sync gets through (the control API cannot be reached: the sidecar down or restarting
    just then), the spans do, and the loop gives its tool calls no span (the client counts
    them at ``before_tool_call``): the run's own span, its agent span, says the client stopped
    it at its budget, so the sidecar does not read an answered run that completed."""
    model = llm.script("home-stop-on-spans", searching())
    wd = Watchdog(f"http://127.0.0.1:{free_port()}")
    provider = wd.setup_tracing(service_name="home-grown", endpoint=sidecar.otlp_http
                                + "/v1/traces", set_global=False)
    client = OpenAI(base_url=llm.base_url, api_key="sk-fake")
    ran = 0
    with wd.run(agent="explorer", max_tool_calls=3) as run:
        messages: list[Any] = [{"role": "user", "content": "Find the file."}]
        while True:
            turn = run.before_model_call()
            with wd.tracer().start_as_current_span("chat", attributes={
                    "gen_ai.operation.name": "chat", "gen_ai.request.model": model}):
                message = client.chat.completions.create(
                    model=model, messages=[{"role": "system", "content": turn.instructions},
                                           *messages],
                    tools=[] if turn.final else [SEARCH]).choices[0].message
            if not message.tool_calls:
                run.set_final_answer(message.content or "")
                break
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                try:
                    run.before_tool_call(call.function.name)
                    ran += 1
                    result = "2 results"
                except ToolRefused as refused:
                    result = refused.message
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    wd.close()

    assert ran == 3 and run.report_text == REPORT
    detail = ended(sidecar, run.id, provider.force_flush)
    assert detail["terminal_state"] == "tool_limit_reached"
    assert detail["terminal_reason"] == "max_tool_calls"
    assert detail["has_final_answer"] is True
    provider.shutdown()
