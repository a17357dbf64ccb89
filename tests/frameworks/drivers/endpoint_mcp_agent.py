"""mcp-agent (lastmile-ai's ``mcp-agent``) on the model endpoint: an ``MCPApp`` run by
``app.run()``, one ``Agent`` whose tool ``search`` comes from the stdio MCP server
``fast_agent_files_server.py``, its LLM ``OpenAIAugmentedLLM`` (Chat Completions, not
streamed) attached by ``agent.attach_llm``, asked by ``generate_str(task)``, in the working
directory whose ``mcp_agent.config.yaml`` the test wrote (``openai.base_url``, or none:
``OPENAI_BASE_URL``; ``openai.default_model``; the MCP server). Mode (argv[1]): ``generate``.
``ENDPOINT_OWN_LIMIT``: its ``RequestParams(max_iterations=...)`` (default mcp-agent's, 10).
Prints ``OUTCOME {"ran": [the terms the server's tool ran with], "output": what it
returned}``."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from endpoint_common import INSTRUCTIONS, TASK
from mcp_agent.agents.agent import Agent
from mcp_agent.app import MCPApp
from mcp_agent.workflows.llm.augmented_llm import RequestParams
from mcp_agent.workflows.llm.augmented_llm_openai import OpenAIAugmentedLLM


async def main() -> None:
    app = MCPApp(name="endpoint")
    params = (RequestParams(max_iterations=int(os.environ["ENDPOINT_OWN_LIMIT"]))
              if "ENDPOINT_OWN_LIMIT" in os.environ else None)
    async with app.run():
        agent = Agent(name="researcher", instruction=INSTRUCTIONS, server_names=["files"])
        async with agent:
            llm = await agent.attach_llm(OpenAIAugmentedLLM)
            output = await llm.generate_str(TASK, request_params=params)
    log = Path("ran.log")
    ran = log.read_text().splitlines() if log.exists() else []
    # marked: its console logger writes JSON lines to stdout too, some after this one
    print("OUTCOME " + json.dumps({"ran": ran, "output": output}), flush=True)


if __name__ == "__main__":
    assert sys.argv[1:] == ["generate"], sys.argv
    asyncio.run(main())
