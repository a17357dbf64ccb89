"""An AutoGen AgentChat ``AssistantAgent`` on autogen-ext's ``OpenAIChatCompletionClient`` (no
``base_url``: its OpenAI client reads ``OPENAI_BASE_URL``, so the base URL alone points it at the
sidecar). ``max_tool_iterations=30``: the agent's own loop calls the model until it answers
without a tool call; ``reflect_on_tool_use`` stays off (on a budget the last request has no
tools, so the agent's own loop ends on its answer). Mode (argv[1]): ``run`` or ``stream``
(``run_stream`` with ``model_client_stream=True``: the model is streamed). See
:mod:`endpoint_common`."""

from __future__ import annotations

import asyncio
import sys

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.base import TaskResult
from autogen_ext.models.openai import OpenAIChatCompletionClient
from endpoint_common import INSTRUCTIONS, TASK, done, model, own_limit, search

# a model name AutoGen does not know needs its capabilities said
MODEL_INFO = {"vision": False, "function_calling": True, "json_output": False,
              "family": "unknown", "structured_output": False}


async def main(mode: str) -> None:
    client = OpenAIChatCompletionClient(model=model(), model_info=MODEL_INFO)
    agent = AssistantAgent("researcher", model_client=client, tools=[search],
                           system_message=INSTRUCTIONS, max_tool_iterations=own_limit(30),
                           model_client_stream=mode == "stream")
    result: TaskResult | None = None
    if mode == "stream":
        async for item in agent.run_stream(task=TASK):
            if isinstance(item, TaskResult):
                result = item
    else:
        result = await agent.run(task=TASK)
    assert result is not None
    await client.close()
    done(result.messages[-1].to_text())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
