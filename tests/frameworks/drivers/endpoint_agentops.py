"""The hand-written tool loop of :mod:`endpoint_openai` under the AgentOps SDK as
:mod:`agentops_loop` traces it (``agentops.init``: its OpenAI instrumentation wraps the client's
calls and streams; its decorators on the agent), pointed at the sidecar by ``OPENAI_BASE_URL``
alone. Its spans go nowhere: its exporter's endpoint is a closed port (:mod:`_agentops`: no key,
nothing sent off this machine). Modes (argv[1]): ``chat``, ``chat_stream``. See
:mod:`endpoint_common`."""

from __future__ import annotations

import sys

from _agentops import CLOSED_PORT, init_agentops
from agentops.sdk.decorators import agent, operation, trace
from endpoint_common import done
from endpoint_openai import chat
from openai import OpenAI


@agent(name="endpoint-agent")
class EndpointAgent:
    @operation(name="run")
    def run(self, stream: bool) -> str:
        return chat(OpenAI(), stream)  # OPENAI_BASE_URL and OPENAI_API_KEY from the environment


@trace(name="endpoint")
def invoke(stream: bool) -> str:
    return EndpointAgent().run(stream)


def main(mode: str) -> None:
    init_agentops(CLOSED_PORT + "/v1/traces")
    done(invoke(mode.endswith("_stream")))


if __name__ == "__main__":
    main(sys.argv[1])
