"""A hand-written agent loop on the OpenAI client, shared by the drivers of tracing setups that
wrap such a loop (``mlflow_loop``, ``logfire_loop``, ``openai_olm_loop``): each passes its own
traced tool call; the loop itself traces nothing.

The loop offers ``lookup``, runs the tool calls the model asks for and feeds their results (or
``error: ...`` when the tool raises) back, until an answer or its own cap of ``MAX_STEPS``
model calls, where it raises :class:`StepLimitReached` (the driver decides what is traced of
that).

With ``RECORD_SPANS`` set, :func:`recording_relay` puts a small OTLP/HTTP relay between an SDK
that builds its own exporter and the sidecar, recording every export request it passes on as
one OTLP/JSON line, as ``_otel.JsonLinesExporter`` does for drivers that own their provider.
"""

from __future__ import annotations

import gzip
import json
import os
import threading
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from _otel import _hex_ids, model_settings
from _tools import TASKS
from google.protobuf.json_format import MessageToDict
from openai import OpenAI
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

MAX_STEPS = 5
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a key up.",
    "parameters": {"type": "object", "properties": {"key": {"type": "string"}},
                   "required": ["key"]}}}]


class StepLimitReached(RuntimeError):
    """The loop's own cap on model calls."""


def run_loop(scenario: str, call_tool: Callable[[str, dict[str, Any]], str]) -> str:
    """The answer to the scenario's task; raises :class:`StepLimitReached` at the cap."""
    base_url, model = model_settings()
    client = OpenAI(base_url=base_url, api_key="sk-fake")
    messages: list[dict[str, Any]] = [{"role": "user", "content": TASKS[scenario]}]
    for _ in range(MAX_STEPS):
        choice = client.chat.completions.create(model=model, messages=messages,
                                                tools=TOOLS).choices[0]
        message = choice.message.model_dump(exclude_none=True)
        messages.append(message)
        if not message.get("tool_calls"):
            return str(message.get("content") or "")
        for call in message["tool_calls"]:
            try:
                result = call_tool(call["function"]["name"],
                                   json.loads(call["function"]["arguments"]))
            except RuntimeError as exc:
                result = f"error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    raise StepLimitReached(f"Agent stopped: maximum number of steps ({MAX_STEPS}) reached")


class _Relay(BaseHTTPRequestHandler):
    upstream = ""
    record = ""
    lock = threading.Lock()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        raw = gzip.decompress(body) if self.headers.get("Content-Encoding") == "gzip" else body
        if "json" in (self.headers.get("Content-Type") or ""):
            document = json.loads(raw)
        else:
            request = ExportTraceServiceRequest()
            request.ParseFromString(raw)
            document = _hex_ids(MessageToDict(request, use_integers_for_enums=True))
        with self.lock, open(self.record, "a", encoding="utf-8") as out:
            out.write(json.dumps(document, sort_keys=True) + "\n")
        headers = {key: value for key, value in self.headers.items()
                   if key.lower() in ("content-type", "content-encoding")}
        forward = urllib.request.Request(self.upstream + self.path, data=body, headers=headers,
                                         method="POST")
        with urllib.request.urlopen(forward, timeout=30) as response:
            reply, status = response.read(), response.status
            content_type = response.headers.get("Content-Type") or "application/x-protobuf"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def recording_relay() -> None:
    """With ``RECORD_SPANS`` set: point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at a relay that records
    each export request and passes it on to the sidecar (call before the SDK reads it)."""
    record = os.environ.get("RECORD_SPANS")
    if not record:
        return
    _Relay.upstream = os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/")
    _Relay.record = record
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Relay)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{server.server_address[1]}"
