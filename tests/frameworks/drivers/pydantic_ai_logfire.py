"""pydantic-ai traced by Pydantic Logfire (``logfire.instrument_pydantic_ai()``), exported to the
sidecar only (``send_to_logfire=False``: Logfire's own OTLP exporter for the standard
``OTEL_EXPORTER_OTLP_ENDPOINT``; the recorder as one more span processor), on the OpenAI chat
model against the scripted model server.

The tool function is also traced by OpenInference's own tracer (``@tracer.tool``, as
OpenInference's docs show for one's own tools): inside pydantic-ai's ``execute_tool lookup``
span (``gen_ai.*``), a ``lookup`` TOOL span (``openinference.span.kind``); when the tool raises,
both tool spans record the one exception (the same type and message). Scenarios (argv[1]):
``three_tools``, ``limit`` (``UsageLimits(request_limit=3)``), ``tool_error`` (the exception
leaves the run).
"""

from __future__ import annotations

import asyncio
import os
import sys

from _otel import JsonLinesExporter, model_settings
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

os.environ["OTEL_METRICS_EXPORTER"] = "none"  # the sidecar takes traces only
os.environ["OTEL_LOGS_EXPORTER"] = "none"
import logfire
from openinference.instrumentation import OITracer, TraceConfig
from opentelemetry import trace
from pydantic_ai import Agent, UsageLimits
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

tracer = OITracer(trace.get_tracer("research-tools"), config=TraceConfig())


@tracer.tool(name="lookup", description="Look a key up.")
def lookup(key: str) -> str:
    """Look a key up."""
    if key == "broken":
        raise RuntimeError(f"backend unavailable for {key}")
    return f"value of {key}"


async def main(scenario: str) -> None:
    record = os.environ.get("RECORD_SPANS")  # each span as it ends, one request per line
    logfire.configure(send_to_logfire=False, service_name="pydantic-ai-logfire", console=False,
                      additional_span_processors=[SimpleSpanProcessor(JsonLinesExporter(record))]
                      if record else None)
    logfire.instrument_pydantic_ai()
    base_url, name = model_settings()
    researcher = Agent(OpenAIChatModel(name, provider=OpenAIProvider(base_url=base_url,
                                                                     api_key="sk-fake")),
                       name="pydantic-researcher", tools=[lookup],
                       instructions="Look things up, then answer.")
    limits = UsageLimits(request_limit=3) if scenario == "limit" else None
    try:
        print((await researcher.run("Look up a, b and c.", usage_limits=limits)).output)
    except (UsageLimitExceeded, RuntimeError) as exc:
        print("stopped:", type(exc).__name__, exc)
    logfire.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
