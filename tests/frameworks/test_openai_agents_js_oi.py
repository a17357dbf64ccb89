"""The OpenAI Agents SDK for JavaScript (npm ``@openai/agents``, its default Responses API
model) traced by OpenInference (``@arizeai/openinference-instrumentation-openai-agents``, a
trace processor of the SDK's), exported by the OpenTelemetry Node SDK over OTLP/HTTP protobuf:
``ts/openai_agents_oi.ts`` under node, installed by ``make test`` with ``npm ci`` from
``ts/package-lock.json``.

What it emits (details: the recordings): a root ``Agent workflow`` (AGENT, the trace's name; its
``input.value``/``output.value`` the run's first input and last output) that the instrumentation
ends at the SDK's trace end, a second ``Agent workflow`` CHAIN below it, then per agent an AGENT
span named after it (``graph.node.id``), a ``turn`` CHAIN per turn, ``response`` LLM spans (the
Responses API: ``llm.model_name``, ``llm.token_count.*``, ``llm.output_messages`` with the tool
calls; ``llm.finish_reason`` is ``stop`` even when the response asks for a tool), a TOOL span
per tool run named after it (``tool.name``, ``input.value``, ``output.value``; a tool that
throws ends ERROR, ``Error running tool (non-fatal): …``, and the SDK hands a redacted error to
the model as the result), ``handoff to <agent>`` TOOL spans, and an agent used as a tool
(``asTool``) as a TOOL span with its own workflow nested below it. At the turn limit the agent
span and the inner workflow end ERROR (``Error in agent run: {"error":"MaxTurnsExceededError:
Max turns (3) exceeded"}``) but the root is never ended, so never exported (the SDK calls no
trace end when the run raises; the instrumentation's own fallback misses it): the run's root
never comes. It ends ``loose_run_gap`` after its last span, as its failed agent span says
(before: active until ``run_end_timeout`` abandoned it).

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
    **{name: {"": scenarios.script(name)}
       for name in ("three_tools", "three_tools_stream", "limit", "tool_error")},
    # the tool fails five times in a row, then the model answers
    "error_loop": {"": fakellm.steps(*(fakellm.call("lookup", key="broken") for _ in range(5)),
                                     fakellm.answer(scenarios.ERROR_ANSWER))},
    "handoff": {"": fakellm.steps(fakellm.call("transfer_to_agents_js_researcher"),
                                  fakellm.answer("handed off")),
                "-billing": scenarios.script("three_tools")},
    "agent_as_tool": {"": fakellm.steps(fakellm.call("research", input="a, b and c?"),
                                        fakellm.answer(scenarios.ANSWER)),
                      "-sub": scenarios.script("three_tools")},
}
EXPECTED: dict[str, tuple[list[Expect], str | None]] = {
    "three_tools": ([Expect(AGENT, 4, 3, 0, "completed", True, None, None)], scenarios.ANSWER),
    "three_tools_stream": ([Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
                           scenarios.ANSWER),
    # maxTurns 3: three model calls (each ran its tool), then MaxTurnsExceededError
    "limit": ([Expect(AGENT, 3, 3, 0, "tool_limit_reached", False, "max_turns", None)],
              None),
    # the SDK hands a tool's exception to the model as its result: the model then answers
    "tool_error": ([Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
                   scenarios.ERROR_ANSWER),
    # the same failing call five times: the default pack's loop_detected, by tool-cycle (it
    # holds at the 4th round, before error-loop at the 5th error, however the spans are
    # batched); its signals say the loop (error_loop_read)
    "error_loop": ([Expect(AGENT, 6, 5, 5, "loop_detected", True, "tool-cycle", None)],
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


def error_loop_read(sidecar: RunningServer) -> None:
    """The error loop's signals: five errors in a row, the same one (the SDK's status: the
    tool's own message is redacted), the same call five times."""
    run = sidecar.get_json(f"/v1/runs/{sidecar.get_json('/v1/runs')['runs'][0]['id']}")
    signals = run["signals"]
    assert (signals["consecutive_errors"], signals["repeated_error"],
            signals["repeated_tool_call"]) == (5, 5, 5), signals
    assert signals["last_error"] == (
        'error: Error running tool (non-fatal): {"tool_name":"lookup","error":"Tool execution '
        'failed. Error details are redacted."}')


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    said = drive(sidecar, llm, scenario)
    runs, answer = EXPECTED[scenario]
    check_runs(sidecar, runs)
    assert top_answers(sidecar)[0] == answer
    if scenario == "limit":  # the SDK's own turn limit stopped the loop
        assert said["error"] == "MaxTurnsExceededError"
        assert len(llm.requests(f"{DRIVER}-limit")) == 3
    else:
        assert said["output"] == answer
    if scenario == "error_loop":
        assert said["ran"] == ["broken"] * 5
        error_loop_read(sidecar)


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    runs, answer = EXPECTED[scenario]
    check_recorded(sidecar, DRIVER, scenario, runs)
    assert top_answers(sidecar)[0] == answer
    if scenario == "error_loop":
        error_loop_read(sidecar)
