"""A hand-written agent loop on the OpenAI client, traced by OpenLLMetry's
opentelemetry-instrumentation-openai (one ``openai.chat`` span per model call, ``gen_ai.*``
attributes of its own conventions, prompts and completions as indexed attributes).

The loop traces itself the way hand-written loops often do: a plain span for the whole run
(named after the agent, its input and output as generic attributes) and a plain span per tool
call, named after the tool, with ``input``/``output`` attributes and the exception recorded
when it raises — no GenAI attribute on either. At its own cap (``limit``) the loop raises, and
the run span records that exception. Scenarios (argv[1]): three_tools / limit / tool_error.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from _handwritten_loop import StepLimitReached, run_loop
from _otel import setup_tracing
from _tools import TASKS, lookup
from opentelemetry.instrumentation.openai import OpenAIInstrumentor

AGENT = "research-agent"


def main(scenario: str) -> None:
    provider = setup_tracing("openai-olm-loop")
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("research-agent")

    def call_tool(name: str, args: dict[str, Any]) -> str:
        with tracer.start_as_current_span(name, attributes={"input": json.dumps(args)}) as span:
            result = lookup(**args)
            span.set_attribute("output", result)
            return result

    try:  # the span records the exception that leaves it, as OTel's SDK does by default
        with tracer.start_as_current_span(AGENT, attributes={"input": TASKS[scenario]}) as run:
            answer = run_loop(scenario, call_tool)
            run.set_attribute("output", answer)
        print("answer:", answer)
    except StepLimitReached as exc:
        print("stopped:", exc)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
