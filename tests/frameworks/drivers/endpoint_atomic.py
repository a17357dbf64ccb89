"""Atomic Agents (``atomic-agents`` 1.1) on the model endpoint: its ``BaseAgent`` on
``instructor.from_openai(OpenAI())`` (the ``openai`` client reads ``OPENAI_BASE_URL``), each
``run()`` one request forcing its output schema's function (instructor's ``Mode.TOOLS``). Its
output schema is a search's parameters or the final answer; the program runs the search and
adds its output to the agent's memory (``memory.add_message("system", ...)``), then runs the
agent again with no new input, as its orchestration example does, until the answer or
``INSTRUCTOR_STEPS`` (10) runs. Mode (argv[1]): ``loop``.

Prints ``{"ran": [...], "output": ..., "error": ...}`` (see :mod:`endpoint_common`)."""

from __future__ import annotations

import json
import os
import sys

import instructor
from atomic_agents.agents.base_agent import BaseAgent, BaseAgentConfig
from atomic_agents.lib.base.base_io_schema import BaseIOSchema
from atomic_agents.lib.components.system_prompt_generator import SystemPromptGenerator
from endpoint_common import INSTRUCTIONS, RAN, TASK, model, search
from openai import OpenAI
from pydantic import Field

STEPS = int(os.environ.get("INSTRUCTOR_STEPS") or 10)


class Question(BaseIOSchema):
    """The user's question."""

    chat_message: str = Field(..., description="the question")


class SearchInput(BaseIOSchema):
    """A search for a term in the files."""

    q: str = Field(..., description="the term to search for")


class SearchOutput(BaseIOSchema):
    """What a search found."""

    result: str = Field(..., description="the search's result")


class FinalAnswer(BaseIOSchema):
    """The answer to the user."""

    chat_message: str = Field(..., description="the answer")


class NextStep(BaseIOSchema):
    """The next step: a search's parameters, or the final answer."""

    action: SearchInput | FinalAnswer = Field(..., description="a search, or the answer")


def loop() -> str:
    agent = BaseAgent(BaseAgentConfig(
        client=instructor.from_openai(OpenAI()), model=model(),
        system_prompt_generator=SystemPromptGenerator(background=[INSTRUCTIONS]),
        input_schema=Question, output_schema=NextStep))
    step = agent.run(Question(chat_message=TASK))
    for _ in range(STEPS - 1):
        if isinstance(step.action, FinalAnswer):
            break
        agent.memory.add_message("system", SearchOutput(result=search(step.action.q)))
        step = agent.run()
    return step.action.chat_message if isinstance(step.action, FinalAnswer) else ""


def main(mode: str) -> None:
    assert mode == "loop", mode
    output, error = "", ""
    try:
        output = loop()
    except Exception as exc:  # (what the program's caller gets: the tests read it)
        error = f"{type(exc).__name__}: {exc}"[:2000]
    print(json.dumps({"ran": RAN, "output": output, "error": error}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
