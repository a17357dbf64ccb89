"""An Apache Burr agent (``ask_model`` on the OpenAI client, ``search`` the tool's action, named
after it, ``answer``; its graph's cap at 30 model calls) whose OpenAI client is made with no
``base_url``: it reads ``OPENAI_BASE_URL``, so the base URL alone points it at the sidecar.
Mode (argv[1]): ``run`` (``Application.run``). See :mod:`endpoint_common`."""

from __future__ import annotations

import json
import sys

from burr.core import ApplicationBuilder, State, action, default, expr
from endpoint_common import INSTRUCTIONS, SEARCH_SCHEMA, TASK, done, model, search
from openai import OpenAI

TOOLS = [{"type": "function", "function": {"name": "search", "description": "Search the files.",
                                           "parameters": SEARCH_SCHEMA}}]


@action(reads=["messages", "model_calls"], writes=["messages", "model_calls", "pending"])
def ask_model(state: State, client: OpenAI) -> State:
    reply = client.chat.completions.create(model=model(), messages=state["messages"],
                                           tools=TOOLS).choices[0].message
    calls = [call.model_dump() for call in reply.tool_calls or []]
    message = {"role": "assistant", "content": reply.content,
               **({"tool_calls": calls} if calls else {})}
    return state.update(messages=[*state["messages"], message],
                        model_calls=state["model_calls"] + 1, pending=calls)


@action(reads=["messages", "pending"], writes=["messages", "pending"])
def search_action(state: State) -> State:
    results = [{"role": "tool", "tool_call_id": call["id"],
                "content": search(**json.loads(call["function"]["arguments"]))}
               for call in state["pending"]]
    return state.update(messages=[*state["messages"], *results], pending=[])


@action(reads=["messages"], writes=["answer"])
def answer(state: State) -> State:
    return state.update(answer=state["messages"][-1]["content"])


def main(mode: str) -> None:
    assert mode == "run", mode
    app = (ApplicationBuilder()
           .with_actions(ask_model=ask_model.bind(client=OpenAI()), search=search_action,
                         answer=answer)
           .with_transitions(
               ("ask_model", "answer", expr("len(pending) == 0 or model_calls >= 30")),
               ("ask_model", "search", default),
               ("search", "ask_model", default))
           .with_state(messages=[{"role": "system", "content": INSTRUCTIONS},
                                 {"role": "user", "content": TASK}], model_calls=0, pending=[])
           .with_entrypoint("ask_model")
           .build())
    _, _, state = app.run(halt_after=["answer"])
    done(state["answer"])


if __name__ == "__main__":
    main(sys.argv[1])
