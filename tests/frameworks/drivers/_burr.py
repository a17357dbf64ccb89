"""The Apache Burr agent both Burr drivers run (``burr_agent``, ``endpoint_burr``): a state
machine of an action asking the model (``ask_model``: the OpenAI client's chat completion with
the tool offered), an action per tool named after it (the calls of it the model asked for, as
Burr's tool-calling example routes to one action per tool; a tool's exception leaves the action,
and the application's run), ``answer``, and the graph's own cap: at ``cap`` model calls it goes
to ``give_up`` without asking again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from burr.core import Application, ApplicationBuilder, State, action, default, expr
from burr.lifecycle import LifecycleAdapter
from openai import OpenAI


@action(reads=["messages", "model_calls"], writes=["messages", "model_calls", "pending"])
def ask_model(state: State, client: OpenAI, model: str, tools: list[dict[str, Any]]) -> State:
    reply = client.chat.completions.create(model=model, messages=state["messages"],
                                           tools=tools).choices[0].message
    calls = [call.model_dump() for call in reply.tool_calls or []]
    message = {"role": "assistant", "content": reply.content,
               **({"tool_calls": calls} if calls else {})}
    return state.update(messages=[*state["messages"], message],
                        model_calls=state["model_calls"] + 1, pending=calls)


@action(reads=["messages", "pending"], writes=["messages", "pending"])
def run_calls(state: State, tool: Callable[..., str]) -> State:
    results = [{"role": "tool", "tool_call_id": call["id"],
                "content": tool(**json.loads(call["function"]["arguments"]))}
               for call in state["pending"]]
    return state.update(messages=[*state["messages"], *results], pending=[])


@action(reads=["messages"], writes=["answer"])
def answer(state: State) -> State:
    return state.update(answer=state["messages"][-1]["content"])


@action(reads=["model_calls"], writes=["answer"])
def give_up(state: State) -> State:
    return state.update(answer=f"stopped after {state['model_calls']} model calls")


def agent(client: OpenAI, model: str, tool: Callable[..., str], schema: dict[str, Any],
          instructions: str, task: str, cap: int,
          hooks: Sequence[LifecycleAdapter] = ()) -> Application[Any]:
    """The agent, its one tool ``tool`` (its action named after it) offered with ``schema``."""
    name = tool.__name__
    tools = [{"type": "function", "function": {"name": name, "description": tool.__doc__,
                                               "parameters": schema}}]
    return (ApplicationBuilder()
            .with_actions(ask_model=ask_model.bind(client=client, model=model, tools=tools),
                          answer=answer, give_up=give_up, **{name: run_calls.bind(tool=tool)})
            .with_transitions(("ask_model", "answer", expr("len(pending) == 0")),
                              ("ask_model", "give_up", expr(f"model_calls >= {cap}")),
                              ("ask_model", name, default),
                              (name, "ask_model", default))
            .with_state(messages=[{"role": "system", "content": instructions},
                                  {"role": "user", "content": task}],
                        model_calls=0, pending=[])
            .with_entrypoint("ask_model")
            .with_hooks(*hooks)
            .build())


def run(app: Application[Any]) -> str:
    """Run the agent to its answer (or its cap); the answer."""
    _, _, state = app.run(halt_after=["answer", "give_up"])
    return str(state["answer"])
