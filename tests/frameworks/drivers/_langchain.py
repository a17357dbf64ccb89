"""LangChain 1.x ``create_agent`` and LangGraph's ``create_react_agent`` on ChatOpenAI (the fake
server), traced by the instrumentation the driver passes (``langchain_openllmetry.py``:
OpenLLMetry; ``langchain_openinference.py``: OpenInference).

Scenarios (argv[1]):
- ``three_tools``: ``create_agent`` named ``lc_researcher`` calls ``lookup`` 3 times, then
  answers;
- ``limit``: the model calls ``lookup`` forever; LangGraph's ``recursion_limit`` (6 super-steps)
  stops it with ``GraphRecursionError`` (caught here, as an application would);
- ``tool_error``: ``lookup`` raises; LangGraph's ToolNode re-raises anything but a
  ToolInvocationError, so the invocation ends with that exception (caught here);
- ``tool_error_handled``: the tool handles its own errors (``handle_tool_error=True``): for
  ``missing`` it returns a text that says "Error" (a result like any other), for ``broken`` it
  raises a ``ToolException``, which LangChain hands to the model as a ToolMessage with status
  "error" (the tool span ends OK); then the model answers;
- ``react_three_tools``: the same as ``three_tools`` with LangGraph's ``create_react_agent``
  named ``lg_researcher``;
- ``subagent``: ``lc_manager`` calls a tool ``research`` that invokes the agent
  ``lc_researcher`` (model ``<model>-sub``: one ``lookup``, then an answer), then answers.

A scenario ending ``_nocontent`` runs with message content off, as a privacy-minded deployment
sets it: OpenLLMetry's ``TRACELOOP_TRACE_CONTENT=false``, OpenInference's
``OPENINFERENCE_HIDE_INPUTS``/``_OUTPUTS``/``_INPUT_MESSAGES``/``_OUTPUT_MESSAGES`` (both set:
each instrumentation reads its own).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

from _otel import model_settings, setup_tracing
from langchain.agents import create_agent
from langchain_core.tools import ToolException, tool
from langchain_openai import ChatOpenAI
from opentelemetry.sdk.trace import TracerProvider

RECURSION_LIMIT = 6
CONTENT_OFF = {
    "TRACELOOP_TRACE_CONTENT": "false",
    **{f"OPENINFERENCE_HIDE_{what}": "true"
       for what in ("INPUTS", "OUTPUTS", "INPUT_MESSAGES", "OUTPUT_MESSAGES")},
}


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    if key == "broken":
        raise RuntimeError(f"backend unavailable for {key}")
    return f"value of {key}"


@tool("lookup")
def lookup_handled(key: str) -> str:
    """Look a key up."""
    if key == "missing":
        return f"Error: no value stored for {key}"
    if key == "broken":
        raise ToolException(f"backend unavailable for {key}")
    return f"value of {key}"


lookup_handled.handle_tool_error = True


def run(scenario: str, instrument: Callable[[TracerProvider], object],
        before_shutdown: Callable[[], object] = lambda: None,
        callbacks: Callable[[], list[object]] = list) -> None:
    """Drive ``scenario``; ``callbacks`` makes the LangChain callback handlers a tracer that is
    one (Langfuse's) passes in the invocation's config (a nested agent inherits them)."""
    if scenario.endswith("_nocontent"):
        os.environ.update(CONTENT_OFF)
        scenario = scenario.removesuffix("_nocontent")
    provider = setup_tracing("langchain-service")
    instrument(provider)
    base_url, model_name = model_settings()

    def model(name: str) -> ChatOpenAI:
        return ChatOpenAI(model=name, base_url=base_url, api_key="sk-fake", temperature=0)

    config: dict[str, object] = ({"recursion_limit": RECURSION_LIMIT} if scenario == "limit"
                                 else {})
    handlers = callbacks()
    if handlers:
        config["callbacks"] = handlers
    if scenario == "react_three_tools":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from langgraph.prebuilt import create_react_agent
        agent = create_react_agent(model(model_name), [lookup], name="lg_researcher")
    elif scenario == "subagent":
        researcher = create_agent(model(model_name + "-sub"), [lookup], name="lc_researcher")

        @tool
        def research(question: str) -> str:
            """Ask the research agent a question."""
            result = researcher.invoke({"messages": [{"role": "user", "content": question}]})
            return str(result["messages"][-1].content)

        agent = create_agent(model(model_name), [research], name="lc_manager")
    else:
        tools = [lookup_handled if scenario == "tool_error_handled" else lookup]
        agent = create_agent(model(model_name), tools, name="lc_researcher")
    try:
        result = agent.invoke({"messages": [{"role": "user", "content": "Look up a, b and c."}]},
                              config=config)
        print("answer:", result["messages"][-1].content)
    except Exception as exc:  # the limit or the tool's error, as an application sees it
        print("stopped:", type(exc).__name__, exc)
    before_shutdown()
    provider.shutdown()
