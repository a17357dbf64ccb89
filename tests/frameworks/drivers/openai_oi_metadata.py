"""A hand-written agent loop on the OpenAI client, traced by OpenInference: each model call by
openinference-instrumentation-openai (a ``ChatCompletion`` LLM span), the loop and its tool
calls by OpenInference's own tracer (``OITracer``: a ``CHAIN`` span for the run, named after
what it does, and a TOOL span per tool call, the exception recorded when it raises).

The agent is named only where OpenInference's documented context helper puts it:
``using_metadata({"agent_name": ...})`` around the run, which every OpenInference span started
inside it carries as its ``metadata`` attribute (JSON); no span names an agent otherwise. At its
own cap (``limit``) the loop raises, and the run span records that exception.
Scenarios (argv[1]): three_tools / limit / tool_error.
"""

from __future__ import annotations

import sys
from typing import Any

from _handwritten_loop import StepLimitReached, run_loop
from _otel import add_exporters
from _tools import TASKS, lookup
from openinference.instrumentation import TracerProvider, using_metadata
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.sdk.resources import Resource

AGENT = "research-agent"


def main(scenario: str) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "openai-oi-metadata"}))
    add_exporters(provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("research-agent")

    @tracer.tool(name="lookup", description="Look a key up.")
    def traced_lookup(key: str) -> str:
        return lookup(key)

    def call_tool(name: str, args: dict[str, Any]) -> str:
        return str(traced_lookup(**args))

    try:  # the span records the exception that leaves it
        with using_metadata({"agent_name": AGENT, "team": "research"}), \
                tracer.start_as_current_span("answer question", openinference_span_kind="chain"
                                             ) as run:
            run.set_input(TASKS[scenario])
            answer = run_loop(scenario, call_tool)
            run.set_output(answer)
        print("answer:", answer)
    except StepLimitReached as exc:
        print("stopped:", exc)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
