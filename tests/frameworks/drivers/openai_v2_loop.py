"""A home-grown agent loop on the OpenAI client, traced by opentelemetry-instrumentation-openai-v2.

The instrumentation emits one ``chat`` span per model call and nothing for the loop itself: the
loop opens no invocation span, as many home-grown agents don't. Scenarios (argv[1]):
``three_tools`` / ``limit`` / ``tool_error``, each plain or with ``_stream`` appended, and
``traced_tools``: ``three_tools`` with the loop tracing each tool call itself (an OTel GenAI
``execute_tool`` span with the model's call id; no span encloses it, so each is a trace of its
own, as is each model call); ``_events`` appended: the instrumentation's content as GenAI log
events sent over OTLP logs (``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=event_only``).
"""

from __future__ import annotations

import contextlib
import json
import sys

from _otel import model_settings, setup_logs, setup_tracing
from openai import OpenAI
from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

MAX_STEPS = 5  # the loop's own cap: "limit" runs into it
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a key up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}},
                   "required": ["key"]}}}]


def lookup(key: str) -> str:
    if key == "broken":
        raise RuntimeError(f"backend unavailable for {key}")
    return f"value of {key}"


def chat(client: OpenAI, model: str, messages: list[dict], stream: bool) -> tuple[dict, str]:
    if not stream:
        choice = client.chat.completions.create(model=model, messages=messages,
                                                tools=TOOLS).choices[0]
        message = choice.message.model_dump(exclude_none=True)
        return message, choice.finish_reason
    text, calls, finish = "", {}, ""
    for chunk in client.chat.completions.create(model=model, messages=messages, tools=TOOLS,
                                                stream=True):
        for choice in chunk.choices:
            delta = choice.delta
            text += delta.content or ""
            for call in delta.tool_calls or []:
                slot = calls.setdefault(call.index, {"id": "", "type": "function",
                                                     "function": {"name": "", "arguments": ""}})
                slot["id"] = call.id or slot["id"]
                if call.function:
                    slot["function"]["name"] += call.function.name or ""
                    slot["function"]["arguments"] += call.function.arguments or ""
            finish = choice.finish_reason or finish
    message: dict = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message, finish


def main(scenario: str) -> None:
    provider = setup_tracing("openai-v2-loop")
    logs = setup_logs("openai-v2-loop") if scenario.endswith("_events") else None
    # (``_events``: the content as GenAI log events, not on the spans)
    OpenAIInstrumentor().instrument(tracer_provider=provider, logger_provider=logs)
    base_url, model = model_settings()
    client = OpenAI(base_url=base_url, api_key="sk-fake")
    stream = "_stream" in scenario
    traced = scenario == "traced_tools"
    tracer = provider.get_tracer("home-grown-loop")
    if scenario.startswith("tool_error"):
        messages_note = "Look up broken."
    else:
        messages_note = "Look up a, b and c."
    messages: list[dict] = [{"role": "user", "content": messages_note}]
    for _ in range(MAX_STEPS):
        message, _finish = chat(client, model, messages, stream)
        messages.append(message)
        if not message.get("tool_calls"):
            print("answer:", message.get("content"))
            break
        for call in message["tool_calls"]:
            with tracer.start_as_current_span(
                    "execute_tool " + call["function"]["name"],
                    attributes={"gen_ai.operation.name": "execute_tool",
                                "gen_ai.tool.name": call["function"]["name"],
                                "gen_ai.tool.call.id": call["id"]},
            ) if traced else contextlib.nullcontext():
                try:
                    result = lookup(**json.loads(call["function"]["arguments"]))
                except RuntimeError as exc:
                    result = f"error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    else:
        print("stopped at MAX_STEPS")
    if logs is not None:
        logs.shutdown()  # type: ignore[attr-defined]
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
