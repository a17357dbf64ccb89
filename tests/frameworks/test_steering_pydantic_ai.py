"""Steering at the decision point with a real pydantic-ai agent (DESIGN §8).

pydantic-ai's OpenAI model talks to the scripted model server, which records every request;
spans go to a real sidecar through the real OTLP exporter with its usual batch delay, and
nothing waits for a directive: each model request must already show what every earlier span
caused (the client syncs), the tool budget holds in the agent process, and the last request
asks for the report with no tools.
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from agent_watchdog_client import Watchdog
from agent_watchdog_client.adapters.pydantic_ai import WatchdogCapability
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from pydantic_ai import Agent, InstrumentationSettings
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.exceptions import ModelRetry, UsageLimitExceeded
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import UsageLimits

from tests.frameworks import fakellm
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
from tests.harness import RunningServer, running_server, sidecar_config
from tests.ports import free_port

EXPORT_DELAY_MS = 200  # the client's default batch delay: spans reach the sidecar late


def tracer_provider(otlp_http: str, timeout: float | None = None) -> TracerProvider:
    """``timeout``: the exporter's, retries included (its default: 10 s)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "steering-pyd"}))
    provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=otlp_http + "/v1/traces", timeout=timeout),
        schedule_delay_millis=EXPORT_DELAY_MS))
    return provider


@pytest.fixture
def provider(sidecar: RunningServer) -> Iterator[TracerProvider]:
    provider = tracer_provider(sidecar.otlp_http)
    yield provider
    provider.shutdown()


def agent_on(llm: FakeLLM, model: str, provider: TracerProvider) -> Agent[None, str]:
    chat = OpenAIChatModel(model, provider=OpenAIProvider(base_url=llm.base_url,
                                                          api_key="sk-fake"))
    return Agent(chat, name="explorer", instructions="You are a careful research agent.",
                 capabilities=[Instrumentation(settings=InstrumentationSettings(
                     tracer_provider=provider)), WatchdogCapability()])


def with_search(agent: Agent[None, str], ran: list[str]) -> None:
    @agent.tool_plain
    def search(q: str) -> str:
        ran.append(q)
        return f"2 results for {q}: /srv/{q.replace(' ', '_')}.txt"


@pytest.mark.parametrize("latency", LATENCIES, ids=LATENCY_IDS)
def test_budget_countdown_cap_and_report(sidecar: RunningServer, llm: FakeLLM,
                                         provider: TracerProvider, latency: float) -> None:
    model = llm.script(f"pyd-budget-{latency}", searching(), delay=latency)
    agent = agent_on(llm, model, provider)
    ran: list[str] = []
    with_search(agent, ran)
    wd = Watchdog(sidecar.api, tracer_provider=provider)
    with wd.run(agent="explorer", max_tool_calls=10) as run:
        result = agent.run_sync("Find the file.")
    wd.close()

    requests = llm.requests(model)
    assert len(ran) == 10 and len(requests) == 11
    check_countdown(requests, lambda index: index, 10)
    check_final(requests)
    assert "[budget: all 10 tool calls used" in instructions(requests[-1])
    assert result.output == REPORT and run.report_text == REPORT
    detail = ended(sidecar, run.id, provider.force_flush)
    assert detail["terminal_state"] == "tool_limit_reached"
    assert detail["has_final_answer"] is True
    assert detail["signals"]["tool_calls"] == 10  # every span counted once (sync + OTLP)
    assert detail["signals"]["iterations"] == 11


@pytest.mark.parametrize("latency", LATENCIES, ids=LATENCY_IDS)
def test_tool_cycle_wind_down_before_the_next_tool_call(
        sidecar: RunningServer, llm: FakeLLM, provider: TracerProvider, latency: float) -> None:
    model = llm.script(f"pyd-cycle-{latency}", cycling(), delay=latency)
    agent = agent_on(llm, model, provider)
    ran: list[str] = []

    @agent.tool_plain
    def list(dir: str) -> str:
        ran.append("list")
        return "a.txt b.txt"

    @agent.tool_plain
    def read(path: str) -> str:
        ran.append("read")
        return "nothing useful"

    wd = Watchdog(sidecar.api, tracer_provider=provider)
    with wd.run(agent="explorer", max_tool_calls=50) as run:
        result = agent.run_sync("Find the file.")
    wd.close()

    check_grace(llm.requests(model), len(ran))
    assert result.output == REPORT and run.report_text == REPORT
    detail = ended(sidecar, run.id, provider.force_flush)
    assert detail["terminal_state"] == "loop_detected"
    assert detail["terminal_reason"] == "tool-cycle"
    assert detail["has_final_answer"] is True
    assert detail["signals"]["tool_calls"] == 10
    assert [d["escalation"] for d in detail["directives"] if d["rule"] == "tool-cycle"] == [False]


