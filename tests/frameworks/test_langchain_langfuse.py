"""LangChain 1.x ``create_agent`` and LangGraph's ``create_react_agent`` (ChatOpenAI on the fake
server) traced by the Langfuse Python SDK's LangChain ``CallbackHandler`` (OpenTelemetry-based
since v3) and nothing else, in venv ``.venvs/langfuse``: Langfuse takes the application's tracer
provider, which exports to the sidecar, and adds its own span processor (which exports nothing
here: ``should_export_span``; Langfuse's cloud is never reached).

What Langfuse emits (details: the recordings): one span per LangChain run, scope
``langfuse-sdk``, only ``langfuse.*`` attributes and no GenAI operation. The observation's type
(``langfuse.observation.type``) says what a span is: ``generation`` (``ChatOpenAI``: the model
name, ``usage_details`` JSON, its output LangChain's message as JSON with its ``tool_calls``, no
finish reason), ``tool`` (named after the tool, its input the arguments, its output the
ToolMessage), ``chain`` (the graph's root, named after the agent, and every graph step), and
``agent`` for a chain whose name says "agent" (create_react_agent's ``agent`` node). The run's
metadata is flattened into one attribute per key (``langfuse.observation.metadata.<key>``, each
JSON-encoded): create_agent's ``lc_agent_name`` on every span of its graph, LangGraph's
``langgraph_node``, ``ls_integration``. A failure is status ERROR with the exception's message
(and ``langfuse.observation.level`` ERROR, ``status_message``), no exception event and no
type, on the tool, its step and the root alike; the recursion limit is its message on the root.

The expectations are DESIGN §3's, the same as for the other LangChain setups
(:mod:`tests.frameworks.test_langchain`), live and from the committed recordings — but for the
known gap: a tool's exception leaves no type on any span, so the run it ended is an ``error``
whose reason is ``error`` (not ``RuntimeError``).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.frameworks import cases
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import RECORDINGS, check_runs, replay, run_driver
from tests.frameworks.test_langchain import EXPECTED as LANGCHAIN_EXPECTED
from tests.frameworks.test_langchain import SCRIPTS
from tests.harness import RunningServer

DRIVER = "langchain_langfuse"
ENV = "langfuse"
EXPECTED = {**LANGCHAIN_EXPECTED,
            # known gap: Langfuse records the exception's message alone, not its type
            "tool_error": [replace(expect, terminal_reason="error")
                           for expect in LANGCHAIN_EXPECTED["tool_error"]]}


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    model = cases.register(llm, f"{DRIVER}-{scenario}", SCRIPTS[scenario])
    result = run_driver(ENV, DRIVER, scenario, sidecar, llm, model)
    check_runs(sidecar, EXPECTED[scenario])
    if scenario == "limit":
        assert "GraphRecursionError" in result.stdout
        assert len(llm.requests(model)) == 3  # the framework's own limit stopped the loop


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_replay(sidecar: RunningServer, scenario: str) -> None:
    replay(sidecar, RECORDINGS / DRIVER / f"{scenario}.jsonl")
    check_runs(sidecar, EXPECTED[scenario])
