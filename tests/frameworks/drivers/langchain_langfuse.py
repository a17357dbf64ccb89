"""LangChain/LangGraph traced by the Langfuse Python SDK (OpenTelemetry-based since v3) and
nothing else: its LangChain ``CallbackHandler`` in the invocation's config. Langfuse takes the
global tracer provider the application set (here the one exporting to the sidecar) and adds its
own span processor to it, which exports nothing here (``should_export_span``: the keys are
dummies, Langfuse's cloud is never reached); see :mod:`_langchain` for the scenarios."""

from __future__ import annotations

import os
import sys

os.environ.update({
    "LANGFUSE_PUBLIC_KEY": "pk-lf-fake-never-sent",
    "LANGFUSE_SECRET_KEY": "sk-lf-fake-never-sent",
    "LANGFUSE_BASE_URL": "http://127.0.0.1:9",  # unreachable on purpose: nothing goes there
})

from _langchain import run

if __name__ == "__main__":
    from opentelemetry.sdk.trace import TracerProvider

    def instrument(provider: TracerProvider) -> object:
        from langfuse import Langfuse

        return Langfuse(tracer_provider=provider, should_export_span=lambda span: False)

    def handlers() -> list[object]:
        from langfuse.langchain import CallbackHandler

        return [CallbackHandler()]

    def flush() -> None:
        from langfuse import get_client

        get_client().flush()

    run(sys.argv[1], instrument, before_shutdown=flush, callbacks=handlers)
