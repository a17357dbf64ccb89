"""A LlamaIndex ``FunctionAgent`` on ``llama_index.llms.openai_like.OpenAILike`` (the OpenAI LLM
class for a model name OpenAI does not list). LlamaIndex builds its OpenAI client with a base URL
of its own (``api_base``, else ``OPENAI_API_BASE``, else api.openai.com): it never reads
``OPENAI_BASE_URL``, so the driver hands that base URL to its ``api_base`` setting. Mode
(argv[1]): ``run`` (``streaming=False``), ``stream`` (FunctionAgent's default: the model
streamed), ``workflow`` (the agent in an ``AgentWorkflow``, streamed, its events read as they
come); ``handoff``: an ``AgentWorkflow`` whose researcher (the one tool, and LlamaIndex's
``handoff``) may hand the conversation to a writer (no tools of its own, its own system prompt).
See :mod:`endpoint_common`."""

from __future__ import annotations

import asyncio
import os
import sys

from endpoint_common import INSTRUCTIONS, TASK, done, model, own_limit, search
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.llms.openai_like import OpenAILike

WRITER = "You are the writer: write the findings up."


async def main(mode: str) -> None:
    llm = OpenAILike(model=model(), api_base=os.environ["OPENAI_BASE_URL"],
                     api_key=os.environ["OPENAI_API_KEY"], is_chat_model=True,
                     is_function_calling_model=True, context_window=32000)
    agent = FunctionAgent(name="researcher", description="Searches files.",
                          system_prompt=INSTRUCTIONS, tools=[search], llm=llm,
                          streaming=mode != "run",
                          can_handoff_to=["writer"] if mode == "handoff" else None)
    if mode == "handoff":
        writer = FunctionAgent(name="writer", description="Writes the findings up.",
                               system_prompt=WRITER, tools=[], llm=llm)
        result = await AgentWorkflow(agents=[agent, writer], root_agent="researcher").run(
            user_msg=TASK, max_iterations=own_limit(30))
    elif mode == "workflow":
        handler = AgentWorkflow(agents=[agent], root_agent="researcher").run(
            user_msg=TASK, max_iterations=own_limit(30))
        async for _event in handler.stream_events():
            pass
        result = await handler
    else:
        result = await agent.run(user_msg=TASK, max_iterations=own_limit(30))
    done(str(result.response.content))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
