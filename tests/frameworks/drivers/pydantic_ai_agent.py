"""pydantic-ai with its own instrumentation (``Agent.instrument_all()``), on the OpenAI chat
model against the scripted model server. Scenarios (argv[1]): ``three_tools``, ``limit``
(``UsageLimits(request_limit=3)``), ``tool_error``, ``subagent`` (a coordinator whose tool runs
a researcher agent: a parent run and a child run), ``structured`` (``three_tools`` with a
structured output: the answer is the output tool ``final_result``). A scenario ending
``_nocontent`` runs with message content off (``InstrumentationSettings(include_content=False)``,
what a privacy-minded deployment sets)."""

from __future__ import annotations

import asyncio
import sys

from _otel import model_settings, setup_tracing
from pydantic import BaseModel
from pydantic_ai import Agent, InstrumentationSettings, UsageLimits
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider


def model(name: str) -> OpenAIChatModel:
    base_url, _ = model_settings()
    return OpenAIChatModel(name, provider=OpenAIProvider(base_url=base_url, api_key="sk-fake"))


class Findings(BaseModel):
    summary: str


def lookup(key: str) -> str:
    """Look a key up."""
    if key == "broken":
        raise RuntimeError(f"backend unavailable for {key}")
    return f"value of {key}"


async def main(scenario: str) -> None:
    provider = setup_tracing("pydantic-ai-service")
    include_content = not scenario.endswith("_nocontent")
    scenario = scenario.removesuffix("_nocontent")
    Agent.instrument_all(InstrumentationSettings(tracer_provider=provider,
                                                 include_content=include_content))
    _, name = model_settings()
    researcher = Agent(model(name + "-sub" if scenario == "subagent" else name),
                       name="pydantic-researcher", tools=[lookup],
                       instructions="Look things up, then answer.",
                       output_type=Findings if scenario == "structured" else str)
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
