"""A CAMEL-AI agent (``camel.agents.ChatAgent`` with the tool ``search`` a ``FunctionTool``) on
its OpenAI model (``ModelFactory.create(ModelPlatformType.OPENAI, ...)``: the ``openai`` client
beneath reads ``OPENAI_BASE_URL``), so the base URL alone points it at the sidecar. Mode
(argv[1]): ``step`` (a whole response per request), ``step_stream`` (``stream: True`` in its
model config), ``astep`` and ``astep_stream`` (the same, awaited). See :mod:`endpoint_common`.
"""

from __future__ import annotations

import asyncio
import sys

import _camel  # noqa: F401 (first: tiktoken's file)
from camel.agents import ChatAgent
from camel.models import ModelFactory
from camel.responses import ChatAgentResponse
from camel.toolkits import FunctionTool
from camel.types import ModelPlatformType
from endpoint_common import INSTRUCTIONS, TASK, done, model, search


def agent(stream: bool) -> ChatAgent:
    backend = ModelFactory.create(model_platform=ModelPlatformType.OPENAI, model_type=model(),
                                  model_config_dict={"stream": stream})
    return ChatAgent(system_message=INSTRUCTIONS, model=backend,
                     tools=[FunctionTool(search)], stream_accumulate=False)


def text(response: ChatAgentResponse) -> str:
    return "".join(message.content for message in response.msgs)


async def astep(camel: ChatAgent, stream: bool) -> str:
    response = await camel.astep(TASK)
    if not stream:
        return text(response)
    return "".join([text(delta) async for delta in response])  # its deltas, as they come


def main(mode: str) -> None:
    assert mode in ("step", "step_stream", "astep", "astep_stream"), mode
    stream = mode.endswith("_stream")
    camel = agent(stream)
    if mode.startswith("astep"):
        done(asyncio.run(astep(camel, stream)))
    elif stream:
        done("".join(text(delta) for delta in camel.step(TASK)))
    else:
        done(text(camel.step(TASK)))


if __name__ == "__main__":
    main(sys.argv[1])
