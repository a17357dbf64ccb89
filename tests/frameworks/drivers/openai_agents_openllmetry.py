"""The OpenAI Agents SDK traced by Traceloop's OpenLLMetry: opentelemetry-instrumentation-
openai-agents and -openai (what ``Traceloop.init()`` instruments when both are installed); the
scenarios are :mod:`openai_agents_sdk`'s."""

from __future__ import annotations

import asyncio
import sys

from openai_agents_sdk import main
from opentelemetry.instrumentation.openai import OpenAIInstrumentor
from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor
from opentelemetry.sdk.trace import TracerProvider


def instrument(provider: TracerProvider) -> None:
    OpenAIAgentsInstrumentor().instrument(tracer_provider=provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], instrument))
