"""An AG2 1.x ``Agent`` on its ``OpenAIConfig`` with no ``base_url``: the OpenAI client beneath it
reads ``OPENAI_BASE_URL``, so the base URL alone points it at the sidecar. AG2's loop calls the
model until it answers without a tool call. Mode (argv[1]): ``run`` (``Agent.ask``) or
``stream`` (the same, the model's answers streamed: ``OpenAIConfig(streaming=True)``). See
:mod:`endpoint_common`."""

from __future__ import annotations

import asyncio
import sys

from ag2 import Agent
from ag2.config import OpenAIConfig
from endpoint_common import INSTRUCTIONS, TASK, done, model, search


async def main(mode: str) -> None:
    config = OpenAIConfig(model=model(), streaming={"run": False, "stream": True}[mode])
    agent = Agent("researcher", INSTRUCTIONS, config=config, tools=[search])
    reply = await agent.ask(TASK)
    done(reply.body)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
