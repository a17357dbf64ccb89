"""A hand-written agent loop on LiteLLM's SDK (``litellm.completion``), traced by Pydantic Logfire
(exported to the sidecar only, ``send_to_logfire=False``: Logfire's own OTLP exporter for the
standard ``OTEL_EXPORTER_OTLP_ENDPOINT``; the recorder as one more span processor) and by
LiteLLM's own OpenTelemetry callback (``litellm.callbacks = ["otel"]``), which exports its own
spans through a tracer provider of its own (resource ``service.name`` ``litellm``) to the same
endpoint (recorded through the relay of ``_handwritten_loop``).

* ``logfire.instrument_openai()`` traces each model call: LiteLLM's OpenAI provider posts
  through the openai client (``Chat Completion with {model!r}``: ``request_data`` /
  ``response_data`` as JSON, ``gen_ai.*`` request and usage attributes);
* ``logfire.span`` traces the agent run, ``@logfire.instrument`` the tool (the exception
  recorded when it raises);
* LiteLLM's callback finds the loop's span active around each call and, instead of a
  ``litellm_request`` span of its own (only with ``USE_OTEL_LITELLM_REQUEST_SPAN=true``), writes
  each call's attributes onto it (``gen_ai.operation.name`` ``chat``, the request, the usage,
  the finish reasons, the messages: the agent's span becomes a model call's, that of the last
  call whose callback ran before it ended) and sets its status OK; below it hangs a
  ``raw_gen_ai_request`` span per call (the provider's raw response as ``llm.openai.*``).

At its own cap (``limit``) the loop raises, and the agent span records that exception (its
status stays the OK LiteLLM set). Scenarios (argv[1]): three_tools / limit / tool_error.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from _handwritten_loop import MAX_STEPS, TOOLS, StepLimitReached, recording_relay
from _otel import JsonLinesExporter, model_settings
from _tools import TASKS, lookup
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

os.environ["OTEL_METRICS_EXPORTER"] = "none"  # the sidecar takes traces only
os.environ["OTEL_LOGS_EXPORTER"] = "none"
# (before LiteLLM is imported: it would download its model price list)
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm
import logfire


@logfire.instrument("lookup {key}")
def traced_lookup(key: str) -> str:
    return lookup(key)


def run_loop(scenario: str) -> str:
    base_url, model = model_settings()
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASKS[scenario]}]
    for _ in range(MAX_STEPS):
        response = litellm.completion(model=f"openai/{model}", api_base=base_url,
                                      api_key="sk-fake", messages=messages, tools=TOOLS,
                                      num_retries=0)
        message = response.choices[0].message.model_dump(exclude_none=True)
        messages.append(message)
        if not message.get("tool_calls"):
            return str(message.get("content") or "")
        for call in message["tool_calls"]:
            try:
                result = traced_lookup(**json.loads(call["function"]["arguments"]))
            except RuntimeError as exc:
                result = f"error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    raise StepLimitReached(f"Agent stopped: maximum number of steps ({MAX_STEPS}) reached")


def main(scenario: str) -> None:
    record = os.environ.get("RECORD_SPANS")  # each span as it ends, one request per line
    logfire.configure(send_to_logfire=False, service_name="litellm-logfire-loop", console=False,
                      additional_span_processors=[SimpleSpanProcessor(JsonLinesExporter(record))]
                      if record else None)
    logfire.instrument_openai()
    # LiteLLM exports its own spans (raw_gen_ai_request) through a provider of its own, to the
    # standard endpoint: with RECORD_SPANS, through the recording relay
    recording_relay()
    litellm.callbacks = ["otel"]
    try:
        with logfire.span("research agent {task}", task=TASKS[scenario]) as run:
            answer = run_loop(scenario)
            run.set_attribute("answer", answer)
        print("answer:", answer)
    except StepLimitReached as exc:
        print("stopped:", exc)
    logfire.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
