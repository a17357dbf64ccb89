"""Runs fed to a real sidecar the way agents do it: OTel SDK spans sent by the SDK's own
OTLP/HTTP exporter. Used by the API and CLI tests.

``explorer_run`` records a small but realistic run (model calls, tool calls with arguments and
results, a failing call, a repeated call, a secret in a tool result) with times near the real
clock, so the sidecar's ``elapsed``/``idle`` read sensibly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.harness import RunningServer
from tests.spans import SpanMaker, chat_attrs, tool_attrs

SECRET = "sk-proj-abcdefghijklmnop1234567890"


def export_http(sidecar: RunningServer, spans: Sequence[ReadableSpan],
                token: str | None = None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    exporter = OTLPSpanExporter(endpoint=sidecar.otlp_http + "/v1/traces", headers=headers,
                                timeout=10)
    try:
        assert exporter.export(list(spans)) is SpanExportResult.SUCCESS
    finally:
        exporter.shutdown()


def explorer_run(run_id: str, agent: str = "explorer", *, end: bool = False,
                 answer: str = "The retry policy is exponential backoff.",
                 maker: SpanMaker | None = None) -> list[ReadableSpan]:
    """The spans of one run keyed by ``watchdog.run.id``; with ``end`` the agent span (and a
    final answer) arrives too."""
    maker = maker or SpanMaker()
    ids = {"watchdog.run.id": run_id, "gen_ai.agent.name": agent}
    t = time.time() - 30
    root = maker.open(f"invoke_agent {agent}", {"gen_ai.operation.name": "invoke_agent", **ids},
                      start=t)
    maker.span("chat gpt-4o", chat_attrs(120, 30, "tool_calls", **ids), parent=root,
               start=t + 1, end=t + 2)
    maker.span("execute_tool search_docs",
               tool_attrs("search_docs", '{"query": "retry policy"}',
                          "docs/retry.md: exponential backoff, max 5 attempts", **ids),
               parent=root, start=t + 2, end=t + 3)
    maker.span("execute_tool read_env",
               tool_attrs("read_env", '{"name": "OPENAI_API_KEY"}', f"value: {SECRET}", **ids),
               parent=root, start=t + 3, end=t + 4)
    maker.span("execute_tool read_file", tool_attrs("read_file", '{"path": "src/app.py"}', **ids),
               parent=root, start=t + 4, end=t + 5,
               exception=FileNotFoundError("No such file: src/app.py"))
    maker.span("execute_tool search_docs",
               tool_attrs("search_docs", '{"query":"retry policy"}',
                          "docs/retry.md: exponential backoff, max 5 attempts", **ids),
               parent=root, start=t + 5, end=t + 6)
    maker.span("chat gpt-4o", chat_attrs(300, 40, "stop", **ids), parent=root,
               start=t + 6, end=t + 7)
    if end:
        root.set_attribute("final_result", answer)
        root.end(end_time=int((t + 8) * 1e9))
    return maker.take()
