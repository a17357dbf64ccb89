"""A home-grown agent loop on the Anthropic client (Messages API with ``tools``), traced by
OpenLLMetry's opentelemetry-instrumentation-anthropic.

The loop sends the conversation, runs every ``tool_use`` block of the reply itself and sends
the results back as ``tool_result`` blocks until the reply stops with ``end_turn``. The
instrumentation emits one span per model call and nothing for the loop: the loop opens no
invocation span, as many home-grown agents don't. Scenarios (argv[1]): ``three_tools`` /
``limit`` / ``tool_error``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from _otel import model_settings, setup_tracing
from anthropic import Anthropic
from opentelemetry.sdk.trace import TracerProvider

MAX_STEPS = 5  # the loop's own cap: "limit" runs into it
TOOLS = [{"name": "lookup", "description": "Look a key up.",
          "input_schema": {"type": "object", "properties": {"key": {"type": "string"}},
                           "required": ["key"]}}]


def lookup(key: str) -> str:
    if key == "broken":
        raise RuntimeError(f"backend unavailable for {key}")
    return f"value of {key}"


def run(scenario: str, service: str, instrument: Callable[[TracerProvider], None]) -> None:
    """The loop, its spans exported as ``service``, the client instrumented by ``instrument``
    (anthropic_oi.py: the same loop traced by OpenInference)."""
    provider = setup_tracing(service)
    instrument(provider)
    base_url, model = model_settings()
    # the SDK appends /v1/messages to its base URL
    client = Anthropic(base_url=base_url.removesuffix("/v1"), api_key="sk-ant-fake")
    prompt = "Look up broken." if scenario == "tool_error" else "Look up a, b and c."
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    for _ in range(MAX_STEPS):
        reply = client.messages.create(model=model, max_tokens=1024, tools=TOOLS,
                                       messages=messages)
        messages.append({"role": "assistant",
                         "content": [block.model_dump(exclude_none=True)
                                     for block in reply.content]})
        if reply.stop_reason != "tool_use":
            print("answer:", " ".join(b.text for b in reply.content if b.type == "text"))
            break
        results: list[dict[str, Any]] = []
        for block in reply.content:
            if block.type != "tool_use":
                continue
            try:
                result = {"content": lookup(**block.input)}
            except RuntimeError as exc:
                result = {"content": f"error: {exc}", "is_error": True}
            results.append({"type": "tool_result", "tool_use_id": block.id, **result})
        messages.append({"role": "user", "content": results})
    else:
        print("stopped at MAX_STEPS")
    provider.shutdown()


def openllmetry(provider: TracerProvider) -> None:
    from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor

    AnthropicInstrumentor().instrument(tracer_provider=provider)


if __name__ == "__main__":
    run(sys.argv[1], "anthropic-loop", openllmetry)
