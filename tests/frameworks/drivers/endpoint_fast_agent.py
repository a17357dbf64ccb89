"""fast-agent (``fast-agent-mcp``) on the model endpoint: one agent declared by
``@fast.agent(...)``, its tool ``search`` from a stdio MCP server
(``fast_agent_files_server.py``), run by ``fast.run()`` and ``agent.send(task)``, in the
working directory whose ``fastagent.config.yaml`` the test wrote: its model
(``default_model``: ``openai.<model>`` or ``anthropic.<model>``), where that provider is
(``openai.base_url`` / ``anthropic.base_url``, or none: the provider's client reads
``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``) and its MCP server. Mode (argv[1]): ``send``;
``twice``: two ``send`` calls on the same agent (its history kept: one conversation), the
second ``TASK2``; ``chain``: a ``@fast.chain`` of the researcher then a writer with no tools,
sent the task.
``ENDPOINT_OWN_LIMIT``: its ``RequestParams(max_iterations=...)`` (default fast-agent's, 20).
Prints ``{"ran": [the terms the server's tool ran with], "output": what send returned}``
(see :mod:`endpoint_common`)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from endpoint_common import INSTRUCTIONS, TASK
from mcp_agent.core.fastagent import FastAgent
from mcp_agent.core.request_params import RequestParams

fast = FastAgent("endpoint", parse_cli_args=False)
_params = (RequestParams(max_iterations=int(os.environ["ENDPOINT_OWN_LIMIT"]))
           if "ENDPOINT_OWN_LIMIT" in os.environ else None)


@fast.agent(name="researcher", instruction=INSTRUCTIONS, servers=["files"],
            request_params=_params)
@fast.agent(name="writer", instruction="You write the report of what was found.")
@fast.chain(name="pipeline", sequence=["researcher", "writer"])
async def main(mode: str) -> None:
    async with fast.run() as agent:
        if mode == "chain":
            output = await agent.pipeline.send(TASK)
        else:
            output = await agent.researcher.send(TASK)
        if mode == "twice":
            output = await agent.researcher.send(os.environ.get("TASK2", "Summarise."))
    log = Path("ran.log")
    ran = log.read_text().splitlines() if log.exists() else []
    print(json.dumps({"ran": ran, "output": output}), flush=True)


if __name__ == "__main__":
    assert sys.argv[1] in ("send", "twice", "chain"), sys.argv
    asyncio.run(main(sys.argv[1]))
