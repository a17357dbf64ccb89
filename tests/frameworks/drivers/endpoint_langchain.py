"""A LangChain 1.x tool-calling agent (``create_agent``) on ``ChatOpenAI``, which reads
``OPENAI_BASE_URL``: the base URL alone points it at the sidecar. Mode (argv[1]): ``invoke``
or ``stream`` (``ChatOpenAI(streaming=True)``), or ``langfuse`` (``invoke`` with the Langfuse
SDK's LangChain ``CallbackHandler`` in the config, venv ``langfuse``; its spans go nowhere: the
tracer provider is off, ``OTEL_SDK_DISABLED``). See :mod:`endpoint_common`."""

from __future__ import annotations

import sys

from endpoint_common import INSTRUCTIONS, TASK, done, model, own_limit, search
from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI


def main(mode: str) -> None:
    agent = create_agent(ChatOpenAI(model=model(), streaming=mode == "stream"),
                         tools=[tool(search)], system_prompt=INSTRUCTIONS)
    config: dict[str, object] = {"recursion_limit": own_limit(100)}
    if mode == "langfuse":
        import os

        from langfuse import Langfuse
        from langfuse.langchain import CallbackHandler

        os.environ.update({"LANGFUSE_PUBLIC_KEY": "pk-lf-fake-never-sent",
                           "LANGFUSE_SECRET_KEY": "sk-lf-fake-never-sent",
                           "LANGFUSE_BASE_URL": "http://127.0.0.1:9"})
        Langfuse(should_export_span=lambda span: False)
        config["callbacks"] = [CallbackHandler()]
    result = agent.invoke({"messages": [{"role": "user", "content": TASK}]}, config)
    done(result["messages"][-1].text)


if __name__ == "__main__":
    main(sys.argv[1])
