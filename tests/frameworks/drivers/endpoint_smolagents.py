"""A smolagents ``ToolCallingAgent`` on ``OpenAIServerModel`` (no ``api_base``: its OpenAI client
reads ``OPENAI_BASE_URL``, so the base URL alone points it at the sidecar). Mode (argv[1]):
``run``, or ``agentops`` (on ``LiteLLMModel`` ``openai/<model>``, no ``api_base``: LiteLLM reads
``OPENAI_BASE_URL``; traced by the AgentOps SDK, ``agentops.init()`` before the agent, venv
``agentops_smolagents``; its spans go nowhere: its exporter's endpoint is a closed port). See
:mod:`endpoint_common`."""

from __future__ import annotations

import sys
from typing import Any

from endpoint_common import TASK, done, model, own_limit, search


def main(mode: str) -> None:
    model_object: Any
    if mode == "agentops":
        from _agentops import CLOSED_PORT, init_agentops
        from smolagents import LiteLLMModel  # (before AgentOps: agentops_smolagents says why)

        init_agentops(CLOSED_PORT + "/v1/traces")
        model_object = LiteLLMModel(f"openai/{model()}")
    else:
        from smolagents import OpenAIServerModel

        model_object = OpenAIServerModel(model())
    from smolagents import ToolCallingAgent, tool

    agent = ToolCallingAgent(tools=[tool(search)], model=model_object, max_steps=own_limit(30),
                             verbosity_level=0)
    done(agent.run(TASK))


if __name__ == "__main__":
    main(sys.argv[1])
