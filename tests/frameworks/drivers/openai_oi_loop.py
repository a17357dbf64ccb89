"""A hand-written agent loop on the OpenAI client, traced by OpenInference's
openinference-instrumentation-openai (one ``ChatCompletion`` LLM span per model call) and its
tool calls by OpenInference's own tracer (``OITracer.tool``: a TOOL span named after the tool,
``input.value``/``output.value``, the exception recorded when it raises).

Nothing encloses the loop, as in many hand-written agents: each model call and each tool call
is a trace of its own. At its own cap (``limit``) the loop stops, and no span says so.
Scenarios (argv[1]): three_tools / limit / tool_error.
"""

from __future__ import annotations

import sys
from typing import Any

from _handwritten_loop import StepLimitReached, run_loop
from _otel import add_exporters
from _tools import lookup
from openinference.instrumentation import TracerProvider
from openinference.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.sdk.resources import Resource


def main(scenario: str) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "openai-oi-loop"}))
    add_exporters(provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("research-agent")

    @tracer.tool(name="lookup", description="Look a key up.")
    def traced_lookup(key: str) -> str:
        return lookup(key)

    def call_tool(name: str, args: dict[str, Any]) -> str:
        return str(traced_lookup(**args))

    try:
        print("answer:", run_loop(scenario, call_tool))
    except StepLimitReached as exc:
        print("stopped:", exc)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
