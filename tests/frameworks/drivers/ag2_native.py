"""AG2 1.x (the ``ag2`` package) traced by its own ``TelemetryMiddleware`` (``ag2[tracing]``),
as AG2's docs set it up: an ``Agent`` with the tool on its ``OpenAIConfig`` (the scripted model
server's base URL), the middleware given the agent's name and exporting through the global
tracer provider. AG2's loop has no cap of its own: it calls the model until it answers without
a tool call. Scenarios (argv[1]): ``three_tools``, ``tool_error`` (the tool's exception is
handed to the model as a tool error), ``repeat`` (the same call five times, then an answer),
``two_asks`` (two ``ask`` calls of one agent: two invocations); ``three_tools_bare``: the
middleware without the agent's name (AG2's default, ``unknown``); ``three_tools_session``: the
application's session on every span (``session.id`` in the middleware's ``span_attributes``).
"""

from __future__ import annotations

import asyncio
import sys

from _otel import model_settings, setup_tracing
from _tools import TASKS, lookup
from ag2 import Agent
from ag2.config import OpenAIConfig
from ag2.middleware.builtin import TelemetryMiddleware

NAME = "ag2-researcher"
SESSION = "session-42"


async def main(scenario: str) -> None:
    provider = setup_tracing("ag2-app")
    base_url, model = model_settings()
    if scenario.endswith("_bare"):
        telemetry = TelemetryMiddleware(provider_name="openai")
    else:  # (span_attributes: stamped on every span the middleware emits)
        telemetry = TelemetryMiddleware(agent_name=NAME, provider_name="openai", span_attributes=(
            {"session.id": SESSION} if scenario.endswith("_session") else None))
    agent = Agent(NAME, "Look things up, then answer.",
                  config=OpenAIConfig(model=model, base_url=base_url, api_key="sk-fake"),
                  tools=[lookup], middleware=[telemetry])
    base = scenario.removesuffix("_bare").removesuffix("_session")
    asks = ["Look up a.", "Look up b."] if base == "two_asks" else [
        TASKS.get(base, "Look up a, again and again.")]
    for task in asks:
        reply = await agent.ask(task)
        print(reply.body)
    provider.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
