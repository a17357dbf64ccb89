"""AutoGen AgentChat (autogen-agentchat 0.7) traced by OpenInference, as Arize's guide sets it
up: openinference-instrumentation-autogen-agentchat for the agents and tools and
openinference-instrumentation-openai for the model calls, on the global tracer provider (so
autogen-core's own GenAI spans come too, as they do for any user who sets one). The model
client is autogen-ext's OpenAIChatCompletionClient against the scripted model server.

Scenarios (argv[1]), scripts in tests/frameworks/test_autogen_oi.py:
- ``three_tools``: ``AssistantAgent`` ``autogen_researcher`` looks a, b and c up
  (``max_tool_iterations=10``), then answers;
- ``limit``: the model asks for ``lookup`` forever; ``max_tool_iterations=3`` ends the loop
  (no exception: AutoGen returns the tool results as a ``ToolCallSummaryMessage``);
- ``tool_error``: ``lookup("broken")`` raises (the error text goes to the model), then the
  model answers;
- ``team``: a ``RoundRobinGroupChat`` of the researcher (model ``<name>``) and a writer
  ``autogen_writer`` (no tools, model ``<name>-sub``), ``MaxMessageTermination(3)``, run plainly
  (``team.run``, no span of the application's around it).
"""

from __future__ import annotations

import asyncio
import sys

from _otel import model_settings, setup_tracing
from _tools import TASKS as BASE_TASKS
from _tools import lookup
from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor
from openinference.instrumentation.openai import OpenAIInstrumentor

MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False,
              "family": "unknown", "structured_output": False}
TASKS = {**BASE_TASKS, "team": "Look up a, b and c, then write it up."}


async def main(scenario: str) -> None:
    provider = setup_tracing("autogen-oi-service")
    AutogenAgentChatInstrumentor().instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from autogen_ext.models.openai import OpenAIChatCompletionClient

    base_url, name = model_settings()

    def client(model: str) -> OpenAIChatCompletionClient:
        return OpenAIChatCompletionClient(model=model, base_url=base_url, api_key="sk-fake",
                                          model_info=MODEL_INFO, parallel_tool_calls=False)

    researcher = AssistantAgent("autogen_researcher", model_client=client(name), tools=[lookup],
                                system_message="You look keys up.",
                                max_tool_iterations=3 if scenario == "limit" else 10)
    if scenario == "team":
        writer = AssistantAgent("autogen_writer", model_client=client(name + "-sub"),
                                system_message="You write the findings up.")
        team = RoundRobinGroupChat([researcher, writer],
                                   termination_condition=MaxMessageTermination(3))
        result = await team.run(task=TASKS[scenario])
    else:
        result = await researcher.run(task=TASKS[scenario])
    last = result.messages[-1]
    print("stop_reason:", result.stop_reason)
    print("last message:", type(last).__name__, getattr(last, "content", None))
    provider.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
