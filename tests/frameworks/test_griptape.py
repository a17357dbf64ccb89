"""Griptape (``griptape.structures.Agent``: a ``PromptTask`` with the tool ``LookupTool`` on
``OpenAiChatPromptDriver``) traced by Griptape's own ``OpenTelemetryObservabilityDriver``, as
its docs set it up (driver ``griptape_native``, venv ``.venvs/griptape``).

What it emits (details: the recordings): a span per ``@observable`` method, named
``<class>.<method>()``, under a root ``main`` (the ``Observability`` block): ``Agent.run()`` >
``Agent.try_run()`` > per step ``OpenAiChatPromptDriver.run()`` (> ``.try_run()``) and
``LookupTool.try_run()``. No GenAI attribute at all: the only attribute is the decorator's
``tags``, a string array — ``["PromptDriver.run()"]`` on the prompt driver's calls,
``["Tool.run()"]`` on the tools' runs. A tool's exception fails its span (status and
``exception`` event) and Griptape hands the error to the model. The task's ``max_subtasks``
ends the loop with an ``ErrorArtifact`` as its output: nothing fails.

Before the Griptape entry of ``watchdog/core/spans/frameworks.py`` (a kind map on ``tags``,
read on a string-array attribute by ``identity.role_of`` and the compiled normaliser alike) the
sidecar read no run at all from it. Known gaps, pinned: no span carries the answer, the tool's
name as the model knows it (the span is named after the tool's class and method,
``LookupTool.try_run()``: the tool reads ``LookupTool``, not the model's ``LookupTool_lookup``)
or its arguments, nor the ``max_subtasks`` stop: every run reads
``no_response`` (unanswered); the model endpoint sees all of it
(test_model_endpoint_frameworks). A rule pack's tool budget still counts its tool calls.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import fakellm, scenarios
from tests.frameworks.fakellm import FakeLLM, Script
from tests.frameworks.harness import (
    Expect,
    check_recorded,
    check_tool_budget,
    drive_and_check,
    tool_budget_sidecar,
)
from tests.harness import RunningServer

ENV, DRIVER = "griptape", "griptape_native"
AGENT = "griptape-agent"  # the service's name: no span names an agent
TOOL = "LookupTool_lookup"  # the tool as Griptape names it to the model: <class>_<activity>
SPAN_TOOL = "LookupTool"  # ... and as its span does: `LookupTool.try_run()`, the tool's class
SCRIPTS: dict[str, Script] = {
    **{name: scenarios.script(name, TOOL) for name in ("three_tools", "limit", "tool_error")},
    # each invocation one tool call, then its answer
    "two_runs": fakellm.steps(fakellm.call(TOOL, key="a"), fakellm.answer(scenarios.ANSWER),
                              fakellm.call(TOOL, key="b"), fakellm.answer(scenarios.ANSWER)),
}
CASES: dict[str, list[Expect]] = {
    # known gap, pinned: no span carries the answer (every run reads unanswered)
    "three_tools": [Expect(AGENT, 4, 3, 0, "no_response", False, None, None)],
    # max_subtasks 6: six model calls, five tools run (the sixth step's is not); the stop is
    # an ErrorArtifact output, on no span
    "limit": [Expect(AGENT, 6, 5, 0, "no_response", False, None, None)],
    "tool_error": [Expect(AGENT, 2, 1, 1, "no_response", False, None, None)],
    # known gap, pinned: two Agent.run calls in one Observability block are one trace, under
    # its `main` span, and no span says where an invocation begins (`Agent.run()` carries no
    # attribute): one run of both, not two
    "two_runs": [Expect(AGENT, 4, 2, 0, "no_response", False, None, None)],
}


def _read(sidecar: RunningServer, scenario: str) -> None:
    (listed,) = sidecar.get_json("/v1/runs?limit=10")["runs"]
    run: dict[str, Any] = sidecar.get_json(f"/v1/runs/{listed['id']}")
    assert run["final_output"] is None, run
    assert run["signals"]["tools"] == {SPAN_TOOL: CASES[scenario][0].tool_calls}, run["signals"]
    if scenario == "tool_error":  # the exception's type and message, from the failed span
        assert run["signals"]["last_error"] == "RuntimeError: backend unavailable for broken", \
            run["signals"]


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, ENV, DRIVER, scenario, {"": SCRIPTS[scenario]},
                    CASES[scenario])
    _read(sidecar, scenario)
    assert len(llm.requests(f"{DRIVER}-{scenario}")) == CASES[scenario][0].iterations


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, CASES[scenario])
    _read(sidecar, scenario)


@pytest.fixture
def budgeted(tmp_path: Path) -> Iterator[RunningServer]:
    with tool_budget_sidecar(tmp_path, AGENT, 3) as server:
        yield server


def test_a_tool_budget_of_3_ends_the_run_tool_limit_reached(budgeted: RunningServer) -> None:
    """A rule pack's budget of 3 tool calls on the limit run, its spans sent one by one: the
    tool spans tagged ``Tool.run()`` count it down and the fourth uses it up; the run ends
    ``tool_limit_reached`` (budget-exhausted) though no span of Griptape's tells a limit."""
    check_tool_budget(budgeted, DRIVER, "limit",
                      Expect(AGENT, 6, 5, 0, "tool_limit_reached", False,
                             "budget-exhausted", None), 3)
