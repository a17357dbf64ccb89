"""instructor on the model endpoint: structured output, each request
forcing one function by ``tool_choice`` (instructor's default ``Mode.TOOLS``) whose call's
arguments are the answer, parsed into a pydantic model. The ``openai`` client beneath reads
``OPENAI_BASE_URL``. Mode (argv[1]):

* ``extract``: one ``client.chat.completions.create(response_model=Found)``, the answer
  extracted (``INSTRUCTOR_MODE``: ``TOOLS``, the default, ``JSON`` or ``MD_JSON``;
  ``INSTRUCTOR_RETRIES``: its ``max_retries``, 1 by default).
* ``loop``: a plan/act loop: at each step the model returns an ``Action`` (a search, or the
  answer), the program runs the search and tells the model its result in a user message, until
  the answer or ``INSTRUCTOR_STEPS`` (10) steps.

Atomic Agents: :mod:`endpoint_atomic`.

Prints ``{"ran": [...], "output": ..., "error": ...}`` (see :mod:`endpoint_common`)."""

from __future__ import annotations

import json
import os
import sys
from typing import Literal

import instructor
from endpoint_common import INSTRUCTIONS, RAN, TASK, model, search
from openai import OpenAI
from pydantic import BaseModel, Field

STEPS = int(os.environ.get("INSTRUCTOR_STEPS") or 10)


class Found(BaseModel):
    """Where the file is."""

    path: str = Field(description="the file's path")


class Action(BaseModel):
    """The next step: search for a term, or answer."""

    kind: Literal["search", "answer"]
    q: str | None = Field(default=None, description="the term to search for")
    answer: str | None = Field(default=None, description="the final answer")


def client() -> instructor.Instructor:
    mode = instructor.Mode[os.environ.get("INSTRUCTOR_MODE") or "TOOLS"]
    return instructor.from_openai(OpenAI(), mode=mode)


def extract() -> str:
    found = client().chat.completions.create(
        model=model(), response_model=Found,
        max_retries=int(os.environ.get("INSTRUCTOR_RETRIES") or 1),
        messages=[{"role": "system", "content": INSTRUCTIONS},
                  {"role": "user", "content": TASK}])
    return found.path


def loop() -> str:
    llm = client()
    messages: list[dict[str, object]] = [{"role": "system", "content": INSTRUCTIONS},
                                         {"role": "user", "content": TASK}]
    for _ in range(STEPS):
        action = llm.chat.completions.create(model=model(), response_model=Action,
                                             messages=messages, max_retries=1)
        messages.append({"role": "assistant", "content": action.model_dump_json()})
        if action.kind == "answer":
            return action.answer or ""
        messages.append({"role": "user", "content": f"Result: {search(action.q or '')}"})
    return ""


def main(mode: str) -> None:
    run = {"extract": extract, "loop": loop}[mode]
    output, error = "", ""
    try:
        output = run()
    except Exception as exc:  # (what the program's caller gets: the tests read it)
        error = f"{type(exc).__name__}: {exc}"[:2000]
    print(json.dumps({"ran": RAN, "output": output, "error": error}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
