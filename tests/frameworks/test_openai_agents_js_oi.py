"""The OpenAI Agents SDK for JavaScript (npm ``@openai/agents``, its default Responses API
model) traced by OpenInference (``@arizeai/openinference-instrumentation-openai-agents``, a
trace processor of the SDK's), exported by the OpenTelemetry Node SDK over OTLP/HTTP protobuf:
``ts/openai_agents_oi.ts`` under node, installed by ``make test`` with ``npm ci`` from
``ts/package-lock.json``.

The expectations are DESIGN §3's: one run per agent invocation, iterations = model calls, tool
calls, errors, terminal state and reason, the agent's name, a handoff or an agent used as a tool
a child run. Each case runs live (one node process) and from its committed recording.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.frameworks import fakellm, scenarios
from tests.frameworks.fakellm import FakeLLM, Script
from tests.frameworks.harness import (
    TS_DIR,
    Expect,
    check_recorded,
    check_runs,
    run_ts_driver,
    top_answers,
)
from tests.harness import RunningServer

DRIVER = "openai_agents_js_oi"
AGENT = "agents-js-researcher"
SCRIPTS: dict[str, dict[str, Script]] = {
    **{name: {"": scenarios.script(name)} for name in ("three_tools", "limit", "tool_error")},
    "handoff": {"": fakellm.steps(fakellm.call("transfer_to_agents_js_researcher"),
                                  fakellm.answer("handed off")),
                "-billing": scenarios.script("three_tools")},
    "agent_as_tool": {"": fakellm.steps(fakellm.call("research", input="a, b and c?"),
                                        fakellm.answer(scenarios.ANSWER)),
                      "-sub": scenarios.script("three_tools")},
}
EXPECTED: dict[str, tuple[list[Expect], str | None]] = {
    "three_tools": ([Expect(AGENT, 4, 3, 0, "completed", True, None, None)], scenarios.ANSWER),
    # the SDK hands a tool's exception to the model as its result: the model then answers
    "tool_error": ([Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
                   scenarios.ERROR_ANSWER),
    # the handoff is the triage agent's tool call; the researcher's answer is the run's
    "handoff": ([Expect("agents-js-triage", 1, 1, 0, "completed", True, None, None),
                 Expect(AGENT, 4, 3, 0, "completed", True, None, "agents-js-triage")],
                scenarios.ANSWER),
    # the manager's tool call research runs the researcher: a child run
    "agent_as_tool": ([Expect("agents-js-manager", 2, 1, 0, "completed", True, None, None),
                       Expect(AGENT, 4, 3, 0, "completed", True, None, "agents-js-manager")],
                      scenarios.ANSWER),
}


def drive(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> dict[str, Any]:
    """Run the agent once on the scenario's scripts; its last stdout line."""
    if not (TS_DIR / "node_modules" / "@arizeai" / "openinference-instrumentation-openai-agents"
            / "package.json").exists():
        raise AssertionError(f"{TS_DIR}/node_modules is missing: run `make "
                             f"tests/frameworks/ts/node_modules/.installed` (part of `make test`)")
    model = f"{DRIVER}-{scenario}"
    for suffix, script in SCRIPTS[scenario].items():
        llm.script(model + suffix, script)
    stdout = run_ts_driver("openai_agents_oi.ts", DRIVER, scenario, sidecar, llm, model)
    said: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return said


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    said = drive(sidecar, llm, scenario)
    runs, answer = EXPECTED[scenario]
    check_runs(sidecar, runs)
    assert top_answers(sidecar)[0] == answer
    assert said["output"] == answer


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    runs, answer = EXPECTED[scenario]
    check_recorded(sidecar, DRIVER, scenario, runs)
    assert top_answers(sidecar)[0] == answer
