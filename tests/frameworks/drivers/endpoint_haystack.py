"""A Haystack ``Agent`` (``haystack.components.agents``) on ``OpenAIChatGenerator`` with
``api_base_url`` the sidecar's (``OPENAI_BASE_URL``; Haystack's generator reads its own
``OPENAI_API_KEY`` but no base URL from the environment); its output is the text of the run's
``last_message``. Mode (argv[1]): ``run``; ``stream`` (a ``streaming_callback``: the model
streams). See :mod:`endpoint_common`."""

from __future__ import annotations

import os
import sys
from typing import Any

from endpoint_common import INSTRUCTIONS, TASK, done, model, own_limit, search
from haystack.components.agents import Agent
from haystack.components.generators.chat import OpenAIChatGenerator
from haystack.dataclasses import ChatMessage
from haystack.tools import tool


def main(mode: str) -> None:
    chunks: list[Any] = []
    generator = OpenAIChatGenerator(model=model(), api_base_url=os.environ["OPENAI_BASE_URL"])
    agent = Agent(chat_generator=generator, tools=[tool(search)], system_prompt=INSTRUCTIONS,
                  max_agent_steps=own_limit(100),
                  streaming_callback=chunks.append if mode == "stream" else None)
    result = agent.run(messages=[ChatMessage.from_user(TASK)])
    assert mode != "stream" or chunks, "the stream mode streamed nothing"
    done(result["last_message"].text)


if __name__ == "__main__":
    main(sys.argv[1])
