"""LlamaIndex agents (llama-index-core 0.14 ``FunctionAgent`` and ``AgentWorkflow``) on the
OpenAI-compatible LLM class ``OpenAILike`` (the scripted model server), traced by OpenInference
(openinference-instrumentation-llama-index), LlamaIndex's usual OpenTelemetry tracing.
Scenarios (argv[1]):

* ``three_tools``: a ``FunctionAgent`` ``li_researcher`` with the tool ``lookup`` looks a, b and
  c up, then answers (``await agent.run(user_msg=...)``; FunctionAgent streams from the model by
  default); ``three_tools_stream`` is the same consuming ``handler.stream_events()``;
  ``three_tools_nostream`` the same with ``streaming=False`` (plain chat completions);
* ``limit``: the model asks for ``lookup`` forever; ``run(..., max_iterations=3)`` stops the
  loop by raising ``WorkflowRuntimeError("Max iterations of 3 reached! ...")`` (the default
  ``early_stopping_method="force"``); the driver catches it, as an application would;
* ``limit_generate``: the same with ``early_stopping_method="generate"``: at the cap LlamaIndex
  asks the model once more, with a system message of its own appended ("You have reached the
  maximum number of iterations (3)..."), and returns that answer;
* ``tool_error``: ``lookup`` raises; LlamaIndex hands the error text to the model as the tool's
  output, and the model answers;
* ``handoff``: an ``AgentWorkflow`` of the researcher (root, model ``<name>``, may hand off to
  the writer) and a writer ``li_writer`` (model ``<name>-sub``): the researcher looks a, b and
  c up, then calls LlamaIndex's ``handoff`` tool; the writer answers.

A scenario ending ``_nocontent`` runs with content hidden, as a privacy-minded deployment sets
it: OpenInference's ``OPENINFERENCE_HIDE_INPUTS``/``_OUTPUTS``/``_INPUT_MESSAGES``/
``_OUTPUT_MESSAGES``/``_INPUT_TEXT``/``_OUTPUT_TEXT`` (read by its ``TraceConfig``).
"""

from __future__ import annotations

import asyncio
import os
import sys

from _otel import model_settings, setup_tracing
from _tools import TASKS as BASE_TASKS
from _tools import lookup
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

RESEARCHER = "li_researcher"
WRITER = "li_writer"
SERVICE_NAME = "llamaindex-service"  # not the agent name: that must come from the spans
TASKS = {**BASE_TASKS, "handoff": "Look up a, b and c, then write it up."}
CONTENT_OFF = {f"OPENINFERENCE_HIDE_{what}": "true" for what in (
    "INPUTS", "OUTPUTS", "INPUT_MESSAGES", "OUTPUT_MESSAGES", "INPUT_TEXT", "OUTPUT_TEXT")}


async def main(scenario: str) -> None:
    if scenario.endswith("_nocontent"):
        os.environ.update(CONTENT_OFF)  # before the instrumentor reads its TraceConfig
        scenario = scenario.removesuffix("_nocontent")
    provider = setup_tracing(SERVICE_NAME)
    LlamaIndexInstrumentor().instrument(tracer_provider=provider)
    from llama_index.core.agent.workflow import AgentStream, AgentWorkflow, FunctionAgent
    from llama_index.llms.openai_like import OpenAILike
    from workflows.errors import WorkflowRuntimeError

    base_url, name = model_settings()
    streaming = not scenario.endswith("_nostream")

    def llm(model: str) -> OpenAILike:
        return OpenAILike(model=model, api_base=base_url, api_key="sk-fake", is_chat_model=True,
                          is_function_calling_model=True, context_window=32000)

    researcher = FunctionAgent(name=RESEARCHER, description="Looks keys up.",
                               system_prompt="You look keys up.", tools=[lookup],
                               llm=llm(name), streaming=streaming,
                               can_handoff_to=[WRITER] if scenario == "handoff" else None)
    base = scenario.removesuffix("_stream").removesuffix("_nostream")
    base = base.removesuffix("_generate")
    kwargs = {}
    if base == "limit":
        kwargs = {"max_iterations": 3}
        if scenario == "limit_generate":
            kwargs["early_stopping_method"] = "generate"
    if base == "handoff":
        writer = FunctionAgent(name=WRITER, description="Writes the findings up.",
                               system_prompt="You write the findings up.", tools=[],
                               llm=llm(name + "-sub"))
        agent = AgentWorkflow(agents=[researcher, writer], root_agent=RESEARCHER)
    else:
        agent = researcher
    handler = agent.run(user_msg=TASKS[base], **kwargs)
    try:
        if scenario.endswith("_stream"):
            async for event in handler.stream_events():
                if isinstance(event, AgentStream):
                    pass
        result = await handler
        print("answer:", result)
    except WorkflowRuntimeError as error:
        print("stopped:", error)
    provider.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
