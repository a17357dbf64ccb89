"""A real pydantic-ai agent, instrumented with OpenTelemetry, exports real OTLP to a running
sidecar; the sidecar's view of the run must match what the agent did."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pydantic import BaseModel
from pydantic_ai import Agent, InstrumentationSettings, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.exceptions import ModelRetry, UsageLimitExceeded
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage, UsageLimits

from tests.harness import RunningServer


@pytest.fixture
def instrumented(sidecar: RunningServer, request: pytest.FixtureRequest) -> Iterator[None]:
    """Route every pydantic-ai span to the sidecar over OTLP (HTTP, or gRPC when asked)."""
    if getattr(request, "param", "http") == "grpc":
        exporter: Any = GrpcSpanExporter(endpoint=sidecar.grpc_target, insecure=True)
    else:
        exporter = OTLPSpanExporter(endpoint=sidecar.otlp_http + "/v1/traces")
    provider = TracerProvider(resource=Resource.create({"service.name": "e2e-agents"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    try:
        yield
    finally:
        Agent.instrument_all(False)
        provider.shutdown()


def only_run(sidecar: RunningServer, agent: str) -> dict[str, Any]:
    runs = sidecar.get_json(f"/v1/runs?agent={agent}")["runs"]
    assert len(runs) == 1, runs
    return sidecar.get_json(f"/v1/runs/{runs[0]['id']}")  # type: ignore[no-any-return]


def scripted(calls: list[ToolCallPart | str]) -> FunctionModel:
    """A model that answers with the next scripted tool call (or text) on each request."""
    script = iter(calls)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        step = next(script)
        usage = RequestUsage(input_tokens=100, output_tokens=10)
        if isinstance(step, str):
            return ModelResponse(parts=[TextPart(step)], usage=usage, finish_reason="stop")
        return ModelResponse(parts=[step], usage=usage, finish_reason="tool_call")

    return FunctionModel(respond)


@pytest.mark.parametrize("instrumented", ["http", "grpc"], indirect=True)
def test_usage_limit_run_is_tool_limit_reached_with_exact_counts(
        sidecar: RunningServer, instrumented: None) -> None:
    model = scripted([
        ToolCallPart("search", {"q": "watchdog"}),
        ToolCallPart("search", {"q": "watchdog"}),
        ToolCallPart("flaky", {}),
        ToolCallPart("search", {"q": "watchdog"}),
        ToolCallPart("search", {"q": "other"}),
        ToolCallPart("search", {"q": "never"}),
    ])
    agent = Agent(model, name="limited")

    @agent.tool_plain
    def search(q: str) -> str:
        return f"3 results for {q}"

    @agent.tool_plain
    def flaky() -> str:
        raise ModelRetry("backend busy, try again")

    with pytest.raises(UsageLimitExceeded):
        agent.run_sync("find it", usage_limits=UsageLimits(request_limit=5))

    run = only_run(sidecar, "limited")
    signals = run["signals"]
    assert run["state"] == "ended"
    assert run["terminal_state"] == "tool_limit_reached"
    assert run["terminal_reason"] == "UsageLimitExceeded"
    assert run["has_final_answer"] is False
    assert signals["iterations"] == 5
    assert signals["tool_calls"] == 5
    assert signals["tools"] == {"search": 4, "flaky": 1}
    assert signals["errors"] == 1
    assert signals["repeated_tool_call"] == 3
    assert signals["input_tokens"] == 500 and signals["output_tokens"] == 50
    assert "backend busy" in signals["last_error"]


def test_tool_exception_ends_run_as_error(sidecar: RunningServer, instrumented: None) -> None:
    agent = Agent(scripted([ToolCallPart("read", {"path": "/srv/data.csv"})]), name="crashing")

    @agent.tool_plain
    def read(path: str) -> str:
        raise RuntimeError(f"permission denied: {path}")

    with pytest.raises(RuntimeError):
        agent.run_sync("read the data")

    run = only_run(sidecar, "crashing")
    assert run["terminal_state"] == "error"
    assert run["terminal_reason"] == "RuntimeError"
    assert run["signals"]["errors"] == 1
    assert run["signals"]["tool_calls"] == 1


class Answer(BaseModel):
    city: str
    population: int


def test_completed_run_with_structured_output(sidecar: RunningServer,
                                              instrumented: None) -> None:
    model = scripted([
        ToolCallPart("lookup", {"city": "Paris"}),
        ToolCallPart("final_result", {"city": "Paris", "population": 2100000}),
    ])
    agent = Agent(model, name="answering", output_type=Answer)

    @agent.tool_plain
    def lookup(city: str) -> str:
        return f"{city}: 2.1 million people"

    result = agent.run_sync("How many people live in Paris?")
    assert result.output.population == 2100000

    run = only_run(sidecar, "answering")
    assert run["terminal_state"] == "completed"
    assert run["has_final_answer"] is True
    assert run["signals"]["tool_calls"] == 1  # the output tool is an answer, not a tool call
    assert run["signals"]["iterations"] == 2
    assert "2100000" in run["final_output"]


def test_text_answer_completes(sidecar: RunningServer, instrumented: None) -> None:
    agent = Agent(scripted([ToolCallPart("now", {}), "It is noon."]), name="texting")

    @agent.tool_plain
    def now() -> str:
        return "12:00"

    assert agent.run_sync("what time is it?").output == "It is noon."
    run = only_run(sidecar, "texting")
    assert run["terminal_state"] == "completed"
    assert run["signals"]["finish_reason"] == "stop"
    assert run["signals"]["messages"] >= 4
