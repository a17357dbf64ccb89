"""Steering at the decision point with the real OpenAI Agents SDK (DESIGN §8).

The SDK's chat-completions model talks to the scripted model server, which records every
request; OpenInference turns the SDK's traces into OTel spans exported to a real sidecar with
the client's usual batch delay. Nothing waits for a directive.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from agent_watchdog_client import Watchdog
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

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
    failing,
    instructions,
    searching,
)
from tests.harness import RunningServer, http_request, running_server, sidecar_config

EXPORT_DELAY_MS = 200


@pytest.fixture
def provider(sidecar: RunningServer) -> Iterator[TracerProvider]:
    # the SDK imported here and in the tests, not by every test process that collects this module
    from agent_watchdog_client.adapters.openai_agents import instrument_openai_agents
    from agents import set_tracing_disabled

    provider = TracerProvider(resource=Resource.create({"service.name": "steering-oa"}))
    provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=sidecar.otlp_http + "/v1/traces"),
        schedule_delay_millis=EXPORT_DELAY_MS))
    set_tracing_disabled(False)
    instrumentor = instrument_openai_agents(provider)
    yield provider
    instrumentor.uninstrument()
    provider.shutdown()


def run_agent(llm: FakeLLM, model: str, tools: list[Any]) -> Any:
    from agent_watchdog_client.adapters.openai_agents import WatchdogHooks, steered
    from agents import Agent, OpenAIChatCompletionsModel, Runner
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=llm.base_url, api_key="sk-fake")
    agent = steered(Agent(name="explorer", instructions="You are a careful research agent.",
                          model=OpenAIChatCompletionsModel(model, openai_client=client),
                          tools=tools))
    return asyncio.run(Runner.run(agent, "Find the file.", hooks=WatchdogHooks(),
                                  max_turns=40))


@pytest.mark.parametrize("latency", LATENCIES, ids=LATENCY_IDS)
def test_budget_countdown_cap_and_report(sidecar: RunningServer, llm: FakeLLM,
                                         provider: TracerProvider, latency: float) -> None:
    from agents import function_tool

    model = llm.script(f"oa-budget-{latency}", searching(), delay=latency)
    ran: list[str] = []

    @function_tool
    def search(q: str) -> str:
        ran.append(q)
        return f"2 results for {q}"

    wd = Watchdog(sidecar.api, tracer_provider=provider)
    with wd.run(agent="explorer", max_tool_calls=10) as run:
        result = run_agent(llm, model, [search])
    wd.close()

    requests = llm.requests(model)
    assert len(ran) == 10 and len(requests) == 11
    check_countdown(requests, lambda index: index, 10)
    check_final(requests)
    assert result.final_output == REPORT and run.report_text == REPORT
    detail = ended(sidecar, run.id, provider.force_flush)
    assert detail["terminal_state"] == "tool_limit_reached"
    assert detail["has_final_answer"] is True
    assert detail["signals"]["tool_calls"] == 10


@pytest.mark.parametrize("latency", LATENCIES, ids=LATENCY_IDS)
def test_tool_cycle_wind_down_before_the_next_tool_call(
        sidecar: RunningServer, llm: FakeLLM, provider: TracerProvider, latency: float) -> None:
    from agents import function_tool

    model = llm.script(f"oa-cycle-{latency}", cycling(), delay=latency)
    ran: list[str] = []

    @function_tool(name_override="list")
    def list_dir(dir: str) -> str:
        ran.append("list")
        return "a.txt b.txt"

    @function_tool
    def read(path: str) -> str:
        ran.append("read")
        return "nothing useful"

    wd = Watchdog(sidecar.api, tracer_provider=provider)
    with wd.run(agent="explorer", max_tool_calls=50) as run:
        result = run_agent(llm, model, [list_dir, read])
    wd.close()

    check_grace(llm.requests(model), len(ran))
    assert result.final_output == REPORT and run.report_text == REPORT
    detail = ended(sidecar, run.id, provider.force_flush)
    assert detail["terminal_state"] == "loop_detected"
    assert detail["has_final_answer"] is True


@pytest.mark.parametrize("latency", LATENCIES, ids=LATENCY_IDS)
def test_error_loop_abort_before_the_next_tool_call(
        sidecar: RunningServer, llm: FakeLLM, provider: TracerProvider, latency: float) -> None:
    from agents import function_tool

    model = llm.script(f"oa-errors-{latency}", failing(), delay=latency)
    ran: list[str] = []

    @function_tool
    def fetch(url: str) -> str:
        ran.append(url)
        raise ConnectionError(f"connection refused: {url}")

    wd = Watchdog(sidecar.api, tracer_provider=provider)
    with wd.run(agent="explorer", max_tool_calls=50) as run:
        result = run_agent(llm, model, [fetch])
    wd.close()

    requests = llm.requests(model)
    assert len(ran) == 5 and len(requests) == 6
    check_final(requests)
    assert "Error loop: the same error 5 times" in instructions(requests[-1])
    assert result.final_output == REPORT
    detail = ended(sidecar, run.id, provider.force_flush)
    assert detail["terminal_state"] == "loop_detected"
    assert detail["has_final_answer"] is True


def test_sidecar_killed_mid_run_keeps_the_local_cap(llm: FakeLLM, tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    """The sidecar dies at the agent's 5th model request: the agent goes on with its own count
    — the same countdown, no tool past the budget, the report — and says so once."""
    from agent_watchdog_client.adapters.openai_agents import instrument_openai_agents
    from agents import function_tool, set_tracing_disabled

    stack = ExitStack()
    sidecar = stack.enter_context(running_server(sidecar_config(tmp_path / "state")))
    model = llm.script("oa-killed", searching(), delay=0.02,
                       on_request=lambda index: index == 4 and stack.close())
    provider = TracerProvider(resource=Resource.create({"service.name": "steering-oa"}))
    provider.add_span_processor(BatchSpanProcessor(  # retries to the dead sidecar: 2 s at most
        OTLPSpanExporter(endpoint=sidecar.otlp_http + "/v1/traces", timeout=2),
        schedule_delay_millis=EXPORT_DELAY_MS))
    set_tracing_disabled(False)
    instrumentor = instrument_openai_agents(provider)
    ran: list[str] = []

    @function_tool
    def search(q: str) -> str:
        ran.append(q)
        return f"2 results for {q}"

    wd = Watchdog(sidecar.api, tracer_provider=provider)
    try:
        with caplog.at_level(logging.WARNING, logger="agent_watchdog_client"), \
                wd.run(agent="explorer", max_tool_calls=10) as run:
            result = run_agent(llm, model, [search])
    finally:
        wd.close()
        instrumentor.uninstrument()
        provider.shutdown()

    requests = llm.requests(model)
    assert len(ran) == 10 and len(requests) == 11
    check_countdown(requests, lambda index: index, 10)
    check_final(requests)
    assert result.final_output == REPORT and run.report_text == REPORT
    unreachable = [r for r in caplog.records if "sidecar unreachable" in r.getMessage()]
    assert len(unreachable) == 1, [r.getMessage() for r in unreachable]


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "streamed"])
def test_an_abort_during_a_model_call_refuses_the_calls_it_asked_for(
        sidecar: RunningServer, llm: FakeLLM, provider: TracerProvider, streamed: bool) -> None:
    """An abort decided while the model answers the 2nd request (three checkpoints without
    progress, posted then): the answer's tool call is refused ("Not run"), the next request is
    the final one with the report prompt — the SDK is not made to raise ModelBehaviorError
    ("Tool search is currently disabled") for a call asked for before the stop."""
    from agent_watchdog_client.adapters.openai_agents import WatchdogHooks, steered
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from openai import AsyncOpenAI

    runs: list[Any] = []

    def abort_now(index: int) -> None:
        if index != 1:
            return
        run = runs[0]
        for _ in range(3):
            status, _body = http_request(
                "POST", f"{sidecar.api}/v1/sessions/{run.session}/checkpoints",
                json.dumps({"remaining": "the same", "run_id": run.id}).encode())
            assert status == 200
        assert run.board.wait_for(1, 10)  # the listener has the abort before the answer

    model = llm.script(f"oa-abort-mid-call-{streamed}", searching(), on_request=abort_now)
    ran: list[str] = []

    @function_tool
    def search(q: str) -> str:
        ran.append(q)
        return f"2 results for {q}"

    client = AsyncOpenAI(base_url=llm.base_url, api_key="sk-fake")
    agent = steered(Agent(name="explorer", instructions="You are a careful research agent.",
                          model=OpenAIChatCompletionsModel(model, openai_client=client),
                          tools=[search]))

    async def main() -> Any:
        if not streamed:
            return (await Runner.run(agent, "Find the file.", hooks=WatchdogHooks())).final_output
        result = Runner.run_streamed(agent, "Find the file.", hooks=WatchdogHooks())
        async for _event in result.stream_events():
            pass
        return result.final_output

    wd = Watchdog(sidecar.api, tracer_provider=provider)
    with wd.run(agent="explorer", max_tool_calls=20, session=f"oa-mid-{streamed}") as run:
        runs.append(run)
        output = asyncio.run(main())
    wd.close()

    requests = llm.requests(model)
    assert len(ran) == 1 and len(requests) == 3
    check_final(requests)
    assert "No progress across 2 checkpoints" in instructions(requests[-1])
    assert "Not run: No progress across" in json.dumps(requests[-1]["messages"][-1])
    assert output == REPORT and run.report_text == REPORT
    detail = ended(sidecar, run.id, provider.force_flush)
    assert detail["terminal_state"] == "intervention_required"
    assert detail["has_final_answer"] is True
    assert detail["signals"]["tool_calls"] == 1  # the refused call's span counts no call
