"""A hand-written agent loop on the OpenAI client, traced by the AgentOps SDK.

AgentOps set up as its docs show a custom agent: ``agentops.init`` (its own tracer provider and
exporter, pointed at the sidecar by ``exporter_endpoint``; no AgentOps account: its key is
refused offline and it exports without one), its decorators on the agent (``@trace`` around
the invocation, ``@agent`` on the agent's class, ``@operation`` on its run method, ``@tool`` on
the tool) and its own OpenAI instrumentation for each model call. At its own cap (``limit``) the
loop raises, out of the decorated methods. Scenarios (argv[1]): three_tools / limit /
tool_error.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from _agentops import init_agentops
from _handwritten_loop import StepLimitReached, recording_relay, run_loop
from _tools import lookup

recording_relay()

from agentops.sdk.decorators import agent, operation, tool, trace  # noqa: E402


@tool(name="lookup")
def traced_lookup(key: str) -> str:
    return lookup(key)


def call_tool(name: str, args: dict[str, Any]) -> str:
    return traced_lookup(**args)


@agent(name="research-agent")
class ResearchAgent:
    @operation(name="run")
    def run(self, scenario: str) -> str:
        return run_loop(scenario, call_tool)


@trace(name="research")
def research(scenario: str) -> str:
    return ResearchAgent().run(scenario)


def main(scenario: str) -> None:
    init_agentops(os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"].rstrip("/") + "/v1/traces")
    try:
        print("answer:", research(scenario))
    except StepLimitReached as exc:
        print("stopped:", exc)
    from opentelemetry import trace as otel_trace
    provider = otel_trace.get_tracer_provider()
    getattr(provider, "shutdown", lambda: None)()


if __name__ == "__main__":
    main(sys.argv[1])
