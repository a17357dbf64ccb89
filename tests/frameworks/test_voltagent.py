"""VoltAgent (npm ``@voltagent/core``'s ``Agent`` on ``@ai-sdk/openai-compatible``) with
VoltAgent's own OpenTelemetry traces: its ``VoltAgentObservability`` given a span processor that
exports over OTLP/HTTP protobuf (``ts/voltagent/voltagent.ts`` under node, installed by ``make
test`` with ``npm ci --omit=optional`` from ``ts/voltagent/package-lock.json``, apart from
``ts/``: VoltAgent brings its own OpenTelemetry JS and AI SDK versions).

What it emits (details: the recordings), all on the scope ``@voltagent/core``, in VoltAgent's
own names: the agent's span (the trace root, named after the agent: ``entity.type`` ``agent``,
``entity.name``, ``input``, ``output``, ``ai.response.finish_reason``, the usage of the whole
loop), below it **one** ``llm:generateText`` (``llm:streamText``) span for the whole tool loop
(``span.type`` ``llm``, ``llm.model``, the last step's ``llm.finish_reason`` and usage) and one
``tool.execution:<tool>`` per tool run (``span.type`` ``tool``, ``tool.name``, ``tool.call.id``,
``input``, ``output``). A tool that throws fails its span (the exception event, ``error.type``
``VoltAgentError``) and VoltAgent hands the error to the model. ``maxSteps`` ends the loop after
the step that reached it, its tools run: nothing fails, the agent's span says finish reason
``tool-calls``, ``voltagent.stopped_by_max_steps`` and ``voltagent.step_count``. A sub-agent
(``subAgents``) is reached through VoltAgent's own ``delegate_task`` tool: its span
``subagent:<name>`` below that tool call (``subagent.type`` ``agent``, ``subagent.name``), and
its spans name the parent in ``entity.name``, themselves in ``subagent.name``.

Before the VoltAgent entries of ``watchdog/core/spans/frameworks.py`` the sidecar read no run at
all from it; now a sub-agent is a child run of its caller, named after it. Known gap, pinned:
the loop's model calls are one span, so a run that was not stopped by ``maxSteps`` reads one
model call (iterations 1), whatever its steps; at ``maxSteps`` the agent's span counts them
(``voltagent.step_count``). The model endpoint sees each request
(test_model_endpoint_frameworks). Each case runs live (one node process) and from its committed
recording.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import cases, scenarios
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    TS_DIR,
    Expect,
    check_recorded,
    check_runs,
    check_tool_budget,
    run_ts_driver,
    tool_budget_sidecar,
    top_answers,
)
from tests.harness import RunningServer

DRIVER = "voltagent"
AGENT = "volt-researcher"
EXPECTED: dict[str, tuple[list[Expect], str | None]] = {
    # known gap, pinned: one model-call span for the loop's four requests
    "three_tools": ([Expect(AGENT, 1, 3, 0, "completed", True, None, None)], scenarios.ANSWER),
    "three_tools_stream": ([Expect(AGENT, 1, 3, 0, "completed", True, None, None)],
                           scenarios.ANSWER),
    # maxSteps 5: five steps, each asking for a tool that ran; no sixth model call (the
    # agent's span counts the five)
    "limit": ([Expect(AGENT, 5, 5, 0, "tool_limit_reached", False, "max_steps", None)], None),
    # VoltAgent hands the tool's error to the model, which answers
    "tool_error": ([Expect(AGENT, 1, 1, 1, "completed", True, None, None)],
                   scenarios.ERROR_ANSWER),
    "subagent": ([Expect(AGENT, 1, 1, 0, "completed", True, None, None),
                  Expect("volt-sub", 1, 1, 0, "completed", True, None, AGENT)],
                 scenarios.ANSWER),
}
KEYS = {"three_tools": ["a", "b", "c"], "three_tools_stream": ["a", "b", "c"],
        "limit": [f"k{index}" for index in range(5)], "tool_error": ["broken"],
        "subagent": ["a"]}


def drive(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> dict[str, Any]:
    """Run the agent once on the scenario's script; its last stdout line."""
    if not (TS_DIR / "voltagent" / "node_modules" / "@voltagent" / "core"
            / "package.json").exists():
        raise AssertionError(f"{TS_DIR}/voltagent/node_modules is missing: run `make "
                             f"tests/frameworks/ts/voltagent/node_modules/.installed` (part of "
                             f"`make test`)")
    model = (cases.register(llm, f"{DRIVER}-{scenario}", cases.delegate(
        "delegate_task", task="Research a.", targetAgents=["volt-sub"]))
        if scenario == "subagent" else scenarios.scripted(llm, DRIVER, scenario))
    stdout = run_ts_driver("voltagent/voltagent.ts", DRIVER, scenario, sidecar, llm, model)
    said: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return said


def read(sidecar: RunningServer, scenario: str) -> None:
    """The answer, each run's tools and their arguments (each call its own: no repeats), the
    error."""
    assert top_answers(sidecar)[0] == EXPECTED[scenario][1]
    runs = {run["agent"]: sidecar.get_json(f"/v1/runs/{run['id']}")
            for run in sidecar.get_json("/v1/runs")["runs"]}
    tools = ({AGENT: {"delegate_task": 1}, "volt-sub": {"lookup": 1}} if scenario == "subagent"
             else {AGENT: {"lookup": len(KEYS[scenario])}})
    assert {agent: run["signals"]["tools"] for agent, run in runs.items()} == tools, runs
    signals = runs[AGENT]["signals"]
    assert signals["repeated_tool_call"] == 1, signals  # different arguments
    if scenario == "tool_error":
        assert signals["last_error"] == "VoltAgentError: backend unavailable for broken", signals
    if scenario == "subagent":  # the sub-agent's own answer
        assert runs["volt-sub"]["final_output"] == cases.SUB_ANSWER, runs["volt-sub"]


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    said = drive(sidecar, llm, scenario)
    runs, answer = EXPECTED[scenario]
    check_runs(sidecar, runs)
    read(sidecar, scenario)
    assert said["error"] is None
    assert said["ran"] == KEYS[scenario]
    assert said["output"] == (answer or "")
    # what the one model-call span stands for: the requests the model really got
    assert len(llm.requests(f"{DRIVER}-{scenario}")) == len(KEYS[scenario]) + (
        0 if scenario == "limit" else 1)


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    runs, _ = EXPECTED[scenario]
    check_recorded(sidecar, DRIVER, scenario, runs)
    read(sidecar, scenario)


@pytest.fixture
def budgeted(tmp_path: Path) -> Iterator[RunningServer]:
    with tool_budget_sidecar(tmp_path, AGENT, 3) as server:
        yield server


def test_a_tool_budget_of_3_ends_the_run_tool_limit_reached(budgeted: RunningServer) -> None:
    """A rule pack's budget of 3 tool calls on the ``maxSteps`` run, its export requests sent
    one by one: the tool spans count it down and the third uses it up (abort); the run ends
    ``tool_limit_reached`` by the budget (before ``maxSteps`` would say so)."""
    check_tool_budget(budgeted, DRIVER, "limit",
                      Expect(AGENT, 5, 5, 0, "tool_limit_reached", False,
                             "budget-exhausted", None), 3)
