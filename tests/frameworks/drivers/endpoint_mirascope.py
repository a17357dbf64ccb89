"""Mirascope v1 on the model endpoint: ``@llm.call(provider="openai", model=...,
tools=[search], client=OpenAI())``, the OpenAI client reading ``OPENAI_BASE_URL``, and the agent
loop its docs write: call, run each of ``response.tools`` (``tool.call()``), append
``response.message_param`` and ``response.tool_message_params(...)`` to the history, call
again, until a response with no tool. Mode (argv[1]): ``loop`` (``stream``: the same loop on
``stream=True``, the tools read as the stream gives them).

Prints ``{"ran": [...], "output": ..., "error": ...}`` (see :mod:`endpoint_common`)."""

from __future__ import annotations

import json
import sys
from typing import Any

from endpoint_common import INSTRUCTIONS, RAN, TASK, model, search
from mirascope import BaseMessageParam, Messages, llm
from openai import OpenAI

STEPS = 10


def loop(stream: bool) -> str:
    @llm.call(provider="openai", model=model(), tools=[search], client=OpenAI(),
              stream=stream)
    def call(task: str, history: list[BaseMessageParam]) -> Messages.Type:
        return [Messages.System(INSTRUCTIONS), Messages.User(task), *history]

    history: list[Any] = []
    for _ in range(STEPS):
        if stream:
            text, outputs = "", []
            response = call(TASK, history)
            for chunk, tool in response:
                if tool:
                    outputs.append((tool, tool.call()))
                else:
                    text += chunk.content
            history.append(response.message_param)
            if not outputs:
                return text
            history += response.tool_message_params(outputs)
            continue
        response = call(TASK, history)
        history.append(response.message_param)
        if not response.tools:
            return response.content
        history += response.tool_message_params([(tool, tool.call())
                                                 for tool in response.tools])
    return ""


def main(mode: str) -> None:
    output, error = "", ""
    try:
        output = loop(mode == "stream")
    except Exception as exc:  # (what the program's caller gets: the tests read it)
        error = f"{type(exc).__name__}: {exc}"[:2000]
    print(json.dumps({"ran": RAN, "output": output, "error": error}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
