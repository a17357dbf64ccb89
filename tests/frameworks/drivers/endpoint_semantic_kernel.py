"""A Semantic Kernel ``ChatCompletionAgent`` on ``OpenAIChatCompletion`` whose ``async_client`` is
an ``AsyncOpenAI`` with ``base_url`` the sidecar's (``OPENAI_BASE_URL``), its tool a kernel
function called by SK's auto-invoke loop (``FunctionChoiceBehavior.Auto``; its own cap of 5
tool-calling rounds, after which SK asks once more without tools, raised to 30 as crewai's and
smolagents' step caps are here: the sidecar's limits are under test, not SK's); SK's own
diagnostics stay off (its switches unset). The model sees the tool by SK's fully qualified name
``<plugin>-<function>``: ``Files-search``. Its output is the content of the agent's last
response. Mode (argv[1]): ``invoke`` (``agent.get_response``); ``stream``
(``agent.invoke_stream``: the model streams). See :mod:`endpoint_common`."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Annotated

from endpoint_common import INSTRUCTIONS, TASK, done, model, own_limit, search
from openai import AsyncOpenAI
from semantic_kernel.agents import ChatCompletionAgent
from semantic_kernel.connectors.ai import FunctionChoiceBehavior
from semantic_kernel.connectors.ai.open_ai import OpenAIChatCompletion
from semantic_kernel.functions import kernel_function


class Files:
    @kernel_function(name="search", description="Search the files for a term.")
    def search(self, q: Annotated[str, "the term to search for"]) -> str:
        return search(q)


async def run(mode: str) -> str:
    client = AsyncOpenAI(base_url=os.environ["OPENAI_BASE_URL"])
    agent = ChatCompletionAgent(
        service=OpenAIChatCompletion(ai_model_id=model(), async_client=client),
        name="researcher", instructions=INSTRUCTIONS, plugins=[Files()],
        function_choice_behavior=FunctionChoiceBehavior.Auto(maximum_auto_invoke_attempts=own_limit(30)))
    if mode == "stream":
        parts = [str(chunk.content) async for chunk in agent.invoke_stream(messages=TASK)]
        return "".join(parts)
    return str((await agent.get_response(messages=TASK)).content)


def main(mode: str) -> None:
    done(asyncio.run(run(mode)))


if __name__ == "__main__":
    main(sys.argv[1])
