"""LangChain/LangGraph traced by OpenLLMetry (opentelemetry-instrumentation-langchain); see
:mod:`_langchain` for the scenarios."""

from __future__ import annotations

import sys

from _langchain import run
from opentelemetry.instrumentation.langchain import LangchainInstrumentor

if __name__ == "__main__":
    run(sys.argv[1], lambda provider: LangchainInstrumentor().instrument(
        tracer_provider=provider))
