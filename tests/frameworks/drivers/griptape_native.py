"""A Griptape agent (``griptape.structures.Agent``: one ``PromptTask`` with the tool
``LookupTool``, activity ``lookup``, on ``OpenAiChatPromptDriver`` at the scripted server)
traced by Griptape's own ``OpenTelemetryObservabilityDriver`` inside its ``Observability``
context, as Griptape's docs set it up, on a ``BatchSpanProcessor`` with the OTLP/HTTP exporter
(and the recorder: :mod:`_otel`). Scenarios (argv[1]): ``three_tools``, ``limit`` (the model
asks for a tool forever: the task's ``max_subtasks=6`` stops it with an ``ErrorArtifact``),
``tool_error`` (the tool raises for "broken": Griptape hands the error to the model),
``two_runs`` (two agents' ``run``, one after the other, in one ``Observability`` block). It
prints one JSON line last: {"ran": [the keys its tool ran with], "output": the (last) run's
output}.
"""

from __future__ import annotations

import json
import os
import sys

from _otel import JsonLinesExporter, model_settings
from _tools import TASKS, lookup
from griptape.artifacts import TextArtifact
from griptape.drivers.observability.open_telemetry import OpenTelemetryObservabilityDriver
from griptape.drivers.prompt.openai import OpenAiChatPromptDriver
from griptape.observability import Observability
from griptape.structures import Agent
from griptape.tasks import PromptTask
from griptape.tools import BaseTool
from griptape.utils.decorators import activity
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from schema import Literal, Schema

RAN: list[str] = []


class LookupTool(BaseTool):
    @activity(config={"description": "Look a key up.",
                      "schema": Schema({Literal("key", description="the key"): str})})
    def lookup(self, key: str) -> TextArtifact:
        RAN.append(key)
        return TextArtifact(lookup(key))


def main(scenario: str) -> None:
    base_url, model = model_settings()
    driver = OpenTelemetryObservabilityDriver(
        service_name="griptape-agent",
        span_processor=BatchSpanProcessor(OTLPSpanExporter(), schedule_delay_millis=50))
    if os.environ.get("RECORD_SPANS"):
        driver.trace_provider.add_span_processor(
            SimpleSpanProcessor(JsonLinesExporter(os.environ["RECORD_SPANS"])))
    output = None
    with Observability(observability_driver=driver):
        for _ in range(2 if scenario == "two_runs" else 1):  # (a new agent per invocation)
            agent = Agent(tasks=[PromptTask(
                tools=[LookupTool()], max_subtasks=6 if scenario == "limit" else 20,
                prompt_driver=OpenAiChatPromptDriver(model=model, base_url=base_url,
                                                     api_key="sk-fake"))])
            output = agent.run(TASKS.get(scenario, "Look up a.")).output.value
    driver.trace_provider.shutdown()
    print(json.dumps({"ran": RAN, "output": output}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
