"""Agno agents (agno 3.1) on ``OpenAIChat`` against the scripted model server, traced by
OpenLLMetry as ``Traceloop.init()`` sets it up: opentelemetry-instrumentation-agno for the
agents, teams and tools and opentelemetry-instrumentation-openai for the model calls.

Scenarios (argv[1]), the same as tests/frameworks/drivers/agno_oi.py's:
- ``three_tools``: ``Agent`` ``agno_researcher`` looks a, b and c up, then answers;
- ``limit``: the model asks for ``lookup`` forever; ``tool_call_limit=3``: Agno runs three calls,
  answers the fourth request's call with "Tool call limit reached…" (no run) and asks again;
  the model then answers;
- ``tool_error``: ``lookup("broken")`` raises; Agno hands the error text to the model, which
  answers;
- ``team``: a ``Team`` ``agno_team`` (leader model ``<name>``) delegates to its member
  ``agno_researcher`` (model ``<name>-sub``) through ``delegate_task_to_member``; the member
  looks a, b and c up and answers; the leader answers.
"""

from __future__ import annotations

import sys

from _otel import model_settings, setup_tracing
from _tools import TASKS as BASE_TASKS
from _tools import lookup
from opentelemetry.instrumentation.agno import AgnoInstrumentor
from opentelemetry.instrumentation.openai import OpenAIInstrumentor

TASKS = {**BASE_TASKS, "team": "Find out a, b and c."}


def main(scenario: str) -> None:
    provider = setup_tracing("agno-olm-service")
    AgnoInstrumentor().instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat
    from agno.team import Team

    base_url, name = model_settings()

    def model(model_id: str) -> OpenAIChat:
        return OpenAIChat(id=model_id, base_url=base_url, api_key="sk-fake")

    if scenario == "team":
        researcher = Agent(name="agno_researcher", model=model(name + "-sub"), tools=[lookup],
                           role="Looks keys up.", instructions="You look keys up.")
        runner: Agent | Team = Team(name="agno_team", model=model(name), members=[researcher],
                                    instructions="Delegate look-ups to the researcher.")
    else:
        runner = Agent(name="agno_researcher", model=model(name), tools=[lookup],
                       instructions="You look keys up.",
                       tool_call_limit=3 if scenario == "limit" else None)
    result = runner.run(TASKS[scenario])
    print("status:", result.status, "answer:", result.content)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
