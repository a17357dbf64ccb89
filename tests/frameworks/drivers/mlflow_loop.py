"""A hand-written agent loop on the OpenAI client, traced by MLflow and exported over OTLP.

MLflow's own tracing, pointed at the sidecar the documented way (``OTEL_EXPORTER_OTLP_*``: MLflow
then exports to that endpoint only): ``mlflow.openai.autolog()`` traces each model call
(``Completions``, span type ``CHAT_MODEL``), ``@mlflow.trace`` the agent (type ``AGENT``) and the
tool (type ``TOOL``). Every attribute is in MLflow's own namespace (``mlflow.spanType``,
``mlflow.spanInputs``, ``mlflow.spanOutputs``, ``mlflow.chat.tokenUsage``, ...), every value
JSON-encoded. At its own cap (``limit``) the loop raises, and the agent span records it.
Scenarios (argv[1]): three_tools / limit / tool_error.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from _handwritten_loop import StepLimitReached, recording_relay, run_loop
from _tools import lookup

recording_relay()
# traces only, as MLflow's docs show it (the base endpoint would export MLflow's metrics too)
os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = \
    os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT").rstrip("/") + "/v1/traces"
os.environ["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"
os.environ["OTEL_SERVICE_NAME"] = "mlflow-loop"

import mlflow  # noqa: E402  (reads the endpoint at its first trace)
from mlflow.entities import SpanType  # noqa: E402
from mlflow.tracing.provider import provider  # noqa: E402


@mlflow.trace(name="lookup", span_type=SpanType.TOOL)
def traced_lookup(key: str) -> str:
    return lookup(key)


def call_tool(name: str, args: dict[str, Any]) -> str:
    return traced_lookup(**args)


@mlflow.trace(name="research_agent", span_type=SpanType.AGENT)
def research_agent(scenario: str) -> str:
    return run_loop(scenario, call_tool)


def main(scenario: str) -> None:
    mlflow.openai.autolog()
    try:
        print("answer:", research_agent(scenario))
    except StepLimitReached as exc:
        print("stopped:", exc)
    provider.get().shutdown()  # MLflow's own tracer provider: exports what is left


if __name__ == "__main__":
    main(sys.argv[1])
