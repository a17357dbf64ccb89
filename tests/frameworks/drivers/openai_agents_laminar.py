"""The OpenAI Agents SDK traced by Laminar (``Laminar.initialize()``, as its docs set it up: its
own trace processor for the SDK and its instrumentation of the OpenAI client), exported over
OTLP/HTTP to the standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (Laminar reads it in place of its
own backend; the recorder as one more span processor on its tracer provider); the scenarios are
:mod:`openai_agents_sdk`'s.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from _otel import JsonLinesExporter
from openai_agents_sdk import main
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SimpleSpanProcessor


class _Laminar:
    """What :func:`openai_agents_sdk.main` calls on its tracer provider: Laminar's own."""

    def shutdown(self) -> None:
        from lmnr import Laminar

        Laminar.flush()
        Laminar.shutdown()


def tracing(service_name: str) -> Any:
    return _Laminar()


def instrument(provider: Any) -> None:
    # after the driver cleared the SDK's trace processors (no export to OpenAI's backend):
    # Laminar adds its own when it initialises
    from lmnr import Laminar

    Laminar.initialize(force_http=True)
    record = os.environ.get("RECORD_SPANS")  # each span as it ends, one request per line
    if record:
        trace.get_tracer_provider().add_span_processor(  # type: ignore[attr-defined]
            SimpleSpanProcessor(JsonLinesExporter(record)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], instrument, tracing))
