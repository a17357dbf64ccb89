"""LangChain/LangGraph traced by OpenLIT: ``openlit.init()`` (it reuses the tracer provider
already set, exporting to the sidecar, and instruments LangChain, LangGraph and the OpenAI
client); see :mod:`_langchain` for the scenarios."""

from __future__ import annotations

import sys

import openlit
from _langchain import run

if __name__ == "__main__":
    run(sys.argv[1], lambda provider: openlit.init(
        service_name="langchain-service", disable_metrics=True, disable_events=True))
