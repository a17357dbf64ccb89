"""A hand-written tool loop on the ``anthropic`` Python SDK, pointed at the sidecar by
``ANTHROPIC_BASE_URL`` alone. Modes (argv[1]): ``messages``, ``messages_stream`` (the SDK's
``messages.stream`` helper, its final message read back). See :mod:`endpoint_common`."""

from __future__ import annotations

import sys
from typing import Any

from anthropic import Anthropic
from endpoint_common import INSTRUCTIONS, SEARCH_SCHEMA, TASK, done, model, search

MAX_STEPS = 30
TOOLS: list[Any] = [{"name": "search", "description": "Search the files for a term.",
                     "input_schema": SEARCH_SCHEMA}]


def main(mode: str) -> None:
    client = Anthropic()  # ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY from the environment
    messages: list[Any] = [{"role": "user", "content": TASK}]
    for _ in range(MAX_STEPS):
        arguments: dict[str, Any] = {"model": model(), "max_tokens": 1024,
                                     "system": INSTRUCTIONS, "messages": messages,
                                     "tools": TOOLS}
        if mode == "messages_stream":
            with client.messages.stream(**arguments) as stream:
                message = stream.get_final_message()
        else:
            message = client.messages.create(**arguments)
        messages.append({"role": "assistant",
                         "content": [block.model_dump(exclude_none=True)
                                     for block in message.content]})
        uses = [block for block in message.content if block.type == "tool_use"]
        if not uses:
            done("".join(block.text for block in message.content if block.type == "text"))
            return
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": search(**use.input)}
            for use in uses]})
    done("stopped at MAX_STEPS")


if __name__ == "__main__":
    main(sys.argv[1])
