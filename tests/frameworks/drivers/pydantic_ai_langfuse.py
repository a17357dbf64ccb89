"""pydantic-ai traced as Langfuse's docs set it up: ``Agent.instrument_all()`` under the Langfuse
Python SDK (OpenTelemetry-based since v3), the application's own observation around the run
(``start_as_current_observation``) and the trace's attributes (session, user, trace name) set
with ``propagate_attributes``, on the OpenAI chat model against the scripted model server.

Langfuse takes the tracer provider the application set (here the one exporting to the sidecar)
and adds its own span processor to it, which exports nothing here (``should_export_span``: the
keys are dummies, Langfuse's cloud is never reached). Scenarios (argv[1]): ``three_tools``,
``limit`` (``UsageLimits(request_limit=3)``), ``tool_error`` (the tool's exception leaves the
run); ``three_tools_bare``: the run alone, no observation or attributes of the application's.
"""

from __future__ import annotations

import asyncio
import os
import sys

os.environ.update({
    "LANGFUSE_PUBLIC_KEY": "pk-lf-fake-never-sent",
    "LANGFUSE_SECRET_KEY": "sk-lf-fake-never-sent",
    "LANGFUSE_BASE_URL": "http://127.0.0.1:9",  # unreachable on purpose: nothing goes there
})

from _otel import model_settings, setup_tracing
from _tools import TASKS, lookup
from langfuse import Langfuse, propagate_attributes
from pydantic_ai import Agent, UsageLimits
from pydantic_ai.exceptions import UsageLimitExceeded
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

SESSION = "session-42"


async def main(scenario: str) -> None:
    provider = setup_tracing("pydantic-ai-langfuse")
    langfuse = Langfuse(tracer_provider=provider, should_export_span=lambda span: False)
    Agent.instrument_all()
    base_url, name = model_settings()
    researcher = Agent(OpenAIChatModel(name, provider=OpenAIProvider(base_url=base_url,
                                                                     api_key="sk-fake")),
                       name="pydantic-researcher", tools=[lookup],
                       instructions="Look things up, then answer.")
    base = scenario.removesuffix("_bare")
    limits = UsageLimits(request_limit=3) if base == "limit" else None
    try:
        if scenario.endswith("_bare"):
            result = await researcher.run(TASKS[base], usage_limits=limits)
        else:
            with langfuse.start_as_current_observation(as_type="span", name="research"), \
                    propagate_attributes(session_id=SESSION, user_id="user-7",
                                         trace_name="research"):
                result = await researcher.run(TASKS[base], usage_limits=limits)
        print(result.output)
    except (UsageLimitExceeded, RuntimeError) as exc:
        print("stopped:", type(exc).__name__, exc)
    langfuse.flush()
    provider.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
