"""Microsoft Agent Framework (Python, agent-framework-core 1.x): an ``Agent`` on the OpenAI
chat-completions client (``OpenAIChatCompletionClient`` with ``base_url``: the scripted server
speaks chat completions; the framework's ``OpenAIChatClient`` speaks the Responses API), traced
by the framework's own OpenTelemetry GenAI instrumentation (``agent_framework.observability``:
on by default, through the global tracer provider; ``enable_sensitive_telemetry()`` adds the
content: messages, tool arguments and results).

Scenarios (argv[1]):

* ``three_tools``: the agent ``maf_researcher`` with the Python function tool ``lookup`` looks
  a, b and c up, then answers; ``three_tools_stream`` is the same through ``run(stream=True)``
  (the framework's streaming run; ``run_stream`` is gone);
* ``tool_error``: ``lookup`` raises; the framework hands the error to the model as the result,
  and the model answers;
* ``limit``: the model asks for ``lookup`` forever; the client's function invocation config
  ``max_iterations=3`` stops the loop after 3 model calls: the framework then asks once more
  with ``tool_choice="none"`` (tools still listed), and the model answers; ``limit_stream``
  streamed; ``calls_limit``: ``max_function_calls=2`` instead (``tool_choice="none"`` after the
  second call);
* ``sub_agent``: the agent ``maf_lead`` (model ``<name>``) has the researcher as a tool
  (``Agent.as_tool()``); it calls it once, the researcher (model ``<name>-sub``) looks a, b and
  c up and answers, the lead answers from that;
* ``workflow``: a workflow (core ``WorkflowBuilder``, ``maf_report``) of the researcher (model
  ``<name>-sub``) then ``maf_writer`` (model ``<name>-writer``), which writes the report;

any scenario with ``_nocontent`` appended: the same with sensitive data off (the framework's
default: ``enable_sensitive_telemetry()`` not called, ``ENABLE_SENSITIVE_DATA`` unset), as a
privacy-minded deployment runs it: no messages, tool arguments or results on any span;

and any scenario with ``_client`` appended: the invocation inside a run of the watchdog client
SDK (``agent_watchdog_client``, from the checkout: PYTHONPATH), which prints the model and tool
calls its span processor counted.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from _otel import model_settings, setup_tracing
from _tools import TASKS as BASE_TASKS
from _tools import lookup

RESEARCHER = "maf_researcher"
LEAD = "maf_lead"
WRITER = "maf_writer"
SERVICE_NAME = "agent-framework-service"  # not the agent name: that must come from the spans
LIMITS = {"limit": {"max_iterations": 3}, "calls_limit": {"max_function_calls": 2}}
TASKS = {**BASE_TASKS, "calls_limit": BASE_TASKS["limit"], "sub_agent": "Find out a, b and c.",
         "workflow": "Find out a, b and c."}


async def invoke(scenario: str) -> None:
    from agent_framework import Agent
    from agent_framework.openai import OpenAIChatCompletionClient

    base_url, name = model_settings()
    base = scenario.removesuffix("_stream")
    config: Any = LIMITS.get(base)

    def client(model: str) -> Any:
        return OpenAIChatCompletionClient(model=model, base_url=base_url, api_key="sk-fake",
                                          function_invocation_configuration=config)

    researcher = Agent(client=client(name + "-sub" if base in ("sub_agent", "workflow")
                                     else name),
                       name=RESEARCHER, description="Looks keys up.",
                       instructions="You look keys up.", tools=[lookup])
    runner: Any = researcher
    if base == "sub_agent":
        runner = Agent(client=client(name), name=LEAD, instructions="Ask the researcher.",
                       tools=[researcher.as_tool()])
    elif base == "workflow":
        from agent_framework import WorkflowBuilder

        writer = Agent(client=client(name + "-writer"), name=WRITER,
                       instructions="Write the report.")
        runner = WorkflowBuilder(name="maf_report", start_executor=researcher,
                                 output_from=[writer]).add_edge(researcher, writer).build()
    if scenario.endswith("_stream"):
        text = ""
        async for update in runner.run(TASKS[base], stream=True):
            text += str(getattr(update, "text", "") or "")
        print("answer:", text)
    else:
        result = await runner.run(TASKS[base])
        outputs = result.get_outputs() if base == "workflow" else [result]
        print("answer:", " | ".join(str(output.text) for output in outputs))


async def invoke_in_client_run(scenario: str, provider: Any) -> None:
    from agent_watchdog_client import Watchdog

    wd = Watchdog(tracer_provider=provider)
    with wd.run(agent=RESEARCHER) as run:
        await invoke(scenario)
    print("client counted:", run.local_model_calls, "model calls,", run.local_tool_calls,
          "tool calls")
    wd.close()


def main(scenario: str) -> None:
    provider = setup_tracing(SERVICE_NAME)
    from agent_framework.observability import enable_sensitive_telemetry

    if scenario.endswith("_nocontent"):
        scenario = scenario.removesuffix("_nocontent")
    else:
        enable_sensitive_telemetry()
    base = scenario.removesuffix("_client")
    if base == scenario:
        asyncio.run(invoke(scenario))
    else:
        asyncio.run(invoke_in_client_run(base, provider))
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
