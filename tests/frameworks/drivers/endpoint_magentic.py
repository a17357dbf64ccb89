"""magentic on the model endpoint: its OpenAI backend's client reads
``MAGENTIC_OPENAI_BASE_URL`` (and ``MAGENTIC_OPENAI_MODEL``, ``MAGENTIC_OPENAI_API_KEY``, as
its docs set them). Mode (argv[1]):

* ``chain``: one ``@prompt_chain`` call with ``functions=[search]``: magentic runs each
  ``FunctionCall`` the model makes and asks again until the model answers (its loop);
* ``loop``: the loop its docs write by hand (its ``Chat``, as a ``@chatprompt`` is made of):
  ``Chat(messages, functions=[search], output_types=[FunctionCall[str], str])``, submitted,
  each ``FunctionCall`` run by the program (``chat.exec_function_call()``, its result appended
  as a ``FunctionResultMessage``), submitted again, until a ``str``;
* ``parallel``: the same loop with ``output_types=[ParallelFunctionCall[str], str]``: the
  model may call ``search`` several times in one answer, all run;
* ``structured``: a ``@prompt`` whose return type is a pydantic model (its one function
  forced), a plan/act loop: the program runs the search an ``Action`` asks for and prompts
  again, what it did so far written in the prompt (each step a conversation of its own),
  until the ``Action`` is the answer (``MAGENTIC_FORGET`` set: nothing written, a batch of
  the same prompt);
* ``structured_chat``: the same loop in one conversation: a ``Chat`` whose output type is
  ``Action``, the search's result added as a user message (``chat.add_user_message``) before
  the next ``submit()``.

Prints ``{"ran": [...], "output": ..., "error": ...}`` (see :mod:`endpoint_common`). No
``from __future__ import annotations``: magentic reads the return annotations as types."""


import json
import os
import sys
from typing import Literal

from endpoint_common import INSTRUCTIONS, RAN, TASK, search
from magentic import (
    Chat,
    FunctionCall,
    ParallelFunctionCall,
    SystemMessage,
    UserMessage,
    prompt,
    prompt_chain,
)
from pydantic import BaseModel, Field

STEPS = 10
FORGET = bool(os.environ.get("MAGENTIC_FORGET"))


@prompt_chain(INSTRUCTIONS + "\n\n{task}", functions=[search])
def chain(task: str) -> str: ...


class Action(BaseModel):
    """The next step: search for a term, or answer."""

    kind: Literal["search", "answer"]
    q: str | None = Field(default=None, description="the term to search for")
    answer: str | None = Field(default=None, description="the final answer")


@prompt(INSTRUCTIONS + "\n\n{task}\n\nWhat you did so far:\n{done}")
def plan(task: str, done: str) -> Action: ...


def loop(call: type = FunctionCall) -> str:
    chat = Chat(messages=[SystemMessage(INSTRUCTIONS), UserMessage(TASK)], functions=[search],
                output_types=[call[str], str]).submit()
    for _ in range(STEPS):
        if not isinstance(chat.last_message.content, call):
            return str(chat.last_message.content)
        chat = chat.exec_function_call().submit()
    return ""


def structured() -> str:
    done: list[str] = []
    for _ in range(STEPS):
        action = plan(TASK, "\n".join(done) or "nothing")
        if action.kind == "answer":
            return action.answer or ""
        result = search(action.q or "")
        if not FORGET:  # (a batch: the next prompt holds nothing of this one)
            done.append(f"searched {action.q!r}: {result}")
    return ""


def structured_chat() -> str:
    chat = Chat(messages=[SystemMessage(INSTRUCTIONS), UserMessage(TASK)],
                output_types=[Action])
    for _ in range(STEPS):
        chat = chat.submit()
        action = chat.last_message.content
        if action.kind == "answer":
            return action.answer or ""
        chat = chat.add_user_message(f"Result: {search(action.q or '')}")
    return ""


def main(mode: str) -> None:
    run = {"chain": lambda: chain(TASK), "loop": loop,
           "parallel": lambda: loop(ParallelFunctionCall), "structured": structured,
           "structured_chat": structured_chat}[mode]
    output, error = "", ""
    try:
        output = run()
    except Exception as exc:  # (what the program's caller gets: the tests read it)
        error = f"{type(exc).__name__}: {exc}"[:2000]
    print(json.dumps({"ran": RAN, "output": output, "error": error}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
