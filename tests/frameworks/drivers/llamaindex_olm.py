"""LlamaIndex agents (llama-index-core 0.14 ``FunctionAgent`` and ``AgentWorkflow``) on the
OpenAI-compatible LLM class ``OpenAILike`` (the scripted model server), traced by OpenLLMetry as
``Traceloop.init()`` sets it up: opentelemetry-instrumentation-llamaindex for LlamaIndex and
opentelemetry-instrumentation-openai for the OpenAI SDK beneath it.
Scenarios (argv[1]), those of tests/frameworks/drivers/llamaindex_oi.py:

* ``three_tools``: a ``FunctionAgent`` ``li_researcher`` with the tool ``lookup`` looks a, b and
  c up, then answers;
* ``limit``: the model asks for ``lookup`` forever; ``run(..., max_iterations=3)`` stops the
  loop by raising ``WorkflowRuntimeError("Max iterations of 3 reached! ...")``; the driver
  catches it, as an application would;
* ``tool_error``: ``lookup`` raises; LlamaIndex hands the error text to the model, which
  answers;
* ``handoff``: an ``AgentWorkflow`` of the researcher (root, model ``<name>``, may hand off to
  the writer) and a writer ``li_writer`` (model ``<name>-sub``): the researcher looks a, b and
  c up, then calls LlamaIndex's ``handoff`` tool; the writer answers.

A scenario ending ``_nocontent`` runs with content off, as a privacy-minded deployment sets it:
``TRACELOOP_TRACE_CONTENT=false`` (read by both instrumentations at each span).
"""

from __future__ import annotations

import asyncio
import os
import sys

from _otel import model_settings, setup_tracing
from _tools import TASKS as BASE_TASKS
from _tools import lookup
from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor
from opentelemetry.instrumentation.openai import OpenAIInstrumentor

RESEARCHER = "li_researcher"
WRITER = "li_writer"
SERVICE_NAME = "llamaindex-olm-service"  # not the agent name: that must come from the spans
TASKS = {**BASE_TASKS, "handoff": "Look up a, b and c, then write it up."}


async def main(scenario: str) -> None:
    if scenario.endswith("_nocontent"):
        os.environ["TRACELOOP_TRACE_CONTENT"] = "false"
        scenario = scenario.removesuffix("_nocontent")
    provider = setup_tracing(SERVICE_NAME)
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
    from llama_index.llms.openai_like import OpenAILike
    from workflows.errors import WorkflowRuntimeError

    base_url, name = model_settings()

    def llm(model: str) -> OpenAILike:
        return OpenAILike(model=model, api_base=base_url, api_key="sk-fake", is_chat_model=True,
                          is_function_calling_model=True, context_window=32000)

    researcher = FunctionAgent(name=RESEARCHER, description="Looks keys up.",
                               system_prompt="You look keys up.", tools=[lookup],
                               llm=llm(name),
                               can_handoff_to=[WRITER] if scenario == "handoff" else None)
    kwargs = {"max_iterations": 3} if scenario == "limit" else {}
    if scenario == "handoff":
        writer = FunctionAgent(name=WRITER, description="Writes the findings up.",
                               system_prompt="You write the findings up.", tools=[],
                               llm=llm(name + "-sub"))
        agent = AgentWorkflow(agents=[researcher, writer], root_agent=RESEARCHER)
    else:
        agent = researcher
    try:
        result = await agent.run(user_msg=TASKS[scenario], **kwargs)
        print("answer:", result)
    except WorkflowRuntimeError as error:
        print("stopped:", error)
    provider.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
