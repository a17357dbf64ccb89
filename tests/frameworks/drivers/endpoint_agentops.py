"""The hand-written tool loop of :mod:`endpoint_openai` under the AgentOps SDK as
:mod:`agentops_loop` traces it (``agentops.init``: its OpenAI instrumentation wraps the client's
calls and streams; its decorators on the agent), pointed at the sidecar by ``OPENAI_BASE_URL``
alone. Its spans go nowhere: its exporter's endpoint is a closed port, and no AgentOps key
works offline. Modes (argv[1]): ``chat``, ``chat_stream``. See :mod:`endpoint_common`."""

from __future__ import annotations

import os
import sys

os.environ["AGENTOPS_LOGGING_TO_FILE"] = "False"  # (else its log goes to ./agentops.log)

import agentops
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
    agentops.init(api_key="00000000-0000-0000-0000-000000000000",
                  exporter_endpoint="http://127.0.0.1:9/v1/traces", auto_start_session=False,
                  log_level="CRITICAL")
    done(invoke(mode.endswith("_stream")))


if __name__ == "__main__":
    main(sys.argv[1])
