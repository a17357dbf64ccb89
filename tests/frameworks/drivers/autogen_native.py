"""AutoGen AgentChat (autogen-agentchat 0.7) with its own OpenTelemetry spans, on autogen-ext's
OpenAI model client against the scripted model server. AutoGen's model client opens no span of
its own: the model calls are traced by opentelemetry-instrumentation-openai-v2, as AutoGen's
tracing guide does. AutoGen's agents and tools trace to the global tracer provider; a team's
runtime takes it as ``tracer_provider`` (the documented way; the default runtime a team makes
falls back to the global one too). Scenarios (argv[1]):

* ``three_tools``: an ``AssistantAgent`` with the tool ``lookup`` (``max_tool_iterations=10``)
  looks a, b and c up, then answers; ``three_tools_stream`` is the same through ``run_stream``;
* ``limit``: the model asks for ``lookup`` forever; ``max_tool_iterations=3`` stops the loop
  (AutoGen then returns the tool results as a ``ToolCallSummaryMessage``: no exception);
* ``tool_error``: ``lookup`` raises; AutoGen's workbench hands the error text to the model as the
  result, and the model answers;
* ``team``: a ``RoundRobinGroupChat`` of the researcher (tools, model ``<name>``) and a writer
  (no tools, model ``<name>-sub``), ending after the writer's message
  (``MaxMessageTermination(3)``: the task, the researcher's answer, the writer's), run as
  AutoGen's tracing guide does: inside a span of the application's own (``run_team``), on a
  runtime started inside it and given the tracer provider. (Without that span every message
  the runtime delivers starts a trace of its own, tied to its sender by a span link only: the
  watchdog, which does not follow links, then sees one run per turn — a known gap.)
"""

from __future__ import annotations

import asyncio
import sys

from _otel import model_settings, setup_tracing
from _tools import TASKS as BASE_TASKS
from _tools import lookup
from opentelemetry import trace
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

RESEARCHER = "autogen_researcher"  # AutoGen names must be Python identifiers
WRITER = "autogen_writer"
SERVICE_NAME = "autogen-service"  # not the agent name: the agent name must come from the spans
MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False,
              "family": "unknown", "structured_output": False}
TASKS = {**BASE_TASKS, "team": "Look up a, b and c, then write it up."}


async def main(scenario: str) -> None:
    provider = setup_tracing(SERVICE_NAME)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.base import TaskResult
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_core import SingleThreadedAgentRuntime
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    base_url, name = model_settings()

    def client(model: str) -> OpenAIChatCompletionClient:
        return OpenAIChatCompletionClient(model=model, base_url=base_url, api_key="sk-fake",
                                          model_info=MODEL_INFO, parallel_tool_calls=False)

    researcher = AssistantAgent(RESEARCHER, model_client=client(name), tools=[lookup],
                                system_message="You look keys up.",
                                max_tool_iterations=3 if scenario == "limit" else 10)
    base = scenario.removesuffix("_stream")
    if base == "team":
        writer = AssistantAgent(WRITER, model_client=client(name + "-sub"),
                                system_message="You write the findings up.")
        with trace.get_tracer("autogen-driver").start_as_current_span("run_team"):
            runtime = SingleThreadedAgentRuntime(tracer_provider=provider)
            runtime.start()
            team = RoundRobinGroupChat([researcher, writer], runtime=runtime,
                                       termination_condition=MaxMessageTermination(3))
            result = await team.run(task=TASKS[base])
            await runtime.stop_when_idle()
    elif scenario.endswith("_stream"):
        result = None
        async for item in researcher.run_stream(task=TASKS[base]):
            if isinstance(item, TaskResult):
                result = item
        assert result is not None
    else:
        result = await researcher.run(task=TASKS[base])
    last = result.messages[-1]
    print("stop_reason:", result.stop_reason)
    print("last message:", type(last).__name__, getattr(last, "content", None))
    provider.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
