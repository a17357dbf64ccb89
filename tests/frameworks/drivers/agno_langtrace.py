"""Agno agents (an ``Agent`` ``agno_researcher`` with the tool ``lookup`` on ``OpenAIChat`` at
the scripted server) traced by Langtrace (``langtrace.init`` before Agno is imported, as its
docs set it up: its own instrumentation of Agno and of the OpenAI client), its spans handed to
the OTLP/HTTP exporter as its ``custom_remote_exporter`` (and to the recorder: :mod:`_otel`).
Scenarios (argv[1]): ``three_tools``, ``limit`` (``tool_call_limit=3``: Agno answers the fourth
request for a tool with a refusal of its own and asks the model again), ``tool_error``.
"""

from __future__ import annotations

import os
import sys

from _otel import JsonLinesExporter, model_settings
from _tools import TASKS, lookup
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor


def main(scenario: str) -> None:
    os.environ["LANGTRACE_ERROR_REPORTING"] = "False"  # (else Sentry, off this machine)
    from langtrace_python_sdk import langtrace

    # (it takes OTEL_EXPORTER_OTLP_ENDPOINT for its host: without one and without an API key
    # for its own backend it traces nothing)
    langtrace.init(custom_remote_exporter=OTLPSpanExporter(), batch=True)
    provider = trace.get_tracer_provider()
    if os.environ.get("RECORD_SPANS"):
        provider.add_span_processor(  # type: ignore[attr-defined]
            SimpleSpanProcessor(JsonLinesExporter(os.environ["RECORD_SPANS"])))
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat

    base_url, name = model_settings()
    agent = Agent(name="agno_researcher", tools=[lookup], instructions="You look keys up.",
                  telemetry=False,
                  model=OpenAIChat(id=name, base_url=base_url, api_key="sk-fake"),
                  tool_call_limit=3 if scenario == "limit" else None)
    result = agent.run(TASKS[scenario])
    print("status:", result.status, "answer:", result.content)
    provider.shutdown()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main(sys.argv[1])
