"""An AgentScope 2 agent (``agentscope.agent.Agent``: its reasoning-acting loop, with
``ReActConfig(max_iters=3)``) with one tool function in its ``Toolkit`` (``FunctionTool``) on
its ``OpenAIChatModel`` (the credential's ``base_url``: the scripted model server), traced by
AgentScope's own ``TracingMiddleware`` on the global tracer provider (AgentScope 2 has no
``init(tracing_url=...)``: its middleware traces when an SDK provider is set, and exports where
that provider does). Scenarios (argv[1]): ``three_tools``; ``limit`` (the model asks for a tool
forever: at ``max_iters`` AgentScope asks once more with ``tool_choice`` none and ends the reply
``exceed_max_iters``); ``limit_disobeyed`` (the same, and the model calls the tool even then);
``tool_error`` (the tool raises: AgentScope hands the model the error as the tool's result);
``permission`` (the tool given no permission decision, as a ``FunctionTool`` is by default: the
reply parks at the model's first call, asking the user); ``two_replies`` (the agent asked
twice: a tool call then an answer each time); ``NAME_stream``: the same, the model streamed
(``OpenAIChatModel``'s default).
"""

from __future__ import annotations

import asyncio
import sys

from _otel import model_settings, setup_tracing
from _tools import TASKS, lookup
from agentscope.agent import Agent, ReActConfig
from agentscope.credential import OpenAICredential
from agentscope.message import UserMsg
from agentscope.middleware import TracingMiddleware
from agentscope.model import OpenAIChatModel
from agentscope.permission import PermissionBehavior, PermissionDecision
from agentscope.tool import FunctionTool, Toolkit

MAX_ITERS = 3
# a tool function asks the user's permission unless given a decision (the reply parks at its call)
ALLOWED = PermissionDecision(PermissionBehavior.ALLOW, "allowed")


async def run(scenario: str) -> None:
    base_url, model = model_settings()
    agent = Agent(
        name="researcher", system_prompt="Look things up, then answer.",
        model=OpenAIChatModel(OpenAICredential(api_key="sk-fake", base_url=base_url), model,
                              stream=scenario.endswith("_stream"), max_retries=1),
        toolkit=Toolkit(tools=[FunctionTool(
            lookup, permission=None if scenario == "permission" else ALLOWED)]),
        middlewares=[TracingMiddleware()], react_config=ReActConfig(max_iters=MAX_ITERS))
    tasks = ["Look up a.", "Now look up b."] if scenario == "two_replies" else [
        TASKS.get(scenario, "Look up a.")]
    for task in tasks:  # (two_replies: the same agent, its session, asked twice)
        reply = await agent.reply(UserMsg(name="user", content=task))
        print("reply:", reply.finished_reason, reply.get_text_content())


def main(scenario: str) -> None:
    provider = setup_tracing("agentscope-agent")
    try:
        asyncio.run(run(scenario))
    finally:
        provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
