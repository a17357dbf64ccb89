"""ACKED means the same for every adapter: the agent's process put the directive into a model
request it made (the countdown or wind-down in that request's instructions, the final request
for the report) or stopped the run at it. Driven with real pydantic-ai and OpenAI Agents SDK
agents against the scripted model server and a real sidecar, at the latency where the last ack
raced the end of the run (the model answering at once); read through the API and
`watchdog directives`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agent_watchdog_client import Watchdog
from agent_watchdog_client.adapters.pydantic_ai import WatchdogCapability
from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import InstrumentationSettings, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.capabilities import Instrumentation
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.steering import REPORT, ended, searching
from tests.frameworks.test_steering_pydantic_ai import agent_on, tracer_provider, with_search
from tests.harness import RunningServer, running_server, sidecar_config, wait_until
from watchdog.shell.cli import main

LATE_PACK = """apiVersion: agent-watchdog/v1
kind: RulePack
name: late
rules:
  - name: after-the-answer
    when: run.agent == "late" && run.iterations >= 2
    action: notify
    message: "the run has answered"
"""
ADAPTERS = ["pydantic_ai", "openai_agents"]


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[RunningServer]:
    pack = tmp_path / "late.yaml"
    pack.write_text(LATE_PACK)
    config = sidecar_config(tmp_path / "state", loose_run_gap=1.0, eval_interval=0.2,
                            rules=(str(pack),))
    with running_server(config) as server:
        yield server


@pytest.fixture
def provider(sidecar: RunningServer) -> Iterator[TracerProvider]:
    # the OpenAI Agents SDK imported here and in drive, not by every test process that collects
    # this module
    from agent_watchdog_client.adapters.openai_agents import instrument_openai_agents
    from agents import set_tracing_disabled

    provider = tracer_provider(sidecar.otlp_http)
    set_tracing_disabled(False)
    instrumentor = instrument_openai_agents(provider)  # only the OpenAI Agents SDK's spans
    yield provider
    instrumentor.uninstrument()
    provider.shutdown()


def drive(adapter: str, llm: FakeLLM, model: str, provider: TracerProvider) -> Callable[[], Any]:
    """A function that runs one agent of ``adapter`` on ``model`` with a search tool."""
    if adapter == "pydantic_ai":
        agent = agent_on(llm, model, provider)
        with_search(agent, [])
        return lambda: agent.run_sync("Find the file.").output
    from agent_watchdog_client.adapters.openai_agents import WatchdogHooks, steered
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from openai import AsyncOpenAI

    @function_tool
    def search(q: str) -> str:
        return f"2 results for {q}"

    client = AsyncOpenAI(base_url=llm.base_url, api_key="sk-fake")
    steered_agent = steered(Agent(name="explorer", instructions="You are a research agent.",
                                  model=OpenAIChatCompletionsModel(model, openai_client=client),
                                  tools=[search]))
    return lambda: asyncio.run(Runner.run(steered_agent, "Find the file.", hooks=WatchdogHooks(),
                                          max_turns=40)).final_output


def acked(sidecar: RunningServer, run_id: str) -> list[tuple[str, bool]]:
    return [(d["rule"], d["acked"]) for d in sidecar.get_json(f"/v1/runs/{run_id}")["directives"]]


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_every_directive_put_into_a_request_is_acked(
        adapter: str, sidecar: RunningServer, llm: FakeLLM, provider: TracerProvider,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The budget's countdowns and the abort: each went into a request (the abort into the
    final one), so each is acked — by the time Watchdog.close() returns, whatever the timing."""
    for attempt in range(3):  # the race the ack lost sometimes: more than one chance to show
        model = llm.script(f"ack-{adapter}-{attempt}", searching(), delay=0.0)
        run_agent = drive(adapter, llm, model, provider)
        wd = Watchdog(sidecar.api, tracer_provider=provider)
        with wd.run(agent="explorer", max_tool_calls=5) as run:
            assert run_agent() == REPORT
        wd.close()
        ended(sidecar, run.id, provider.force_flush)
        assert acked(sidecar, run.id) == [
            ("budget-countdown", True), ("budget-countdown", True), ("budget-last-call", True),
            ("budget-exhausted", True)], (adapter, attempt)
    assert main(["directives", run.id, "--url", sidecar.api]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[4] for row in rows] == ["yes"] * 4


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_a_directive_after_the_last_request_is_not_acked(
        adapter: str, sidecar: RunningServer, llm: FakeLLM, provider: TracerProvider) -> None:
    """A notify fired by the run's answer (its 2nd model call) reaches no request: not acked,
    with either adapter — even though the OpenAI Agents SDK looks at the tools again after the
    answer (the adapter syncs there, and may receive it, but makes no request with it)."""
    model = llm.script(f"late-{adapter}", fakellm.steps(fakellm.call("search", q="a"),
                                                         fakellm.answer("done")))
    run_agent = drive(adapter, llm, model, provider)
    wd = Watchdog(sidecar.api, tracer_provider=provider)
    with wd.run(agent="late", max_tool_calls=50) as run:
        assert run_agent() == "done"
    wd.close()
    ended(sidecar, run.id, provider.force_flush)
    wait_until(lambda: acked(sidecar, run.id), what="the notify after the answer")
    assert acked(sidecar, run.id) == [("after-the-answer", False)]
    assert len(llm.requests(model)) == 2


def test_the_last_ack_is_not_lost_when_the_run_ends_at_once(
        sidecar: RunningServer, provider: TracerProvider) -> None:
    """An in-process model answers the final request instantly, the run ends and the client
    closes within a millisecond: the abort the final request carried is still acked (the
    reporter sends what it owes before it stops)."""
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not info.function_tools:
            return ModelResponse(parts=[TextPart(REPORT)])
        return ModelResponse(parts=[ToolCallPart("search", {"q": f"term {len(messages)}"})])

    for attempt in range(5):
        agent = PydanticAgent(FunctionModel(respond), name="explorer",
                              capabilities=[Instrumentation(settings=InstrumentationSettings(
                                  tracer_provider=provider)), WatchdogCapability()])
        with_search(agent, [])
        wd = Watchdog(sidecar.api, tracer_provider=provider)
        with wd.run(agent="explorer", max_tool_calls=2) as run:
            assert agent.run_sync("Find the file.").output == REPORT
        wd.close()
        ended(sidecar, run.id, provider.force_flush)
        rules = acked(sidecar, run.id)
        assert rules and rules[-1] == ("budget-exhausted", True), (attempt, rules)
        assert all(flag for _rule, flag in rules), (attempt, rules)
