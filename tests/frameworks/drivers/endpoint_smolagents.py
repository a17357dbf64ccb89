"""A smolagents ``ToolCallingAgent`` on ``OpenAIServerModel`` (no ``api_base``: its OpenAI client
reads ``OPENAI_BASE_URL``, so the base URL alone points it at the sidecar). Mode (argv[1]):
``run``. See :mod:`endpoint_common`."""

from __future__ import annotations

import sys

from endpoint_common import TASK, done, model, search
from smolagents import OpenAIServerModel, ToolCallingAgent, tool


def main(_mode: str) -> None:
    search_tool = tool(search)
    agent = ToolCallingAgent(tools=[search_tool], model=OpenAIServerModel(model()),
                             max_steps=30, verbosity_level=0)
    done(agent.run(TASK))


if __name__ == "__main__":
    main(sys.argv[1])
