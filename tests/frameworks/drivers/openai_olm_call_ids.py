"""A hand-written agent loop on the OpenAI client, traced by OpenLLMetry's
opentelemetry-instrumentation-openai (one ``openai.chat`` span per model call), whose own spans
say which tool call they run by its id, as loops that handle several tool calls per response
often do — and whose tool consults a cache traced under the tool's own name.

* The loop's plain span per tool call is named after the tool and carries the model's call id:
  in a ``tool_call_id`` attribute (scenarios ``parallel``, ``parallel_error``), or only inside
  its ``input``, the tool call object as the model gave it (``parallel_input``).
* ``lookup`` first asks a cache, traced as a plain span also named ``lookup`` with the cache
  client's own ``call_id`` (a request id, no tool call's): a miss raises ``KeyError`` there,
  which the span records and the tool catches before it fetches the value.

The model asks for ``lookup`` twice in one response (a and b; in ``parallel_error``, a and
``broken``, which raises), then answers. Scenarios (argv[1]): parallel / parallel_input /
parallel_error.
"""

from __future__ import annotations

import itertools
import json
import sys
from typing import Any

from _otel import model_settings, setup_tracing
from _tools import lookup
from openai import OpenAI
from opentelemetry.instrumentation.openai import OpenAIInstrumentor

AGENT = "research-agent"
TASKS = {"parallel": "Look up a and b.", "parallel_input": "Look up a and b.",
         "parallel_error": "Look up a and broken."}
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a key up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}},
                   "required": ["key"]}}}]
MAX_STEPS = 5


def main(scenario: str) -> None:
    provider = setup_tracing("openai-olm-call-ids")
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    tracer = provider.get_tracer("research-agent")
    requests = itertools.count(1)

    def cache_miss_span(key: str) -> None:
        # the cache client's span records the miss it raises; the tool catches it outside
        try:
            with tracer.start_as_current_span("lookup", attributes={
                    "call_id": f"cache-{next(requests)}", "input": json.dumps({"key": key})}):
                raise KeyError(f"cache miss: {key}")
        except KeyError:
            pass

    def run_tool(call: dict[str, Any]) -> str:
        attributes = ({"input": json.dumps(call)} if scenario == "parallel_input" else
                      {"tool_call_id": call["id"], "input": call["function"]["arguments"]})
        with tracer.start_as_current_span(call["function"]["name"], attributes=attributes) as span:
            args = json.loads(call["function"]["arguments"])
            cache_miss_span(args["key"])
            result = lookup(**args)
            span.set_attribute("output", result)
            return result

    base_url, model = model_settings()
    client = OpenAI(base_url=base_url, api_key="sk-fake")
    answer = ""
    with tracer.start_as_current_span(AGENT, attributes={"input": TASKS[scenario]}) as run:
        messages: list[dict[str, Any]] = [{"role": "user", "content": TASKS[scenario]}]
        for _ in range(MAX_STEPS):
            message = client.chat.completions.create(
                model=model, messages=messages, tools=TOOLS).choices[0].message.model_dump(
                    exclude_none=True)
            messages.append(message)
            if not message.get("tool_calls"):
                answer = str(message.get("content") or "")
                run.set_attribute("output", answer)
                break
            for call in message["tool_calls"]:
                try:
                    result = run_tool(call)
                except RuntimeError as exc:
                    result = f"error: {exc}"
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    print("answer:", answer)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
