"""A hand-written tool loop on the ``openai`` Python SDK, pointed at the sidecar by
``OPENAI_BASE_URL`` alone. Modes (argv[1]): ``chat``, ``chat_stream`` (Chat Completions),
``responses``, ``responses_stream`` (the Responses API, the conversation sent whole each time).
The loop ends at the first answer without tool calls; see :mod:`endpoint_common`."""

from __future__ import annotations

import json
import sys
from typing import Any

from endpoint_common import INSTRUCTIONS, SEARCH_SCHEMA, TASK, done, model, search
from openai import OpenAI

MAX_STEPS = 30  # the loop's own cap, far above what any scenario needs
CHAT_TOOLS = [{"type": "function", "function": {
    "name": "search", "description": "Search the files for a term.",
    "parameters": SEARCH_SCHEMA}}]
RESPONSES_TOOLS = [{"type": "function", "name": "search",
                    "description": "Search the files for a term.", "parameters": SEARCH_SCHEMA}]


def chat_turn(client: OpenAI, messages: list[dict[str, Any]], stream: bool) -> dict[str, Any]:
    if not stream:
        message = client.chat.completions.create(model=model(), messages=messages,
                                                 tools=CHAT_TOOLS).choices[0].message
        return message.model_dump(exclude_none=True)
    text, calls = "", {}
    for chunk in client.chat.completions.create(model=model(), messages=messages,
                                                tools=CHAT_TOOLS, stream=True):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"id": "", "type": "function",
                                                     "function": {"name": "", "arguments": ""}})
                slot["id"] = call.id or slot["id"]
                if call.function:
                    slot["function"]["name"] += call.function.name or ""
                    slot["function"]["arguments"] += call.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def chat(client: OpenAI, stream: bool) -> str:
    messages: list[dict[str, Any]] = [{"role": "system", "content": INSTRUCTIONS},
                                      {"role": "user", "content": TASK}]
    for _ in range(MAX_STEPS):
        message = chat_turn(client, messages, stream)
        messages.append(message)
        if not message.get("tool_calls"):
            return str(message.get("content") or "")
        for call in message["tool_calls"]:
            result = search(**json.loads(call["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    return "stopped at MAX_STEPS"


def responses(client: OpenAI, stream: bool) -> str:
    items: list[Any] = [{"role": "user", "content": TASK}]
    for _ in range(MAX_STEPS):
        if stream:
            response = None
            for event in client.responses.create(model=model(), instructions=INSTRUCTIONS,
                                                 input=items, tools=RESPONSES_TOOLS,
                                                 stream=True):
                if event.type == "response.completed":
                    response = event.response
            assert response is not None, "the stream ended without response.completed"
        else:
            response = client.responses.create(model=model(), instructions=INSTRUCTIONS,
                                               input=items, tools=RESPONSES_TOOLS)
        calls = [item for item in response.output if item.type == "function_call"]
        items.extend(item.model_dump(exclude_none=True) for item in response.output)
        if not calls:
            return response.output_text
        for call in calls:
            items.append({"type": "function_call_output", "call_id": call.call_id,
                          "output": search(**json.loads(call.arguments))})
    return "stopped at MAX_STEPS"


def main(mode: str) -> None:
    client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment
    stream = mode.endswith("_stream")
    done(chat(client, stream) if mode.startswith("chat") else responses(client, stream))


if __name__ == "__main__":
    main(sys.argv[1])
