"""Mirascope v1 on the model endpoint: ``@llm.call(provider="openai", model=...,
tools=[search], client=OpenAI())`` on a ``@prompt_template`` (``SYSTEM:``, ``USER:`` the task,
``MESSAGES:`` the history), the OpenAI client reading ``OPENAI_BASE_URL``, and the agent
loop its docs write: call, run each of ``response.tools`` (``tool.call()``), append
``response.message_param`` and ``response.tool_message_params(...)`` to the history, call
again, until a response with no tool. Mode (argv[1]): ``loop`` (``stream``: the same loop on
``stream=True``, the tools read as the stream gives them). With ``MIRASCOPE_OTEL`` set, traced
as its docs set it up: ``configure(processors=[BatchSpanProcessor(OTLPSpanExporter())])`` and
``@with_otel()`` on the call (a span per call; ``OTEL_SERVICE_NAME`` names the agent), each
span recorded too with ``RECORD_SPANS`` (:mod:`_otel`).

Prints ``{"ran": [...], "output": ..., "error": ...}`` (see :mod:`endpoint_common`)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import Any

from endpoint_common import INSTRUCTIONS, RAN, TASK, model, search
from mirascope import BaseMessageParam, llm, prompt_template
from openai import OpenAI

STEPS = 10


def traced() -> Callable[[Any], Any]:
    """``@with_otel()`` once its tracer provider is configured; else no decorator."""
    if not os.environ.get("MIRASCOPE_OTEL"):
        return lambda fn: fn
    from mirascope.integrations.otel import configure, with_otel
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import SpanProcessor
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    processors: list[SpanProcessor] = [
        BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=50)]
    if os.environ.get("RECORD_SPANS"):
        from _otel import JsonLinesExporter
        processors.append(SimpleSpanProcessor(JsonLinesExporter(os.environ["RECORD_SPANS"])))
    configure(processors=processors)
    return with_otel()


def loop(stream: bool) -> str:
    @traced()
    @llm.call(provider="openai", model=model(), tools=[search], client=OpenAI(),
              stream=stream)
    @prompt_template(f"SYSTEM: {INSTRUCTIONS}\nUSER: {{task}}\nMESSAGES: {{history}}")
    def call(task: str, history: list[BaseMessageParam]) -> None: ...

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
    if os.environ.get("MIRASCOPE_OTEL"):
        from opentelemetry import trace
        trace.get_tracer_provider().shutdown()  # type: ignore[attr-defined]
    print(json.dumps({"ran": RAN, "output": output, "error": error}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
