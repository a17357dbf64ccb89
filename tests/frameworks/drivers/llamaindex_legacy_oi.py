"""LlamaIndex's step-wise agents (llama-index-core 0.12: ``FunctionCallingAgent``, an
``AgentRunner`` around a ``FunctionCallingAgentWorker``) on the OpenAI-compatible LLM class
``OpenAILike`` (the scripted model server), traced by OpenInference
(openinference-instrumentation-llama-index). Scenarios (argv[1]):

* ``three_tools``: the agent with the tool ``lookup`` looks a, b and c up, then answers
  (``agent.chat(...)``);
* ``limit``: the model asks for ``lookup`` forever; ``max_function_calls=3`` ends the loop at
  the model's fourth request for a tool: the agent stops without running it and returns the
  model's (empty) text;
* ``tool_error``: ``lookup`` raises; LlamaIndex hands the error text to the model as the tool's
  output, and the model answers.

A scenario ending ``_nocontent`` runs with content hidden, as a privacy-minded deployment sets
it: OpenInference's ``OPENINFERENCE_HIDE_INPUTS``/``_OUTPUTS``/``_INPUT_MESSAGES``/
``_OUTPUT_MESSAGES``/``_INPUT_TEXT``/``_OUTPUT_TEXT`` (read by its ``TraceConfig``).

The runner ends every chat with ``AgentRunner.finalize_response``: a span of its own (the agent
kind: the runner is an agent) below the chat's, beside the steps, with nothing below it and the
answer as its output.
"""

from __future__ import annotations

import os
import sys

from _otel import model_settings, setup_tracing
from _tools import TASKS, lookup
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

SERVICE_NAME = "li-legacy-researcher"  # no span names the agent: its name is service.name
CONTENT_OFF = {f"OPENINFERENCE_HIDE_{what}": "true" for what in (
    "INPUTS", "OUTPUTS", "INPUT_MESSAGES", "OUTPUT_MESSAGES", "INPUT_TEXT", "OUTPUT_TEXT")}


def main(scenario: str) -> None:
    if scenario.endswith("_nocontent"):
        os.environ.update(CONTENT_OFF)  # before the instrumentor reads its TraceConfig
        scenario = scenario.removesuffix("_nocontent")
    provider = setup_tracing(SERVICE_NAME)
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    from llama_index.core.agent import FunctionCallingAgent
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.openai_like import OpenAILike

    base_url, name = model_settings()
    llm = OpenAILike(model=name, api_base=base_url, api_key="sk-fake", is_chat_model=True,
                     is_function_calling_model=True, context_window=32000)
    agent = FunctionCallingAgent.from_tools(
        [FunctionTool.from_defaults(fn=lookup)], llm=llm, allow_parallel_tool_calls=False,
        max_function_calls=3 if scenario == "limit" else 10)
    print("answer:", agent.chat(TASKS[scenario]))
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
