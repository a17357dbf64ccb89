"""Haystack agents traced by OpenInference (openinference-instrumentation-haystack).
Haystack is imported before ``instrument()``, as in OpenInference's examples: only the
component classes registered by then are wrapped. Scenarios: see ``_haystack``."""

from __future__ import annotations

import sys

from _haystack import run
from _otel import setup_tracing
from openinference.instrumentation.haystack import HaystackInstrumentor

SERVICE_NAME = "haystack-service"

if __name__ == "__main__":
    provider = setup_tracing(SERVICE_NAME)
    HaystackInstrumentor().instrument(tracer_provider=provider)
    run(sys.argv[1])
    provider.shutdown()
