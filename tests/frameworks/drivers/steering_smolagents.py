"""A smolagents ``ToolCallingAgent`` steered by ``steer_smolagents``; spans by OpenInference's
smolagents instrumentor. See ``_steering.py`` for the scenarios."""

from __future__ import annotations

import os

from _otel import model_settings
from _steering import BUDGETS, fetch, list_dir, read, report, scenario, search
from agent_watchdog_client import Watchdog
from agent_watchdog_client.adapters.smolagents import steer_smolagents
from openinference.instrumentation.smolagents import SmolagentsInstrumentor
from smolagents import OpenAIServerModel, ToolCallingAgent, tool


@tool
def search_tool(q: str) -> str:
    """Search the files for a term.

    Args:
        q: the term
    """
    return search(q)


@tool
def list_tool(dir: str) -> str:
    """List a directory.

    Args:
        dir: the directory
    """
    return list_dir(dir)


@tool
def read_tool(path: str) -> str:
    """Read a file.

    Args:
        path: the file
    """
    return read(path)


@tool
def fetch_tool(url: str) -> str:
    """Fetch a URL.

    Args:
        url: the URL
    """
    return fetch(url)


for smol_tool, name in ((search_tool, "search"), (list_tool, "list"), (read_tool, "read"),
                        (fetch_tool, "fetch")):
    smol_tool.name = name
TOOLS = {"budget": [search_tool], "cycle": [list_tool, read_tool], "errors": [fetch_tool]}


def main() -> None:
    name = scenario()
    base_url, model = model_settings()
    wd = Watchdog()
    provider = wd.setup_tracing(service_name="steering-smolagents")
    SmolagentsInstrumentor().instrument(tracer_provider=provider)
    agent = steer_smolagents(ToolCallingAgent(
        tools=TOOLS[name], model=OpenAIServerModel(model, api_base=base_url, api_key="sk-fake"),
        max_steps=60, verbosity_level=0,
        stream_outputs=os.environ.get("SMOLAGENTS_STREAM_OUTPUTS") == "1"))
    with wd.run(agent="explorer", max_tool_calls=BUDGETS[name]) as run:
        answer = agent.run("Find the file.")
    report(run, answer)
    wd.close()
    provider.shutdown()


if __name__ == "__main__":
    main()
