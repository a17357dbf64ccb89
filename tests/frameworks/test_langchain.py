"""LangChain 1.x ``create_agent`` and LangGraph's ``create_react_agent`` (ChatOpenAI on the fake
server) traced by OpenLLMetry (opentelemetry-instrumentation-langchain), in venv
``.venvs/langchain``; and ``create_agent`` traced by OpenInference
(openinference-instrumentation-langchain), in venv ``.venvs/steering_langchain``.

What OpenLLMetry emits (details: the recordings and ``/work/findings/langchain.md``): one trace
per ``invoke``, the graph's workflow span ``<agent name>`` > task spans per graph node
(``model``/``agent``, ``tools``) > ``ChatOpenAI.chat`` LLM spans and ``<tool>.tool`` spans.
LangGraph's ``recursion_limit`` raises ``GraphRecursionError``; a tool's exception is
re-raised by the ToolNode and ends the invocation, unless the tool handles it
(``handle_tool_error``): then the model gets a ToolMessage with status "error", the tool span
ends OK and only its ``traceloop.entity.output`` says the call failed. A tool that invokes
another agent nests that agent's workflow span inside its tool span.

The expectations are DESIGN §3's: one run per invocation (``create_agent`` opens no run of its
own), a child run for the agent a tool invokes (with its parent), iterations = model calls, tool
calls, an error counted once, terminal state and reason, ``has_final_answer``, the agent's name.
Each case runs live and from its committed recording.

Every case again with message content off (``<scenario>_nocontent``): OpenLLMetry with
``TRACELOOP_TRACE_CONTENT=false`` drops every input, output, argument and result but keeps
finish reasons, usage and tool names; OpenInference with ``OPENINFERENCE_HIDE_*`` writes
``__REDACTED__`` for them and keeps ``llm.finish_reason``. The runs read as with content, except:
OpenInference's placeholder arguments made three different tool calls one call repeated three
times, and the root CHAIN's answer text ``__REDACTED__`` (now: no arguments, no answer text).
Known gap: a failure the tool handles itself (``handle_tool_error``) is said only by the
ToolMessage's status, hidden with the content; its span ends OK (OpenLLMetry's
``gen_ai.task.status`` says success): the error is not counted (``errors`` unchecked;
``test_nocontent_handled_tool_error_is_on_no_span`` pins the cause).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from tests.frameworks import cases
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    RECORDINGS,
    UNCHECKED,
    Expect,
    check_runs,
    recorded_spans,
    replay,
    run_driver,
)
from tests.harness import RunningServer

DRIVER = "langchain_openllmetry"
ENV = "langchain"
# OpenInference's LangChain instrumentation, in the venv of the LangChain steering tests. It
# has no agent-name attribute: create_agent's name is in the `metadata` JSON of every span
# (lc_agent_name), create_react_agent's nowhere but its graph span's name (the root, whose
# metadata is LangGraph's alone: the run is named after it). It gives create_react_agent's model
# node, "agent", the AGENT kind: a step of the graph all the same (its `metadata` names the
# node), so the run is one run.
OI_DRIVER = "langchain_openinference"
OI_ENV = "steering_langchain"
AGENT = "lc_researcher"
SCRIPTS = {
    "three_tools": cases.three_tools(),
    "limit": cases.limit(),
    "tool_error": cases.tool_error(),
    "tool_error_handled": cases.tool_error_handled(),
    "react_three_tools": cases.three_tools(),
    "subagent": cases.delegate("research", question="What is a?"),
}
EXPECTED: dict[str, list[Expect]] = {
    "three_tools": [Expect(agent=AGENT, iterations=4, tool_calls=3, errors=0,
                           terminal_state="completed", has_final_answer=True,
                           terminal_reason=None, parent_agent=None)],
    # recursion_limit=6 super-steps: model, tools, model, tools, model, tools, then
    # GraphRecursionError before the 4th model call (no answer; a limit is not an error)
    "limit": [Expect(agent=AGENT, iterations=3, tool_calls=3, errors=0,
                     terminal_state="tool_limit_reached", terminal_reason="GraphRecursionError",
                     has_final_answer=False, parent_agent=None)],
    # the tool's RuntimeError ends the invocation: one failed tool call, one error
    "tool_error": [Expect(agent=AGENT, iterations=1, tool_calls=1, errors=1,
                          terminal_state="error", terminal_reason="RuntimeError",
                          has_final_answer=False, parent_agent=None)],
    # the tool hands its failure to the model (a ToolMessage with status "error" on a span that
    # ends OK): one error among two tool calls, and the run goes on to its answer; the result
    # that merely says "Error: ..." is no error
    "tool_error_handled": [Expect(agent=AGENT, iterations=3, tool_calls=2, errors=1,
                                  terminal_state="completed", has_final_answer=True,
                                  terminal_reason=None, parent_agent=None)],
    "react_three_tools": [Expect(agent="lg_researcher", iterations=4, tool_calls=3, errors=0,
                                 terminal_state="completed", has_final_answer=True,
                                 terminal_reason=None, parent_agent=None)],
    # the manager's tool research invokes lc_researcher: a child run
    "subagent": [Expect(agent="lc_manager", iterations=2, tool_calls=1, errors=0,
                        terminal_state="completed", has_final_answer=True,
                        terminal_reason=None, parent_agent=None),
                 Expect(agent=AGENT, iterations=2, tool_calls=1, errors=0,
                        terminal_state="completed", has_final_answer=True,
                        terminal_reason=None, parent_agent="lc_manager")],
}
# Every scenario again with message content off (``<scenario>_nocontent``: OpenLLMetry's
# TRACELOOP_TRACE_CONTENT=false, OpenInference's OPENINFERENCE_HIDE_*): the same runs, but
# for the failure a tool handles itself, which only its hidden ToolMessage says (the known gap).
NOCONTENT = "_nocontent"
NOCONTENT_GAPS: dict[str, dict[str, Any]] = {"tool_error_handled": {"errors": UNCHECKED}}
SCENARIOS = [*EXPECTED, *(scenario + NOCONTENT for scenario in EXPECTED)]


def expected_for(scenario: str) -> list[Expect]:
    """:data:`EXPECTED` of ``scenario``, or of the scenario a ``_nocontent`` one repeats."""
    base = scenario.removesuffix(NOCONTENT)
    gaps = NOCONTENT_GAPS.get(base, {}) if base != scenario else {}
    return [replace(expect, **gaps) for expect in EXPECTED[base]]


def check_live(env: str, driver: str, sidecar: RunningServer, llm: FakeLLM,
               scenario: str) -> None:
    """``scenario`` driven live by ``driver`` (any tracer of LangChain) meets :data:`EXPECTED`
    (:func:`expected_for`)."""
    base = scenario.removesuffix(NOCONTENT)
    model = cases.register(llm, f"{driver}-{scenario}", SCRIPTS[base])
    result = run_driver(env, driver, scenario, sidecar, llm, model)
    check_runs(sidecar, expected_for(scenario))
    if base == "limit":
        assert "GraphRecursionError" in result.stdout
        assert len(llm.requests(model)) == 3  # the framework's own limit stopped the loop


def check_replay(driver: str, sidecar: RunningServer, scenario: str) -> None:
    """``scenario`` replayed from ``driver``'s recording meets :data:`EXPECTED`."""
    replay(sidecar, RECORDINGS / driver / f"{scenario}.jsonl")
    check_runs(sidecar, expected_for(scenario))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    check_live(ENV, DRIVER, sidecar, llm, scenario)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_replay(sidecar: RunningServer, scenario: str) -> None:
    check_replay(DRIVER, sidecar, scenario)



