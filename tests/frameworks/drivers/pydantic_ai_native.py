"""pydantic-ai agents on its OpenAI chat model (the fake server), traced by pydantic-ai's own
instrumentation (``Agent.instrument_all()``). Runs in the main venv.

Scenarios (argv[1]):
- ``three_tools``: ``pa_researcher`` calls ``lookup`` 3 times, then answers in text;
- ``structured``: the same with a structured output: the answer is the ``final_result`` tool;
- ``limit``: the model calls ``lookup`` forever; ``UsageLimits(request_limit=3)`` stops it with
  ``UsageLimitExceeded`` (caught here, as an application would);
- ``tool_error``: ``lookup`` raises; pydantic-ai lets a tool's exception end the run (caught
  here);
- ``delegate``: ``pa_manager``'s tool ``research`` runs the agent ``pa_researcher`` (model
  ``<model>-sub``: one ``lookup``, then an answer); the manager then answers.
"""

from __future__ import annotations

import sys

from _otel import model_settings, setup_tracing
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import AgentRunError
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import UsageLimits


class Findings(BaseModel):
    summary: str


def lookup(key: str) -> str:
    """Look a key up."""
    if key == "broken":
        raise RuntimeError(f"backend unavailable for {key}")
    return f"value of {key}"


def main(scenario: str) -> None:
    provider = setup_tracing("pydantic-ai-service")
    Agent.instrument_all()
    base_url, model_name = model_settings()
    openai = OpenAIProvider(base_url=base_url, api_key="sk-fake")

    def model(name: str) -> OpenAIChatModel:
        return OpenAIChatModel(name, provider=openai)

    limits = UsageLimits(request_limit=3) if scenario == "limit" else None
    if scenario == "delegate":
        researcher = Agent(model(model_name + "-sub"), name="pa_researcher", tools=[lookup])
        agent: Agent = Agent(model(model_name), name="pa_manager")

        @agent.tool
        async def research(ctx: RunContext[None], question: str) -> str:
            """Ask the research agent a question."""
            return (await researcher.run(question, usage=ctx.usage)).output

    elif scenario == "structured":
        agent = Agent(model(model_name), name="pa_researcher", tools=[lookup],
                      output_type=Findings)
    else:
        agent = Agent(model(model_name), name="pa_researcher", tools=[lookup])
    try:
        result = agent.run_sync("Look up a, b and c.", usage_limits=limits)
        print("answer:", result.output)
    except (AgentRunError, RuntimeError) as exc:
        print("stopped:", type(exc).__name__, exc)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
