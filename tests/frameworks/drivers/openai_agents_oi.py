"""OpenAI Agents SDK agents on ``OpenAIChatCompletionsModel`` (the fake server), traced by
OpenInference (openinference-instrumentation-openai-agents). Runs in the main venv.

The SDK's own trace exporter (to OpenAI's backend) is removed; OpenInference's processor turns
the SDK's traces into OTel spans. Scenarios (argv[1]):
- ``three_tools``: ``oa_researcher`` calls ``lookup`` 3 times, then answers;
- ``limit``: the model calls ``lookup`` forever; ``max_turns=3`` stops it with
  ``MaxTurnsExceeded`` (caught here, as an application would);
- ``tool_error``: ``lookup`` raises; the SDK hands the error text to the model, which answers;
- ``handoff``: ``oa_triage`` hands off to ``oa_researcher`` (model ``<model>-sub``: one
  ``lookup``, then the answer);
- ``agent_as_tool``: ``oa_manager`` calls ``oa_researcher`` as its tool ``research`` (model
  ``<model>-sub``), then answers.
"""

from __future__ import annotations

import sys

from _otel import model_settings, setup_tracing
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_trace_processors
from agents.exceptions import AgentsException
from openai import AsyncOpenAI
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor


@function_tool
def lookup(key: str) -> str:
    """Look a key up."""
    if key == "broken":
        raise RuntimeError(f"backend unavailable for {key}")
    return f"value of {key}"


def main(scenario: str) -> None:
    provider = setup_tracing("openai-agents-service")
    set_trace_processors([])  # no export to OpenAI's tracing backend
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    base_url, model_name = model_settings()
    client = AsyncOpenAI(base_url=base_url, api_key="sk-fake")

    def model(name: str) -> OpenAIChatCompletionsModel:
        return OpenAIChatCompletionsModel(model=name, openai_client=client)

    max_turns = 3 if scenario == "limit" else 10
    if scenario in ("handoff", "agent_as_tool"):
        researcher = Agent(name="oa_researcher", instructions="Look keys up.",
                           tools=[lookup], model=model(model_name + "-sub"))
        if scenario == "handoff":
            agent = Agent(name="oa_triage", instructions="Hand research to the researcher.",
                          handoffs=[researcher], model=model(model_name))
        else:
            agent = Agent(name="oa_manager", instructions="Use the research tool.",
                          tools=[researcher.as_tool(tool_name="research",
                                                    tool_description="Research a question.")],
                          model=model(model_name))
    else:
        agent = Agent(name="oa_researcher", instructions="Look keys up.", tools=[lookup],
                      model=model(model_name))
    try:
        result = Runner.run_sync(agent, "Look up a, b and c.", max_turns=max_turns)
        print("answer:", result.final_output)
    except AgentsException as exc:
        print("stopped:", type(exc).__name__, exc)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