@pytest.mark.parametrize("scenario", SCENARIOS)
def test_openinference_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    model = cases.register(llm, f"{OI_DRIVER}-{scenario}",
                           SCRIPTS[scenario.removesuffix(NOCONTENT)])
    run_driver(OI_ENV, OI_DRIVER, scenario, sidecar, llm, model)
    check_runs(sidecar, expected_for(scenario))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_openinference_replay(sidecar: RunningServer, scenario: str) -> None:
    replay(sidecar, RECORDINGS / OI_DRIVER / f"{scenario}.jsonl")
    check_runs(sidecar, expected_for(scenario))


@pytest.mark.parametrize("driver", [DRIVER, OI_DRIVER])
def test_nocontent_handled_tool_error_is_on_no_span(driver: str) -> None:
    """Why, with content off, a failure the tool handled is not counted (the known gap): the
    ToolMessage's status is the only place it is said, and it is hidden with the content; both
    tool spans end OK (OpenLLMetry's ``gen_ai.task.status`` says success for both)."""
    spans = recorded_spans(RECORDINGS / driver / "tool_error_handled_nocontent.jsonl")
    tools = [span for span in spans if any(
        item["key"] in ("tool.name", "gen_ai.tool.name") for item in span["attributes"])]
    assert len(tools) == 2
    for span in tools:
        attributes = {item["key"]: item["value"].get("stringValue")
                      for item in span["attributes"]}
        assert span["status"].get("code", 0) != 2
        assert not span.get("events")
        assert attributes.get("output.value") in (None, "__REDACTED__")
        assert attributes.get("gen_ai.task.status") in (None, "success")
        assert not {"traceloop.entity.output", "gen_ai.tool.call.result"} & attributes.keys()
