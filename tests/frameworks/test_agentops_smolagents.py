"""smolagents (``ToolCallingAgent`` on a ``LiteLLMModel``) traced by the AgentOps SDK
(``agentops.init``: its own tracer provider and instrumentation, exported to
``exporter_endpoint``; driver and venv ``agentops_smolagents``). The AgentOps SDK's decorators
and OpenAI instrumentation: :mod:`tests.frameworks.test_agentops`.

What it emits (details: the recordings): one trace per ``agent.run``, scope
``agentops.instrumentation.smolagents``: a root ``<agent name>.run`` (``agent.name``,
``agent.tools``, ``agentops.entity.output`` the agent's answer), below it directly, per step,
``litellm.generate (<model>)`` (``gen_ai.request.model``, the tools it offered as
``gen_ai.request.tools.<i>.name``, ``gen_ai.usage.prompt_tokens``/``completion_tokens``,
``gen_ai.completion.0.content`` — ``None`` when the model asked for tools) and ``tool.execute``
with no kind attribute: ``tool.status`` (``success``/``error``), ``tool.result``,
``tool.name`` always ``unknown`` and ``tool.parameters`` always ``{}`` (AgentOps' wrapper reads a
``ToolCall`` argument smolagents' ``execute_tool_call(tool_name, arguments)`` no longer
passes). A tool's exception fails its span (status and ``exception`` event, smolagents'
``AgentToolExecutionError`` around it) and smolagents hands it to the model.

Before its names were in the AgentOps entry of ``watchdog/core/spans/frameworks.py`` (data:
``agent.role`` the agent kind, ``tool.status`` the tool kind, ``tool.*`` the call, ``{}`` no
arguments, on its scope's spans alone; ``agentops.entity.output``, the answer, the entry had)
the sidecar read the model calls and no tool call, no answer: every run ``no_response``, the
tool error unseen. Known gaps, pinned: no span names a tool or its
arguments (every call is ``unknown``, smolagents' ``final_answer`` call one of them, and no call
a repeat of another); ``max_steps`` is on no span (smolagents' last request, without tools,
asks for an answer: the run reads ``completed`` with that answer). The model endpoint sees all
of it (test_model_endpoint_frameworks).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import cases
from tests.frameworks.fakellm import Script
from tests.frameworks.harness import (
    Expect,
    check_tool_budget,
    scenario_tests,
    tool_budget_sidecar,
)
from tests.harness import RunningServer

ENV = DRIVER = "agentops_smolagents"
AGENT = "smol_researcher"
UNNAMED = "unknown"  # AgentOps' name for every tool of smolagents'
SCRIPTS: dict[str, Script] = {
    "three_tools": cases.three_tools("final_answer"),
    "limit": cases.limit(),
    "tool_error": cases.tool_error("final_answer"),
}
CASES: dict[str, Expect] = {
    # three lookups and final_answer: four tool calls (no span names final_answer: a known gap)
    "three_tools": Expect(AGENT, 4, 4, 0, "completed", True, None, None),
    # max_steps 3: three lookups, then a request without tools whose answer smolagents returns;
    # the cap is on no span (a known gap): answered, not tool_limit_reached
    "limit": Expect(AGENT, 4, 3, 0, "completed", True, None, None),
    "tool_error": Expect(AGENT, 2, 2, 1, "completed", True, None, None),
}
ANSWERS = {"three_tools": cases.ANSWER, "limit": cases.SUMMARY, "tool_error": cases.ERROR_ANSWER}


def _read(sidecar: RunningServer, scenario: str) -> None:
    (listed,) = sidecar.get_json("/v1/runs?limit=10")["runs"]
    run: dict[str, Any] = sidecar.get_json(f"/v1/runs/{listed['id']}")
    assert run["final_output"] == ANSWERS[scenario], run
    signals = run["signals"]
    assert signals["tools"] == {UNNAMED: CASES[scenario].tool_calls}, signals
    # no arguments on any span: the limit's k0, k1, k2 are no repeats (nor would equal ones be)
    assert signals["repeated_tool_call"] == 0, signals
    if scenario == "tool_error":  # smolagents' error around the tool's, from the failed span
        assert signals["last_error"].startswith(
            "smolagents.utils.AgentToolExecutionError: Error executing tool 'lookup' with "
            "arguments {'key': 'broken'}: RuntimeError: backend unavailable for broken"), signals


test_live, test_recorded = scenario_tests(
    ENV, DRIVER, {name: {"": script} for name, script in SCRIPTS.items()}, CASES, _read)


@pytest.fixture
def budgeted(tmp_path: Path) -> Iterator[RunningServer]:
    # every agent's: the agent's name is on its root span alone, which ends (and is exported)
    # last, so a budget for `smol_researcher` applies only once the run is over (a known gap)
    with tool_budget_sidecar(tmp_path, "'*'", 3) as server:
        yield server


def test_a_tool_budget_of_3_ends_the_run_tool_limit_reached(budgeted: RunningServer) -> None:
    """A rule pack's budget of 3 tool calls on the three_tools run, its spans sent one by one:
    the ``tool.execute`` spans (typed by their ``tool.status``) count it down, the third uses
    it up and the budget's abort is decided while the run goes on: ``tool_limit_reached``."""
    check_tool_budget(budgeted, DRIVER, "three_tools",
                      Expect(AGENT, 4, 4, 0, "tool_limit_reached", True, "budget-exhausted",
                             None), 3)