@pytest.mark.parametrize("latency", LATENCIES, ids=LATENCY_IDS)
def test_error_loop_abort_before_the_next_tool_call(
        sidecar: RunningServer, llm: FakeLLM, provider: TracerProvider, latency: float) -> None:
    model = llm.script(f"pyd-errors-{latency}", failing(), delay=latency)
    agent = agent_on(llm, model, provider)
    ran: list[str] = []

    @agent.tool_plain(retries=20)
    def fetch(url: str) -> str:
        ran.append(url)
        raise ModelRetry(f"connection refused: {url}")

    wd = Watchdog(sidecar.api, tracer_provider=provider)
    with wd.run(agent="explorer", max_tool_calls=50) as run:
        result = agent.run_sync("Fetch the data.")
    wd.close()

    requests = llm.requests(model)
    assert len(ran) == 5 and len(requests) == 6  # the 5th identical error stops the run
    check_final(requests)
    assert "Error loop: the same error 5 times" in instructions(requests[-1])
    assert result.output == REPORT
    detail = ended(sidecar, run.id, provider.force_flush)
    assert detail["terminal_state"] == "loop_detected"
    assert detail["has_final_answer"] is True


@pytest.mark.parametrize("latency", [0.0, 0.02], ids=["0ms", "20ms"])
def test_without_a_sidecar_the_cap_and_countdown_are_local(
        llm: FakeLLM, latency: float, caplog: pytest.LogCaptureFixture) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    provider = tracer_provider(dead)
    model = llm.script(f"pyd-alone-{latency}", searching(), delay=latency)
    agent = agent_on(llm, model, provider)
    ran: list[str] = []
    with_search(agent, ran)
    wd = Watchdog(dead, tracer_provider=provider)
    with caplog.at_level(logging.WARNING, logger="agent_watchdog_client"), \
            wd.run(agent="explorer", max_tool_calls=10) as run:
        result = agent.run_sync("Find the file.")
    wd.close()
    provider.shutdown()

    requests = llm.requests(model)
    assert len(ran) == 10 and len(requests) == 11
    check_countdown(requests, lambda index: index, 10)
    check_final(requests)
    assert result.output == REPORT and run.report_text == REPORT
    unreachable = [r for r in caplog.records if "sidecar unreachable" in r.getMessage()]
    assert len(unreachable) == 1, [r.getMessage() for r in unreachable]


