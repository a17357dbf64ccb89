"""LangChain/LangGraph traced by OpenInference (openinference-instrumentation-langchain); see
:mod:`_langchain` for the scenarios."""

from __future__ import annotations

import sys

from _langchain import run
from openinference.instrumentation.langchain import LangChainInstrumentor

if __name__ == "__main__":
    run(sys.argv[1], lambda provider: LangChainInstrumentor().instrument(
        tracer_provider=provider))
