"""The OpenAI Agents SDK traced by OpenLIT: ``openlit.init()`` (it reuses the tracer provider
already set, exporting to the sidecar, and instruments every library it knows that is
installed: the Agents SDK and the OpenAI client here); the scenarios are
:mod:`openai_agents_sdk`'s."""

from __future__ import annotations

import asyncio
import sys

import openlit
from openai_agents_sdk import main
from opentelemetry.sdk.trace import TracerProvider


def instrument(provider: TracerProvider) -> None:
    openlit.init(service_name="openai-agents-service", disable_metrics=True,
                 disable_events=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], instrument))
