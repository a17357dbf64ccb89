"""A hand-written tool loop on LiteLLM's SDK (``litellm.completion``, its OpenAI provider:
``openai/<model>``), pointed at the sidecar by ``api_base`` (the sidecar's URL and ``/v1``,
``OPENAI_BASE_URL``): LiteLLM reads no base URL of its own for a model named by its provider.
Modes (argv[1]): ``completion``, ``completion_stream`` (its chunks put together by
``litellm.stream_chunk_builder``, as LiteLLM's callers do). The loop ends at the first answer
without tool calls; see :mod:`endpoint_common`."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import litellm
from endpoint_common import INSTRUCTIONS, SEARCH_SCHEMA, TASK, done, model, search

MAX_STEPS = 30  # the loop's own cap, far above what any scenario needs
TOOLS = [{"type": "function", "function": {
    "name": "search", "description": "Search the files for a term.",
    "parameters": SEARCH_SCHEMA}}]


def turn(messages: list[dict[str, Any]], stream: bool) -> Any:
    asked: dict[str, Any] = {
        "model": "openai/" + model(), "messages": messages, "tools": TOOLS,
        "api_base": os.environ["OPENAI_BASE_URL"], "api_key": os.environ["OPENAI_API_KEY"]}
    if not stream:
        return litellm.completion(**asked).choices[0].message
    chunks = list(litellm.completion(stream=True, **asked))
    return litellm.stream_chunk_builder(chunks, messages=messages).choices[0].message


def main(mode: str) -> str:
    litellm.suppress_debug_info = True
    messages: list[dict[str, Any]] = [{"role": "system", "content": INSTRUCTIONS},
                                      {"role": "user", "content": TASK}]
    for _ in range(MAX_STEPS):
        message = turn(messages, mode.endswith("_stream"))
        calls = message.tool_calls or []
        if not calls:
            return str(message.content or "")
        messages.append({"role": "assistant", "content": message.content,
                         "tool_calls": [call.model_dump() for call in calls]})
        for call in calls:
            result = search(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return "stopped at MAX_STEPS"


if __name__ == "__main__":
    done(main(sys.argv[1] if len(sys.argv) > 1 else "completion"))
