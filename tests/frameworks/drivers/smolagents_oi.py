"""smolagents agents on an OpenAIServerModel (the fake server), traced by OpenInference
(openinference-instrumentation-smolagents).

Scenarios (argv[1]):
- ``three_tools``: a ToolCallingAgent ``smol_researcher`` calls ``lookup`` 3 times, then the
  ``final_answer`` tool;
- ``limit``: the model calls ``lookup`` forever; ``max_steps=3`` stops it (smolagents then asks
  the model, without tools, for a final answer and returns that);
- ``answer_at_cap``: as ``limit`` (``max_steps=3``), but the model answers in the third step
  (``lookup`` twice, then ``final_answer``): not stopped by the cap;
- ``tool_error``: ``lookup`` raises once, then the model answers with ``final_answer``;
- ``code_three_tools``: a CodeAgent ``smol_coder`` doing the same in code blocks;
- ``managed``: a manager ToolCallingAgent ``smol_manager`` delegates to the managed agent
  ``smol_researcher`` (model ``<model>-sub``), which calls ``lookup`` once and answers.

A scenario ending ``_nocontent`` runs with message content hidden, as a privacy-minded
deployment sets it: ``OPENINFERENCE_HIDE_INPUTS``/``_OUTPUTS``/``_INPUT_MESSAGES``/
``_OUTPUT_MESSAGES`` (read by the instrumentor's ``TraceConfig``).
"""

from __future__ import annotations

import os
import sys

import _tools
from _otel import model_settings, setup_tracing
from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from smolagents import CodeAgent, OpenAIServerModel, ToolCallingAgent, tool

lookup = tool(_tools.lookup)
CONTENT_OFF = {f"OPENINFERENCE_HIDE_{what}": "true"
               for what in ("INPUTS", "OUTPUTS", "INPUT_MESSAGES", "OUTPUT_MESSAGES")}


def main(scenario: str) -> None:
    if scenario.endswith("_nocontent"):
        os.environ.update(CONTENT_OFF)
        scenario = scenario.removesuffix("_nocontent")
    provider = setup_tracing("smolagents-service")
    SmolagentsInstrumentor().instrument(tracer_provider=provider)
    base_url, model_name = model_settings()

    def model(name: str) -> OpenAIServerModel:
        return OpenAIServerModel(model_id=name, api_base=base_url, api_key="sk-fake")

    task = "Look up a, b and c."
    if scenario == "code_three_tools":
        agent = CodeAgent(tools=[lookup], model=model(model_name), name="smol_coder",
                          max_steps=10)
    elif scenario == "managed":
        researcher = ToolCallingAgent(tools=[lookup], model=model(model_name + "-sub"),
                                      name="smol_researcher",
                                      description="Looks keys up.", max_steps=5)
        agent = ToolCallingAgent(tools=[], model=model(model_name), name="smol_manager",
                                 managed_agents=[researcher], max_steps=5)
    else:
        agent = ToolCallingAgent(tools=[lookup], model=model(model_name), name="smol_researcher",
                                 max_steps=3 if scenario in ("limit", "answer_at_cap") else 10)
    print("answer:", agent.run(task))
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
