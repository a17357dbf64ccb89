"""A LangChain 1.x agent (``create_agent``) steered by ``WatchdogMiddleware``; spans by
OpenInference's LangChain instrumentor. See ``_steering.py`` for the scenarios."""

from __future__ import annotations

from _otel import model_settings
from _steering import BUDGETS, fetch, list_dir, read, report, scenario, search
from agent_watchdog_client import Watchdog
from agent_watchdog_client.adapters.langchain import WatchdogMiddleware
from langchain.agents import create_agent
from langchain_core.tools import ToolException, tool
from langchain_openai import ChatOpenAI
from openinference.instrumentation.langchain import LangChainInstrumentor


def fetch_url(url: str) -> str:
    """Fetch a URL."""
    try:
        return fetch(url)
    except ConnectionError as exc:  # LangChain hands a ToolException's text to the model
        raise ToolException(str(exc)) from exc


fetch_tool = tool("fetch")(fetch_url)
fetch_tool.handle_tool_error = True
TOOLS = {"budget": [tool(search)], "cycle": [tool("list")(list_dir), tool(read)],
         "errors": [fetch_tool]}


def main() -> None:
    name = scenario()
    base_url, model = model_settings()
    wd = Watchdog()
    provider = wd.setup_tracing(service_name="steering-langchain")
    LangChainInstrumentor().instrument(tracer_provider=provider)
    agent = create_agent(ChatOpenAI(model=model, base_url=base_url, api_key="sk-fake"),
                         tools=TOOLS[name], system_prompt="You are a careful research agent.",
                         middleware=[WatchdogMiddleware()])
    with wd.run(agent="explorer", max_tool_calls=BUDGETS[name]) as run:
        result = agent.invoke({"messages": [{"role": "user", "content": "Find the file."}]},
                              {"recursion_limit": 100})
    report(run, result["messages"][-1].text)
    wd.close()
    provider.shutdown()


if __name__ == "__main__":
    main()
