"""The OpenAI Agents SDK traced by Pydantic Logfire (``logfire.instrument_openai_agents()``),
exported to the sidecar only (``send_to_logfire=False``: Logfire's own OTLP exporter for the
standard ``OTEL_EXPORTER_OTLP_ENDPOINT``; the recorder as one more span processor); the
scenarios are :mod:`openai_agents_sdk`'s.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from _otel import JsonLinesExporter
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

os.environ["OTEL_METRICS_EXPORTER"] = "none"  # the sidecar takes traces only
os.environ["OTEL_LOGS_EXPORTER"] = "none"
import logfire
from openai_agents_sdk import main


class _Logfire:
    """What :func:`openai_agents_sdk.main` calls on its tracer provider: Logfire's own."""

    def shutdown(self) -> None:
        logfire.shutdown()


def tracing(service_name: str) -> Any:
    record = os.environ.get("RECORD_SPANS")  # each span as it ends, one request per line
    logfire.configure(send_to_logfire=False, service_name=service_name, console=False,
                      additional_span_processors=[SimpleSpanProcessor(JsonLinesExporter(record))]
                      if record else None)
    return _Logfire()


def instrument(provider: Any) -> None:
    logfire.instrument_openai_agents()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], instrument, tracing))
