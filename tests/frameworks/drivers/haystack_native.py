"""Haystack agents traced by Haystack's own OpenTelemetry tracer (haystack-ai 3.x: the
``opentelemetry-haystack`` integration's ``OpenTelemetryTracer``, enabled with
``haystack.tracing.enable_tracing``), content tracing on (``HAYSTACK_CONTENT_TRACING_ENABLED``
= ``true``); a scenario ending ``_nocontent`` runs with it off (Haystack's default).
Scenarios: see ``_haystack``."""

from __future__ import annotations

import os
import sys

from _otel import setup_tracing

SERVICE_NAME = "haystack-service"  # no span names the agent

if __name__ == "__main__":
    scenario = sys.argv[1]
    os.environ["HAYSTACK_CONTENT_TRACING_ENABLED"] = \
        "false" if scenario.endswith("_nocontent") else "true"
    provider = setup_tracing(SERVICE_NAME)
    from haystack import tracing
    from haystack_integrations.tracing.opentelemetry import OpenTelemetryTracer

    tracing.enable_tracing(OpenTelemetryTracer(provider.get_tracer("haystack")))
    from _haystack import run

    run(scenario.removesuffix("_nocontent"))
    provider.shutdown()