def test_sidecar_killed_mid_run_keeps_the_local_cap(
        llm: FakeLLM, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = llm.script("pyd-killed", searching(), delay=0.02)
    stack = ExitStack()
    sidecar = stack.enter_context(running_server(sidecar_config(tmp_path / "state")))
    # the exporter's retries to the dead sidecar bounded by 2 s: the shutdown waits for them
    provider = tracer_provider(sidecar.otlp_http, timeout=2)
    agent = agent_on(llm, model, provider)
    ran: list[str] = []

    @agent.tool_plain
    def search(q: str) -> str:
        ran.append(q)
        if len(ran) == 4:
            stack.close()  # the sidecar dies while the agent works
        return f"results for {q}"

    wd = Watchdog(sidecar.api, tracer_provider=provider)
    with caplog.at_level(logging.WARNING, logger="agent_watchdog_client"), \
            wd.run(agent="explorer", max_tool_calls=10) as run:
        result = agent.run_sync("Find the file.")
    wd.close()
    provider.shutdown()

    requests = llm.requests(model)
    assert len(ran) == 10 and len(requests) == 11
    check_countdown(requests, lambda index: index, 10)
    check_final(requests)
    assert result.output == REPORT and run.report_text == REPORT
    unreachable = [r for r in caplog.records if "sidecar unreachable" in r.getMessage()]
    assert len(unreachable) == 1, [r.getMessage() for r in unreachable]


def test_the_local_stop_at_the_budget_reaches_the_sidecar_on_the_spans(
        sidecar: RunningServer, llm: FakeLLM, provider: TracerProvider) -> None:
    """The control API cannot be reached (no sync, no announcement: the sidecar down or
    restarting just then) but the spans are exported: the sidecar still records the client's
    stop at the budget, from the agent span — not an answered run that completed."""
    model = llm.script("pyd-stop-on-spans", searching())
    agent = agent_on(llm, model, provider)
    ran: list[str] = []
    with_search(agent, ran)
    wd = Watchdog(f"http://127.0.0.1:{free_port()}", tracer_provider=provider)
    with wd.run(agent="explorer", max_tool_calls=4) as run:
        result = agent.run_sync("Find the file.")
    wd.close()

    assert len(ran) == 4 and result.output == REPORT
    check_final(llm.requests(model))
    detail = ended(sidecar, run.id, provider.force_flush)
    assert detail["terminal_state"] == "tool_limit_reached"
    assert detail["terminal_reason"] == "max_tool_calls"
    assert detail["has_final_answer"] is True
    assert detail["signals"]["tool_calls"] == 4


def test_calls_refused_past_the_budget_are_not_counted_by_the_sidecar(
        sidecar: RunningServer, llm: FakeLLM, provider: TracerProvider) -> None:
    """Three calls per answer, a budget of 7: 3 + 3 run, then 1 of the third answer's three;
    pydantic-ai still traces the two refused calls (their result is the refusal), and the
    sidecar counts the 7 calls that ran, as the client does — not 9."""
    def three_searches(index: int, body: dict[str, Any]) -> fakellm.Step:
        if not body.get("tools"):
            return fakellm.answer(REPORT)
        return fakellm.Step(tool_calls=tuple(
            fakellm.ToolCall("search", {"q": f"term {index}-{k}"}) for k in range(3)))

    model = llm.script("pyd-parallel-refused", three_searches)
    agent = agent_on(llm, model, provider)
    ran: list[str] = []
    with_search(agent, ran)
    wd = Watchdog(sidecar.api, tracer_provider=provider)
    with wd.run(agent="explorer", max_tool_calls=7) as run:
        result = agent.run_sync("Find the file.")
    wd.close()

    assert len(ran) == 7 and result.output == REPORT
    check_final(llm.requests(model))
    detail = ended(sidecar, run.id, provider.force_flush)
    assert detail["terminal_state"] == "tool_limit_reached"
    assert detail["signals"]["tool_calls"] == 7
    assert detail["signals"]["tools"] == {"search": 7}


@pytest.mark.parametrize("copied", [False, True], ids=["plain-thread", "context-copied"])
def test_an_agent_in_a_thread_outside_the_runs_context_is_said_once(
        sidecar: RunningServer, llm: FakeLLM, provider: TracerProvider,
        caplog: pytest.LogCaptureFixture, copied: bool) -> None:
    """``threading.Thread`` starts with an empty context: an agent run in one inside
    ``with wd.run(...)`` is not that run's (no countdown, no cap) — the client says so once,
    with the ways out; started with the context copied, it is steered and capped."""
    model = llm.script(f"pyd-thread-{copied}", searching())
    agent = agent_on(llm, model, provider)
    ran: list[str] = []
    with_search(agent, ran)
    wd = Watchdog(sidecar.api, tracer_provider=provider)
    outputs: list[str] = []

    def work() -> None:
        try:  # (uncapped outside the run: pydantic-ai's own limit ends it)
            outputs.append(agent.run_sync("Find the file.", usage_limits=UsageLimits(
                tool_calls_limit=8)).output)
        except UsageLimitExceeded:
            outputs.append("stopped by pydantic-ai")

    with caplog.at_level(logging.WARNING, logger="agent_watchdog_client"), \
            wd.run(agent="explorer", max_tool_calls=4):
        if copied:
            thread = threading.Thread(target=contextvars.copy_context().run, args=(work,))
        else:
            thread = threading.Thread(target=work)
        thread.start()
        thread.join()
    wd.close()

    said = [r.getMessage() for r in caplog.records if "outside any run" in r.getMessage()]
    if copied:
        assert len(ran) == 4 and outputs == [REPORT] and said == []
    else:
        assert outputs == ["stopped by pydantic-ai"] and len(ran) == 8
        assert len(said) == 1 and "contextvars.copy_context().run" in said[0], said
