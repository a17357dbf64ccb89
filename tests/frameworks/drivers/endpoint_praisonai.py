"""A PraisonAI Agents ``Agent`` (``praisonaiagents``: the tool ``search`` a Python function) on
its default model client, the ``openai`` client itself (a model name with no ``provider/``, no
``base_url``): the client reads ``OPENAI_BASE_URL``, so the base URL alone points it at the
sidecar. Mode (argv[1]): ``start`` (``agent.start(task)``: a whole response per request),
``stream`` (``agent.start(task, stream=True)``, the chunks it yields joined). See
:mod:`endpoint_common`."""

from __future__ import annotations

import sys

from endpoint_common import INSTRUCTIONS, TASK, done, model, search
from praisonaiagents import Agent


def main(mode: str) -> None:
    assert mode in ("start", "stream"), mode
    agent = Agent(name="researcher", instructions=INSTRUCTIONS, llm=model(), tools=[search])
    if mode == "stream":
        done("".join(agent.start(TASK, stream=True)))
    else:
        done(agent.start(TASK))


if __name__ == "__main__":
    main(sys.argv[1])
