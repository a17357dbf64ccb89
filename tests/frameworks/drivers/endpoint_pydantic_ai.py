"""pydantic-ai on its OpenAI chat model by name (``openai-chat:MODEL``): its provider reads
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``, so the base URL alone points it at the sidecar.
Mode (argv[1]): ``run`` (``Agent.run``) or ``stream`` (``Agent.run_stream``, its text streamed),
or ``langfuse`` (``Agent.run`` instrumented as Langfuse's docs set it up: ``Agent.instrument_all()``
under the Langfuse SDK, the session set with ``propagate_attributes``; venv
``pydantic_ai_langfuse``; its spans go nowhere: the tracer provider is off,
``OTEL_SDK_DISABLED``). See :mod:`endpoint_common`."""

from __future__ import annotations

import asyncio
import sys

from endpoint_common import INSTRUCTIONS, TASK, done, model, own_limit, search
from pydantic_ai import Agent, UsageLimits


async def main(mode: str) -> None:
    agent = Agent(f"openai-chat:{model()}", instructions=INSTRUCTIONS, tools=[search])
    limits = UsageLimits(request_limit=own_limit(50))  # (50: its default)
    if mode == "langfuse":
        import os

        from langfuse import Langfuse, propagate_attributes

        os.environ.update({"LANGFUSE_PUBLIC_KEY": "pk-lf-fake-never-sent",
                           "LANGFUSE_SECRET_KEY": "sk-lf-fake-never-sent",
                           "LANGFUSE_BASE_URL": "http://127.0.0.1:9"})
        Langfuse(should_export_span=lambda span: False)
        Agent.instrument_all()
        with propagate_attributes(session_id="endpoint-session"):
            done((await agent.run(TASK)).output)
    elif mode == "stream":
        async with agent.run_stream(TASK, usage_limits=limits) as result:
            done(await result.get_output())
    else:
        done((await agent.run(TASK, usage_limits=limits)).output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
