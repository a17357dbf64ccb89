"""A LangChain 1.x tool-calling agent (``create_agent``) on ``ChatOpenAI``, which reads
``OPENAI_BASE_URL``: the base URL alone points it at the sidecar. Mode (argv[1]): ``invoke``
or ``stream`` (``ChatOpenAI(streaming=True)``). See :mod:`endpoint_common`."""

from __future__ import annotations

import sys

from endpoint_common import INSTRUCTIONS, TASK, done, model, search
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI


def main(mode: str) -> None:
    agent = create_agent(ChatOpenAI(model=model(), streaming=mode == "stream"),
                         tools=[tool(search)], system_prompt=INSTRUCTIONS)
    result = agent.invoke({"messages": [{"role": "user", "content": TASK}]},
                          {"recursion_limit": 100})
    done(result["messages"][-1].text)


if __name__ == "__main__":
    main(sys.argv[1])
