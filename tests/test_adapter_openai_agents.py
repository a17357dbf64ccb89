"""The OpenAI Agents SDK adapter end to end: real SDK agents driven by the SDK's own scripted
test model (no network), their traces turned into OTel spans by OpenInference's instrumentor and
exported as real OTLP to a running sidecar, steered by the directives sent back.

As in the pydantic-ai tests, the base instructions function waits until the sidecar has seen
every ended span and the listener has every directive they fired, so what each model call
receives is deterministic.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from agents import Agent, RunContextWrapper, Runner, function_tool
from agents.exceptions import AgentsException
from agents.testing import ModelStep, ScriptedModel
from agents.testing.model import ModelCall, assistant_message, function_call
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.client_runs import ended_run, wait_settled
from tests.harness import RunningServer
from watchdog.client import Watchdog, WatchdogAbort, current_run
from watchdog.client.adapters.openai_agents import (
    WatchdogAbortError,
    WatchdogHooks,
    instrument_openai_agents,
    watchdog_instructions,
)

CONTROL_MARKERS = ("[budget", "agent-watchdog", "wind down", "being stopped")
REPORT = "## Task\nFind it.\n\n## Completed Work\nSearched.\n\n## Key Findings\n/srv/a.txt"
MAX_MODEL_CALLS = 30


@pytest.fixture
def provider(sidecar: RunningServer) -> Iterator[TracerProvider]:
    provider = TracerProvider(resource=Resource.create({"service.name": "openai-agents-tests"}))
    exporter = OTLPSpanExporter(endpoint=sidecar.otlp_http + "/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=20))
    instrumentor = instrument_openai_agents(provider)
    yield provider
    instrumentor.uninstrument()
    provider.shutdown()


@pytest.fixture
def wd(sidecar: RunningServer, provider: TracerProvider) -> Iterator[Watchdog]:
    watchdog = Watchdog(sidecar.api, tracer_provider=provider)
    yield watchdog
    watchdog.close()


def settling_base(sidecar: RunningServer, provider: TracerProvider
                  ) -> Callable[[RunContextWrapper[Any], Agent[Any]], str]:
    def base(context: RunContextWrapper[Any], agent: Agent[Any]) -> str:
        run = current_run()
        assert run is not None
        wait_settled(sidecar, provider, run)
        return "You are a careful research agent."

    return base


def scripted(decide: Callable[[int, ModelCall], Any]) -> ScriptedModel:
    """A scripted model whose every call is answered by ``decide(call_number, call)``."""
    counter = iter(range(1, MAX_MODEL_CALLS + 1))

    def respond(call: ModelCall) -> Any:
        number = next(counter)
        step = decide(number, call)
        if isinstance(step, str):
            return [assistant_message(step)]
        name, arguments = step
        return [function_call(name, arguments, call_id=f"call-{number}")]

    return ScriptedModel([ModelStep.respond(respond) for _ in range(MAX_MODEL_CALLS)],
                         emit_traces=True)


def assert_no_control_text(model: ScriptedModel) -> None:
    """Every input item the model received (user messages, tool outputs) is free of control
    text: directives reached it only through the system instructions."""
    for call in model.calls:
        items = call.input if isinstance(call.input, list) else [call.input]
        for item in items:
            if isinstance(item, dict) and item.get("role") == "assistant":
                continue  # the model's own answers
            text = json.dumps(item, default=str) if not isinstance(item, str) else item
            for marker in CONTROL_MARKERS:
                assert marker not in text, (item, marker)


def run_agent(agent: Agent[Any]) -> Any:
    return asyncio.run(Runner.run(agent, "Find the file.", hooks=WatchdogHooks(), max_turns=25))


def test_countdown_then_abort_report(sidecar: RunningServer, provider: TracerProvider,
                                     wd: Watchdog) -> None:
    def decide(number: int, call: ModelCall) -> Any:
        if "This run is being stopped" in (call.system_instructions or ""):
            return REPORT
        return ("search", {"q": f"term {number}"})

    model = scripted(decide)
    ran: list[str] = []

    @function_tool
    def search(q: str) -> str:
        ran.append(q)
        return f"results for {q}"

    agent = Agent(name="oa-budget", model=model, tools=[search],
                  instructions=watchdog_instructions(settling_base(sidecar, provider)))
    with wd.run(agent="oa-explorer", max_tool_calls=4) as run:
        result = run_agent(agent)

    assert result.final_output == REPORT
    seen = [call.system_instructions or "" for call in model.calls]
    assert len(seen) == 5 and len(ran) == 4
    assert all(text.startswith("You are a careful research agent.") for text in seen)
    assert "[budget" not in seen[0]
    assert "[budget: 3 of 4 tool calls left — wrap up soon]" in seen[1]
    assert "[budget: 2 of 4 tool calls left — wrap up soon]" in seen[2]
    assert "[budget: 1 of 4 tool calls left — finalize now]" in seen[3]
    assert "This run is being stopped: [budget: all 4 tool calls used" in seen[4]
    assert_no_control_text(model)

    detail = ended_run(sidecar, provider, run.id)
    assert detail["terminal_state"] == "tool_limit_reached"
    assert detail["terminal_reason"] == "budget-exhausted"
    assert detail["has_final_answer"] is True
    assert detail["final_output"].startswith("## Task")
    assert detail["signals"]["tool_calls"] == 4


def test_wind_down_on_a_loop_gets_the_report(sidecar: RunningServer,
                                             provider: TracerProvider, wd: Watchdog) -> None:
    def decide(number: int, call: ModelCall) -> Any:
        if "You must wind down now" in (call.system_instructions or ""):
            return REPORT
        return ("read", {"path": "/srv/a.txt"})

    model = scripted(decide)

    @function_tool
    def read(path: str) -> str:
        return "permission denied"

    agent = Agent(name="oa-loop", model=model, tools=[read],
                  instructions=watchdog_instructions(settling_base(sidecar, provider)))
    with wd.run(agent="oa-looper") as run:
        result = run_agent(agent)

    assert result.final_output == REPORT
    assert "Loop:" in (model.calls[-1].system_instructions or "")
    assert_no_control_text(model)
    detail = ended_run(sidecar, provider, run.id)
    assert detail["terminal_state"] == "loop_detected"
    assert detail["has_final_answer"] is True
    assert detail["signals"]["tool_calls"] == 4


def test_abort_raises_within_one_model_call_and_no_tool_runs(
        sidecar: RunningServer, provider: TracerProvider, wd: Watchdog) -> None:
    model = scripted(lambda number, call: ("fetch", {"url": f"https://example.test/{number}"}))
    attempts: list[str] = []

    @function_tool
    def fetch(url: str) -> str:
        attempts.append(url)
        raise RuntimeError("backend busy, try again")

    agent = Agent(name="oa-errors", model=model, tools=[fetch],
                  instructions=watchdog_instructions(settling_base(sidecar, provider)))
    with pytest.raises(WatchdogAbortError) as raised, wd.run(agent="oa-fetcher") as run:
        run_agent(agent)

    assert isinstance(raised.value, AgentsException) and isinstance(raised.value, WatchdogAbort)
    assert raised.value.directive.rule == "error-loop"
    assert len(attempts) == 5  # the tool never ran after the abort
    assert len(model.calls) == 6  # one call after the abort, asked for the report
    assert "This run is being stopped" in (model.calls[5].system_instructions or "")
    assert_no_control_text(model)

    detail = ended_run(sidecar, provider, run.id)
    assert detail["terminal_state"] == "loop_detected"
    assert detail["terminal_reason"] == "error-loop"
    assert detail["has_final_answer"] is False
