"""The OpenAI Agents SDK on its default model (the Responses API through the SDK's default
client), pointed at the sidecar by ``OPENAI_BASE_URL`` alone; its tracing to OpenAI's backend
is off by environment (``OPENAI_AGENTS_DISABLE_TRACING=1``). Mode (argv[1]): ``responses``, or
``chat`` (``OPENAI_AGENTS_API=chat_completions`` would be the env line; here
``set_default_openai_api``). See :mod:`endpoint_common`."""

from __future__ import annotations

import asyncio
import sys

from agents import Agent, Runner, function_tool, set_default_openai_api
from endpoint_common import INSTRUCTIONS, TASK, done, model, search


async def main(mode: str) -> None:
    if mode == "chat":
        set_default_openai_api("chat_completions")
    agent = Agent(name="researcher", instructions=INSTRUCTIONS, model=model(),
                  tools=[function_tool(search)])
    result = await Runner.run(agent, TASK, max_turns=30)
    done(result.final_output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
