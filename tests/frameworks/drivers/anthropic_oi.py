"""The home-grown Anthropic tool loop of anthropic_loop.py, traced by OpenInference
(openinference-instrumentation-anthropic) instead of OpenLLMetry. Scenarios (argv[1]):
``three_tools`` / ``limit`` / ``tool_error``.
"""

from __future__ import annotations

import sys

from anthropic_loop import run
from openinference.instrumentation.anthropic import AnthropicInstrumentor
from opentelemetry.sdk.trace import TracerProvider


def openinference(provider: TracerProvider) -> None:
    AnthropicInstrumentor().instrument(tracer_provider=provider)


if __name__ == "__main__":
    run(sys.argv[1], "anthropic-loop-oi", openinference)
