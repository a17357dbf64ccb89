"""An Apache Burr agent (:mod:`_burr`: ``ask_model``, the tool's action ``lookup``, ``answer``;
the graph's cap at 5 model calls, ``give_up``) traced as Burr's docs set it up: its
``OpenTelemetryBridge`` hook (a span for the application's ``run`` and one per action) and
``init_instruments("openai")`` (OpenLLMetry's opentelemetry-instrumentation-openai beneath) on
the global tracer provider. Scenarios (argv[1]): ``three_tools``, ``limit`` (the model asks for
a tool forever: the cap stops it), ``tool_error`` (the tool's exception leaves its action: Burr
ends the application's run with it).
"""

from __future__ import annotations

import sys

import _burr
from _otel import model_settings, setup_tracing
from _tools import TASKS, lookup
from burr.integrations.opentelemetry import OpenTelemetryBridge, init_instruments
from openai import OpenAI

SCHEMA = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}


def main(scenario: str) -> None:
    provider = setup_tracing("burr-agent")
    init_instruments("openai")
    base_url, model = model_settings()
    app = _burr.agent(OpenAI(base_url=base_url, api_key="sk-fake"), model, lookup, SCHEMA,
                      "Look things up, then answer.", TASKS.get(scenario, "Look up a."), cap=5,
                      hooks=[OpenTelemetryBridge()])
    try:
        print(_burr.run(app))
    except RuntimeError as exc:
        print("stopped:", type(exc).__name__, exc)
    provider.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
