"""An Apache Burr agent: a state machine of an action asking the model (``ask_model``: the
OpenAI client's chat completion with the tool offered) and an action per tool, named after it
(``lookup``: the calls of it the model asked for), looping until the model answers, then
``answer``; traced as Burr's docs set it up: its ``OpenTelemetryBridge``
hook (a span for the application's ``run`` and one per action) and ``init_instruments("openai")``
(OpenLLMetry's opentelemetry-instrumentation-openai beneath) on the global tracer provider.

The graph's own cap (a transition on the state's ``model_calls``) is the agent's limit: at 5
model calls it goes to ``give_up`` without asking again. Scenarios (argv[1]): ``three_tools``,
``limit`` (the model asks for a tool forever), ``tool_error`` (the tool's exception leaves its
action: Burr ends the application's run with it).
"""

from __future__ import annotations

import json
import sys

from _otel import model_settings, setup_tracing
from _tools import TASKS, lookup
from burr.core import ApplicationBuilder, State, action, default, expr
from burr.integrations.opentelemetry import OpenTelemetryBridge, init_instruments
from openai import OpenAI

MAX_MODEL_CALLS = 5
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a key up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}},
                   "required": ["key"]}}}]


@action(reads=["messages", "model_calls"], writes=["messages", "model_calls", "pending"])
def ask_model(state: State, client: OpenAI, model: str) -> State:
    reply = client.chat.completions.create(model=model, messages=state["messages"],
                                           tools=TOOLS).choices[0].message
    calls = [call.model_dump() for call in reply.tool_calls or []]
    message = {"role": "assistant", "content": reply.content,
               **({"tool_calls": calls} if calls else {})}
    return state.update(messages=[*state["messages"], message],
                        model_calls=state["model_calls"] + 1, pending=calls)


@action(reads=["messages", "pending"], writes=["messages", "pending"])
def lookup_action(state: State) -> State:
    """The tool's action (an action per tool, as Burr's tool-calling example has it): runs the
    calls of it the model asked for; a tool's exception leaves the action, and the run."""
    results = [{"role": "tool", "tool_call_id": call["id"],
                "content": lookup(**json.loads(call["function"]["arguments"]))}
               for call in state["pending"]]
    return state.update(messages=[*state["messages"], *results], pending=[])


@action(reads=["messages"], writes=["answer"])
def answer(state: State) -> State:
    return state.update(answer=state["messages"][-1]["content"])


@action(reads=[], writes=["answer"])
def give_up(state: State) -> State:
    return state.update(answer=f"stopped after {MAX_MODEL_CALLS} model calls")


def main(scenario: str) -> None:
    provider = setup_tracing("burr-agent")
    init_instruments("openai")
    base_url, model = model_settings()
    client = OpenAI(base_url=base_url, api_key="sk-fake")
    app = (ApplicationBuilder()
           .with_actions(ask_model=ask_model.bind(client=client, model=model),
                         lookup=lookup_action, answer=answer, give_up=give_up)
           .with_transitions(
               ("ask_model", "answer", expr("len(pending) == 0")),
               ("ask_model", "give_up", expr(f"model_calls >= {MAX_MODEL_CALLS}")),
               ("ask_model", "lookup", default),
               ("lookup", "ask_model", default))
           .with_state(messages=[{"role": "system", "content": "Look things up, then answer."},
                                 {"role": "user", "content": TASKS[scenario]}],
                       model_calls=0, pending=[])
           .with_entrypoint("ask_model")
           .with_hooks(OpenTelemetryBridge())
           .build())
    try:
        _, _, state = app.run(halt_after=["answer", "give_up"])
        print(state["answer"])
    except RuntimeError as exc:
        print("stopped:", type(exc).__name__, exc)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
