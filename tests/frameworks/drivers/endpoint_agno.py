"""An Agno ``Agent`` on ``OpenAIChat`` (Chat Completions) or ``OpenAIResponses`` (the Responses
API), neither given a base URL: their OpenAI client reads ``OPENAI_BASE_URL``, so the base URL
alone points it at the sidecar. Mode (argv[1]): ``chat``, ``chat_stream``, ``responses``,
``responses_stream`` (``stream=True``: the model is streamed); ``team``: a ``Team`` on
``OpenAIChat`` whose leader (no tools but Agno's ``delegate_task_to_member``) delegates to one
member, the searcher (the one tool); ``langtrace``: ``chat`` traced by Langtrace
(``langtrace.init()``: its Agno and OpenAI instrumentations; venv ``agno_langtrace``; its spans
go nowhere: its exporter's endpoint is a closed port). See :mod:`endpoint_common`."""

from __future__ import annotations

import sys

from agno.agent import Agent, RunOutput
from agno.models.openai import OpenAIChat, OpenAIResponses
from agno.team import Team
from endpoint_common import INSTRUCTIONS, TASK, done, model, search

SEARCHER = "You are the searcher: search the files."


def main(mode: str) -> None:
    if mode == "langtrace":
        import os

        os.environ["LANGTRACE_ERROR_REPORTING"] = "False"  # (else Sentry, off this machine)
        from langtrace_python_sdk import langtrace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # (given no host, without an API key it traces nothing: its own backend's is needed)
        langtrace.init(api_host="http://127.0.0.1:9", custom_remote_exporter=OTLPSpanExporter(
            endpoint="http://127.0.0.1:9/v1/traces"))
    if mode == "team":
        searcher = Agent(name="searcher", role="Searches files", model=OpenAIChat(id=model()),
                         tools=[search], instructions=SEARCHER, telemetry=False)
        team = Team(name="lead", members=[searcher], model=OpenAIChat(id=model()),
                    instructions=INSTRUCTIONS, telemetry=False)
        done(str(team.run(TASK).content))
        return
    llm = OpenAIResponses(id=model()) if mode.startswith("responses") else OpenAIChat(id=model())
    agent = Agent(model=llm, tools=[search], instructions=INSTRUCTIONS, telemetry=False)
    if mode.endswith("stream"):
        # the events as they come, then the run's output (yield_run_output)
        runs = [event for event in agent.run(TASK, stream=True, stream_events=True,
                                             yield_run_output=True)
                if isinstance(event, RunOutput)]
        output = str(runs[-1].content)
    else:
        output = str(agent.run(TASK).content)
    done(output)


if __name__ == "__main__":
    main(sys.argv[1])
