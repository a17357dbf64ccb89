"""A scripted agent for end-to-end tests: real OTel SDK spans, exported over real OTLP/HTTP to
a sidecar as each one ends (SimpleSpanProcessor), with the attributes the client SDK stamps."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode


class ScriptedAgent:
    def __init__(self, otlp_http: str, run_id: str, name: str = "scripted",
                 session: str | None = None, budget: dict[str, int] | None = None) -> None:
        self.run_id = run_id
        self.ids: dict[str, Any] = {"watchdog.run.id": run_id, "watchdog.agent.name": name}
        if session is not None:
            self.ids["watchdog.session.id"] = session
        for key, value in (budget or {}).items():
            self.ids[f"watchdog.budget.{key}"] = value
        self.provider = TracerProvider()
        self.provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=otlp_http + "/v1/traces")))
        self.tracer = self.provider.get_tracer("scripted-agent")
        self._root = self.tracer.start_span(f"invoke_agent {name}", attributes={
            "gen_ai.operation.name": "invoke_agent", **self.ids})
        self._context = trace.set_span_in_context(self._root)
        self.finished = False

    def tool(self, name: str, args: dict[str, Any], result: str = "ok",
             error: str | None = None) -> None:
        with self.tracer.start_as_current_span(f"execute_tool {name}", context=self._context,
                                               attributes={
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
            "gen_ai.tool.call.arguments": json.dumps(args), "gen_ai.tool.call.result": result,
            **self.ids}) as span:
            if error:
                span.set_status(Status(StatusCode.ERROR, error))
                span.set_attribute("error.type", "RuntimeError")

    def chat(self, messages: int, finish_reason: str = "tool_call") -> None:
        conversation = json.dumps([{"role": "user", "parts": []}] * messages)
        with self.tracer.start_as_current_span("chat model", context=self._context, attributes={
                "gen_ai.operation.name": "chat", "gen_ai.input.messages": conversation,
                "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 5,
                "gen_ai.response.finish_reasons": [finish_reason], **self.ids}):
            pass

    def finish(self, answer: str | None = None, error_type: str | None = None) -> None:
        """End the run: the agent span arrives, with a final answer or a failure."""
        if answer is not None:
            self._root.set_attribute("final_result", answer)
        if error_type is not None:
            self._root.set_status(Status(StatusCode.ERROR, f"{error_type}: stopped"))
            self._root.set_attribute("error.type", error_type)
        self._root.end()
        self.close()

    def close(self) -> None:
        """Stop exporting without ending the run (a crashed agent)."""
        if not self.finished:
            self.finished = True
            self.provider.shutdown()


def api(method: str, url: str, body: object = None) -> tuple[int, Any]:
    """A JSON request to the control API: (status, decoded body)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
