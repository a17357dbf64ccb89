"""LangChain/LangGraph traced by LangSmith's own OpenTelemetry export (``langsmith[otel]``) and
nothing else: ``LANGSMITH_TRACING`` on, ``LANGSMITH_OTEL_ENABLED`` and ``LANGSMITH_OTEL_ONLY``
(spans go to OpenTelemetry only, never to LangSmith's cloud; the API key is a dummy). LangSmith
takes the global tracer provider the application set (here the one exporting to the sidecar);
see :mod:`_langchain` for the scenarios."""

from __future__ import annotations

import os
import sys

os.environ.update({
    "LANGSMITH_TRACING": "true",
    "LANGSMITH_OTEL_ENABLED": "true",
    "LANGSMITH_OTEL_ONLY": "true",
    "LANGSMITH_API_KEY": "lsv2-fake-never-sent",
    "LANGSMITH_ENDPOINT": "http://127.0.0.1:9",  # unreachable on purpose: nothing goes there
})

from _langchain import run

if __name__ == "__main__":
    from langchain_core.tracers.langchain import wait_for_all_tracers

    # LangSmith hands its runs to OpenTelemetry from a background thread: wait for it
    run(sys.argv[1], lambda provider: None, before_shutdown=wait_for_all_tracers)
