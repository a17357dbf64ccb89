"""smolagents agents (``ToolCallingAgent`` on an ``OpenAIServerModel`` at the scripted server)
traced by the AgentOps SDK (``agentops.init``: its own OpenTelemetry tracer provider, its own
instrumentation of smolagents and of the OpenAI client, its own ``agentops.*`` attribute names),
its OTLP/HTTP exporter pointed at the sidecar by ``exporter_endpoint`` (no API key: AgentOps
then exports unauthenticated). Scenarios (argv[1]): ``three_tools``, ``limit`` (the model calls
``lookup`` forever; ``max_steps=3`` stops it: smolagents asks the model, without tools, for a
final answer), ``tool_error`` (``lookup`` raises once, then the model answers). It prints one
JSON line last: {"ran": [the keys its tool ran with], "output": the agent's answer}.
"""

from __future__ import annotations

import json
import os
import sys

import _tools
from _otel import JsonLinesExporter, model_settings

RAN: list[str] = []


def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key to look up.
    """
    RAN.append(key)
    return _tools.lookup(key)


def main(scenario: str) -> None:
    # smolagents first: AgentOps instruments what is imported when it initialises (imported
    # after, smolagents' modules are instrumented half-loaded: an error, then a retry)
    from _agentops import init_agentops
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from smolagents import LiteLLMModel, ToolCallingAgent, tool

    tracer = init_agentops(os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] + "/v1/traces")
    if os.environ.get("RECORD_SPANS"):
        assert tracer.provider is not None
        tracer.provider.add_span_processor(
            SimpleSpanProcessor(JsonLinesExporter(os.environ["RECORD_SPANS"])))
    base_url, model_name = model_settings()
    agent = ToolCallingAgent(
        tools=[tool(lookup)], name="smol_researcher",
        model=LiteLLMModel(model_id="openai/" + model_name, api_base=base_url,
                           api_key="sk-fake"),
        max_steps=3 if scenario == "limit" else 10)
    output = agent.run(_tools.TASKS[scenario])
    tracer.provider.force_flush()
    tracer.shutdown()
    print(json.dumps({"ran": RAN, "output": str(output)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
