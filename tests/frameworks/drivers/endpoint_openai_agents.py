"""The OpenAI Agents SDK on its default model (the Responses API through the SDK's default
client), pointed at the sidecar by ``OPENAI_BASE_URL`` alone; its tracing to OpenAI's backend
is off by environment (``OPENAI_AGENTS_DISABLE_TRACING=1``). Mode (argv[1]): ``responses``, or
``chat`` (``OPENAI_AGENTS_API=chat_completions`` would be the env line; here
``set_default_openai_api``), or ``laminar`` (``responses`` traced as Laminar's docs set it up,
``Laminar.initialize()`` before the agent: its trace processor and its instrumentation of the
OpenAI client; venv ``openai_agents_laminar``; its spans go nowhere: its exporter's endpoint is
a closed port). See :mod:`endpoint_common`."""

from __future__ import annotations

import asyncio
import sys

from agents import Agent, Runner, function_tool, set_default_openai_api
from endpoint_common import INSTRUCTIONS, TASK, done, model, own_limit, search


async def main(mode: str) -> None:
    if mode == "chat":
        set_default_openai_api("chat_completions")
    if mode == "laminar":
        from lmnr import Laminar

        Laminar.initialize(project_api_key="never-sent", base_url="http://127.0.0.1",
                           http_port=9, force_http=True)
    agent = Agent(name="researcher", instructions=INSTRUCTIONS, model=model(),
                  tools=[function_tool(search)])
    result = await Runner.run(agent, TASK, max_turns=own_limit(30))
    done(result.final_output)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
