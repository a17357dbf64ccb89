"""An AgentScope 2 agent (``agentscope.agent.Agent`` with ``ReActConfig(max_iters=30)`` by
default, the tool ``search`` a ``FunctionTool`` of its ``Toolkit``) on its
``OpenAIChatModel``, whose credential names no ``base_url``: the ``openai.AsyncClient``
beneath reads ``OPENAI_BASE_URL``,
so the base URL alone points it at the sidecar; with ``AS_SETTINGS`` (JSON: the keyword
arguments of its ``OpenAICredential`` and its ``OpenAIChatModel``, docs/agents.md's) those
name it instead. Mode (argv[1]): ``run`` (a whole response per
request), ``stream`` (streamed), ``traced`` and ``traced_stream`` (whole or streamed, and traced
by AgentScope's own ``TracingMiddleware`` to the sidecar's OTLP receiver:
``OTEL_EXPORTER_OTLP_*``). ``AS_MAX_ITERS``, if set, is its ``max_iters``. See
:mod:`endpoint_common`."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from agentscope.agent import Agent, ReActConfig
from agentscope.credential import OpenAICredential
from agentscope.message import UserMsg
from agentscope.middleware import TracingMiddleware
from agentscope.model import OpenAIChatModel
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import FunctionTool, Toolkit
from endpoint_common import INSTRUCTIONS, TASK, done, model, search

# a tool function asks the user's permission unless given one (the reply parks at its call)
ALLOWED = PermissionDecision(PermissionBehavior.ALLOW, "allowed")


async def run(stream: bool, traced: bool) -> str | None:
    settings = json.loads(os.environ.get("AS_SETTINGS", "null")) or {
        "credential": {}, "model": {"model": model()}}
    credential = OpenAICredential(api_key=os.environ["OPENAI_API_KEY"], **settings["credential"])
    agent = Agent(
        name="researcher", system_prompt=INSTRUCTIONS,
        model=OpenAIChatModel(credential=credential, **settings["model"], stream=stream,
                              max_retries=1),
        toolkit=Toolkit(tools=[FunctionTool(search, permission=ALLOWED)]),
        middlewares=[TracingMiddleware()] if traced else None,
        react_config=ReActConfig(max_iters=int(os.environ.get("AS_MAX_ITERS", "30"))))
    reply = await agent.reply(UserMsg(name="user", content=TASK))
    return reply.get_text_content()


def main(mode: str) -> None:
    assert mode in ("run", "stream", "traced", "traced_stream"), mode
    if not mode.startswith("traced"):
        done(asyncio.run(run(mode == "stream", False)))
        return
    from _otel import setup_tracing

    provider = setup_tracing("agentscope-agent")
    output = asyncio.run(run(mode.endswith("_stream"), True))
    provider.shutdown()
    done(output)


if __name__ == "__main__":
    main(sys.argv[1])
