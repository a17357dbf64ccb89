"""The pydantic-ai adapter end to end, beyond steering (which
``tests/frameworks/test_steering_pydantic_ai.py`` covers): calls in flight, child runs, failing
open, and where control text goes. Real pydantic-ai agents with scripted function models export
real OTLP to a running sidecar; nothing waits for a directive.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from agent_watchdog_client import Run, Watchdog
from agent_watchdog_client.adapters.pydantic_ai import WatchdogCapability
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from pydantic_ai import (
    Agent,
    InstrumentationSettings,
    ModelResponse,
    RunContext,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.messages import ModelMessage, ModelRequest
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from tests.client_runs import ended_run
from tests.harness import RunningServer, run_detail, wait_until
from tests.ports import free_port

CONTROL_MARKERS = ("[budget", "agent-watchdog", "wind down", "being stopped", "## Key Findings")
REPORT = "## Task\nFind it.\n\n## Completed Work\nSearched.\n\n## Key Findings\n/srv/a.txt"


@pytest.fixture
def provider(sidecar: RunningServer) -> Iterator[TracerProvider]:
    provider = TracerProvider(resource=Resource.create({"service.name": "adapter-tests"}))
    exporter = OTLPSpanExporter(endpoint=sidecar.otlp_http + "/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=20))
    yield provider
    provider.shutdown()


@pytest.fixture
def wd(sidecar: RunningServer, provider: TracerProvider) -> Iterator[Watchdog]:
    watchdog = Watchdog(sidecar.api, tracer_provider=provider)
    yield watchdog
    watchdog.close()


class Script:
    """A FunctionModel whose ``decide(call_number, info)`` picks each response; it records the
    instructions and the tools each request offered."""

    def __init__(self, decide: Callable[[int, AgentInfo], ModelResponse | ToolCallPart | str]
                 ) -> None:
        self.decide = decide
        self.instructions: list[str] = []
        self.tools: list[list[str]] = []
        self.model = FunctionModel(self.respond)

    def respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.instructions.append(info.instructions or "")
        self.tools.append([tool.name for tool in info.function_tools])
        step = self.decide(len(self.instructions), info)
        usage = RequestUsage(input_tokens=50, output_tokens=5)
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)], usage=usage)
        if isinstance(step, ToolCallPart):
            return ModelResponse(parts=[step], usage=usage)
        return step


def agent_for(script: Script, name: str, sidecar: RunningServer, provider: TracerProvider,
              **kwargs: Any) -> Agent[None, str]:
    return Agent(script.model, name=name, instructions=["You are a careful research agent."],
        capabilities=[traced(provider), WatchdogCapability(**kwargs)])


def traced(provider: TracerProvider) -> Instrumentation:
    return Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))


def assert_no_control_text(messages: list[ModelMessage]) -> None:
    """Directives went to the instructions only: no part of any request (user prompts, tool
    returns, retry prompts, system prompts) carries control text."""
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue  # the model's own answers (the report quotes its section titles)
        for part in message.parts:
            content = getattr(part, "content", None)
            if isinstance(content, str):
                for marker in CONTROL_MARKERS:
                    assert marker not in content, (part, marker)


def test_slow_tool_is_in_flight_on_the_sidecar(sidecar: RunningServer,
                                               provider: TracerProvider, wd: Watchdog) -> None:
    release = threading.Event()
    started = threading.Event()
    holder: list[Run] = []
    failures: list[BaseException] = []
    script = Script(lambda call, info: ToolCallPart("crawl", {}) if call == 1 else "done")
    agent = agent_for(script, "pyd-slow", sidecar, provider)

    @agent.tool_plain
    def crawl() -> str:
        started.set()
        assert release.wait(20)
        return "crawled"

    def main() -> None:
        try:
            with wd.run(agent="crawler") as run:
                holder.append(run)
                agent.run_sync("Crawl.")
        except BaseException as exc:  # surfaced below
            failures.append(exc)

    thread = threading.Thread(target=main)
    thread.start()
    try:
        assert started.wait(20)
        run = holder[0]
        detail = wait_until(lambda: (d := run_detail(sidecar.api, run.id))
                            and d["signals"]["in_flight"] == 1 and d, what="in_flight == 1")
        assert detail["state"] == "active"
        assert run.in_flight == 1
    finally:
        release.set()
        thread.join(20)
    assert not failures
    detail = ended_run(sidecar, provider, holder[0].id)
    assert detail["terminal_state"] == "completed"
    assert detail["signals"]["in_flight"] == 0


def test_sub_agent_in_a_nested_run_is_a_child_run(sidecar: RunningServer,
                                                  provider: TracerProvider,
                                                  wd: Watchdog) -> None:
    child_script = Script(lambda call, info: ToolCallPart("lookup", {"k": "a"}) if call == 1
                          else "child answer")
    child = agent_for(child_script, "pyd-child", sidecar, provider)

    @child.tool_plain
    def lookup(k: str) -> str:
        return "value"

    parent_script = Script(lambda call, info: ToolCallPart("delegate", {"task": "t"})
                           if call == 1 else "parent answer")
    parent = agent_for(parent_script, "pyd-parent", sidecar, provider)
    child_ids: list[str] = []

    @parent.tool_plain
    async def delegate(task: str) -> str:
        with wd.run(agent="researcher", max_tool_calls=4) as sub:
            child_ids.append(sub.id)
            return (await child.run(task)).output

    with wd.run(agent="planner", session="s-42") as run:
        assert parent.run_sync("Plan.").output == "parent answer"

    child_detail = ended_run(sidecar, provider, child_ids[0])
    parent_detail = ended_run(sidecar, provider, run.id)
    assert child_detail["parent_run"] == run.id
    assert child_detail["session"] == "s-42"  # inherited from the parent run
    assert child_detail["budget"]["max_tool_calls"] == 4
    assert child_detail["signals"]["tools"] == {"lookup": 1}
    assert parent_detail["signals"]["tools"] == {"delegate": 1}
    assert child_detail["terminal_state"] == parent_detail["terminal_state"] == "completed", (
        json.dumps([child_detail, parent_detail]))


def test_unreachable_sidecar_fails_open_with_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # a port nobody listens on
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    wd = Watchdog(url, tracer_provider=provider)

    def wait_for_failure(ctx: RunContext[Any]) -> str:
        wait_until(lambda: wd.transport.health.reachable is False, what="a failed request")
        return ""

    script = Script(lambda call, info: ToolCallPart("search", {"q": str(call)}) if call <= 3
                    else "answer")
    agent = Agent(script.model, name="pyd-offline", instructions=[wait_for_failure],
                  capabilities=[traced(provider), WatchdogCapability()])

    @agent.tool_plain
    def search(q: str) -> str:
        return "hit"

    caplog.set_level(logging.INFO, logger="agent_watchdog_client")
    started = time.monotonic()
    try:
        with wd.run(agent="offline", max_tool_calls=4) as run:
            assert agent.run_sync("Search.").output == "answer"
            assert run.report() is None and run.directive() is None
    finally:
        wd.close()
        provider.shutdown()
    assert time.monotonic() - started < 5
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert warnings[0].getMessage().startswith(f"agent-watchdog sidecar unreachable at {url}")
    assert "continuing without it" in warnings[0].getMessage()
    # Without the sidecar, the countdown comes from the locally counted tool calls.
    assert "[budget: 3 of 4 tool calls left" in script.instructions[1]
    assert "[budget: 1 of 4 tool calls left" in script.instructions[3]


def test_messages_are_model_requests_with_instructions_not_user_text(
        sidecar: RunningServer, provider: TracerProvider, wd: Watchdog) -> None:
    script = Script(lambda call, info: ToolCallPart("search", {"q": str(call)}) if call < 4
                    else "done")
    agent = agent_for(script, "pyd-transcript", sidecar, provider)

    @agent.tool_plain
    def search(q: str) -> str:
        return "hit"

    with wd.run(agent="transcript", max_tool_calls=4):
        result = agent.run_sync("Search.")
    requests = [m for m in result.all_messages() if isinstance(m, ModelRequest)]
    assert any("[budget" in (m.instructions or "") for m in requests)
    assert_no_control_text(result.all_messages())
