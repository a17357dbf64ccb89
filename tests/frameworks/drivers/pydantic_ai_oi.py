"""pydantic-ai on the OpenAI chat model against the scripted model server, traced by
OpenInference (openinference-instrumentation-pydantic-ai) as its README sets it up:
``Agent.instrument_all()`` makes pydantic-ai's own spans, and ``OpenInferenceSpanProcessor``,
ahead of the exporters, adds OpenInference's attributes to each as it ends.

Scenarios (argv[1]), those of tests/frameworks/drivers/pydantic_ai_agent.py: ``three_tools``,
``limit`` (``UsageLimits(request_limit=3)``), ``tool_error``, ``subagent`` (a coordinator whose
tool runs a researcher agent: a parent run and a child run).
"""

from __future__ import annotations

import asyncio
import sys

from _otel import add_exporters, model_settings
from _tools import lookup
from openinference.instrumentation.pydantic_ai import OpenInferenceSpanProcessor
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent, InstrumentationSettings, UsageLimits
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider


def model(name: str) -> OpenAIChatModel:
    base_url, _ = model_settings()
    return OpenAIChatModel(name, provider=OpenAIProvider(base_url=base_url, api_key="sk-fake"))


async def main(scenario: str) -> None:
    provider = TracerProvider(resource=Resource.create({"service.name": "pydantic-ai-oi"}))
    provider.add_span_processor(OpenInferenceSpanProcessor())  # before the exporters
    add_exporters(provider)
    trace.set_tracer_provider(provider)
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider))
    _, name = model_settings()
    researcher = Agent(model(name + "-sub" if scenario == "subagent" else name),
                       name="pydantic-researcher", tools=[lookup],
                       instructions="Look things up, then answer.")
    try:
        if scenario == "subagent":
            coordinator = Agent(model(name), name="pydantic-coordinator",
                                instructions="Delegate research, then answer.")

            @coordinator.tool_plain
            async def research(question: str) -> str:
                """Ask the researcher."""
                return (await researcher.run(question)).output

            print((await coordinator.run("Find a, b and c.")).output)
        else:
            limits = UsageLimits(request_limit=3) if scenario == "limit" else None
            print((await researcher.run("Look up a, b and c.", usage_limits=limits)).output)
    except (UsageLimitExceeded, RuntimeError) as exc:
        print("stopped:", type(exc).__name__, exc)
    provider.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
