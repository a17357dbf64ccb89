"""pydantic-ai on its OpenAI chat model by name (``openai-chat:MODEL``): its provider reads
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``, so the base URL alone points it at the sidecar.
Mode (argv[1]): ``run`` (``Agent.run``) or ``stream`` (``Agent.run_stream``, its text streamed).
See :mod:`endpoint_common`."""

from __future__ import annotations

import asyncio
import sys

from endpoint_common import INSTRUCTIONS, TASK, done, model, search
from pydantic_ai import Agent


async def main(mode: str) -> None:
    agent = Agent(f"openai-chat:{model()}", instructions=INSTRUCTIONS, tools=[search])
    if mode == "stream":
        async with agent.run_stream(TASK) as result:
            done(await result.get_output())
    else:
        done((await agent.run(TASK)).output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
