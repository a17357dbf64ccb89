"""Agno agents (agno 3.x) on ``OpenAIChat`` against the scripted model server, traced by
OpenInference (openinference-instrumentation-agno, the OpenTelemetry route Agno documents).

Scenarios (argv[1]):

* ``three_tools``: an ``Agent`` ``agno_researcher`` with the Python function tool ``lookup``
  looks a, b and c up, then answers; ``three_tools_stream`` is the same with ``stream=True``,
  ``three_tools_async`` through ``arun``;
* ``limit``: the model asks for ``lookup`` until it is told the limit was reached;
  ``tool_call_limit=3``: Agno runs three calls, answers the fourth request with a tool message
  "Tool call limit reached…" instead of running it, and asks the model again (tools still
  offered), which then answers;
* ``tool_error``: ``lookup`` raises; Agno hands the error text to the model, which answers;
* ``team``: a ``Team`` ``agno_team`` (leader model ``<name>``) delegates to its member agent
  ``agno_researcher`` (model ``<name>-sub``) through its ``delegate_task_to_member`` tool; the
  member looks a, b and c up and answers; the leader answers from that (``team_stream``: with
  ``stream=True``; ``team_async``: through ``arun``); ``limit_stream`` is ``limit`` streamed.

A scenario ending ``_nocontent`` runs with content hidden, as a privacy-minded deployment sets
it: OpenInference's ``OPENINFERENCE_HIDE_INPUTS``/``_OUTPUTS``/``_INPUT_MESSAGES``/
``_OUTPUT_MESSAGES``/``_INPUT_TEXT``/``_OUTPUT_TEXT`` (read by the instrumentor's
``TraceConfig``).
"""

from __future__ import annotations

import asyncio
import os
import sys

from _otel import model_settings, setup_tracing
from _tools import TASKS as BASE_TASKS
from _tools import lookup
from openinference.instrumentation.agno import AgnoInstrumentor

RESEARCHER = "agno_researcher"
TEAM = "agno_team"
SERVICE_NAME = "agno-service"  # not the agent name: the agent name must come from the spans
TASKS = {**BASE_TASKS, "team": "Find out a, b and c."}
CONTENT_OFF = {f"OPENINFERENCE_HIDE_{what}": "true"
               for what in ("INPUTS", "OUTPUTS", "INPUT_MESSAGES", "OUTPUT_MESSAGES",
                            "INPUT_TEXT", "OUTPUT_TEXT")}


def main(scenario: str) -> None:
    if scenario.endswith("_nocontent"):
        os.environ.update(CONTENT_OFF)
        scenario = scenario.removesuffix("_nocontent")
    provider = setup_tracing(SERVICE_NAME)
    AgnoInstrumentor().instrument(tracer_provider=provider)
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat
    from agno.team import Team

    base_url, name = model_settings()

    def model(model_id: str) -> OpenAIChat:
        return OpenAIChat(id=model_id, base_url=base_url, api_key="sk-fake")

    base = scenario.removesuffix("_stream").removesuffix("_async")
    stream = scenario.endswith("_stream")
    if base == "team":
        researcher = Agent(name=RESEARCHER, model=model(name + "-sub"), tools=[lookup],
                           role="Looks keys up.", instructions="You look keys up.")
        runner: Agent | Team = Team(name=TEAM, model=model(name), members=[researcher],
                                    instructions="Delegate look-ups to the researcher.")
    else:
        runner = Agent(name=RESEARCHER, model=model(name), tools=[lookup],
                       instructions="You look keys up.",
                       tool_call_limit=3 if base == "limit" else None)
    if scenario.endswith("_async"):
        result = asyncio.run(runner.arun(TASKS[base]))
        print("status:", result.status, "answer:", result.content)
    elif stream:
        content = "".join(str(event.content) for event in runner.run(TASKS[base], stream=True)
                          if getattr(event, "event", "") in ("RunContent", "TeamRunContent")
                          and event.content)
        print("answer:", content)
    else:
        result = runner.run(TASKS[base])
        print("status:", result.status, "answer:", result.content)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
