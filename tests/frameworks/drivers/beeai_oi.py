"""BeeAI Framework (beeai-framework 0.1.85) RequirementAgent on OpenAIChatModel (LiteLLM under
it) against the scripted model server, traced by OpenInference
(openinference-instrumentation-beeai 0.1.30).

Scenarios (argv[1]), scripts in tests/frameworks/test_beeai_oi.py:
- ``three_tools``: agent ``bee_researcher`` calls ``lookup`` a, b, c (one call per model
  response), then calls BeeAI's ``final_answer`` tool (its way to answer);
- ``limit``: the model calls ``lookup`` forever; ``max_iterations=3`` stops it (BeeAI raises
  ``AgentError("Agent was not able to resolve the task in 4 iterations.")``);
- ``tool_error``: ``lookup("broken")`` raises, then the model answers;
- ``three_tools_text``: as ``three_tools``, but the model answers in plain text although the
  request says ``tool_choice: required``: BeeAI's chat model raises ``ChatModelToolCallError``,
  retries (``max_retries`` 3: four HTTP requests in one model-call span) and the agent then turns
  the text into its ``final_answer`` call;
- ``three_tools_json``: as ``three_tools``, with the model left as BeeAI sets it up behind a
  ``base_url`` (tool_choice ``required`` taken as unsupported): no ``tools`` in the requests but
  a ``response_format`` JSON schema, the model answering each step as that JSON text
  (``{"name": "lookup", "parameters": {...}}``) and BeeAI turning it into the tool call;
- ``managed``: agent ``bee_manager`` has ``bee_researcher`` as a tool (HandoffTool); the manager
  hands the task over, the researcher calls ``lookup`` once and answers, the manager answers.
"""

from __future__ import annotations

import asyncio
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_TELEMETRY", "False")

import _tools
from _otel import model_settings, setup_tracing
from openinference.instrumentation.beeai import BeeAIInstrumentor


async def main(scenario: str) -> None:
    provider = setup_tracing("beeai-service")
    BeeAIInstrumentor().instrument(tracer_provider=provider)
    from beeai_framework.adapters.openai import OpenAIChatModel
    from beeai_framework.agents.requirement import RequirementAgent
    from beeai_framework.tools import tool

    base_url, model_name = model_settings()

    as_json = scenario.endswith("_json")

    def model(name: str) -> OpenAIChatModel:
        if as_json:  # BeeAI's default behind a base_url
            return OpenAIChatModel(name, base_url=base_url, api_key="sk-fake")
        # a server that takes tool_choice "required" (BeeAI assumes none behind a base_url and then
        # asks for tool calls as JSON text through response_format): native tool calls
        return OpenAIChatModel(name, base_url=base_url, api_key="sk-fake",
                               tool_choice_support={"required", "none", "single", "auto"})

    lookup = tool(_tools.lookup)
    scenario = scenario.removesuffix("_text").removesuffix("_json")
    task = _tools.TASKS.get(scenario, "Look up a, b and c.")
    options = {"max_iterations": 3} if scenario == "limit" else {}
    if scenario == "managed":
        from beeai_framework.tools.handoff import HandoffTool
        researcher = RequirementAgent(llm=model(model_name + "-sub"), tools=[lookup],
                                      name="bee_researcher", description="Looks keys up.")
        agent = RequirementAgent(llm=model(model_name), name="bee_manager",
                                 tools=[HandoffTool(researcher, name="bee_researcher",
                                                    description="Looks keys up.")])
    else:
        agent = RequirementAgent(llm=model(model_name), tools=[lookup], name="bee_researcher")
    try:
        result = await agent.run(task, **options)
        print("answer:", result.last_message.text)
    except Exception as exc:  # the limit scenario ends so
        print("raised:", type(exc).__name__, exc)
    provider.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
