"""A Koog agent (JetBrains' Kotlin agent framework, 0.8: ``AIAgent`` with its default single-run
strategy on ``OpenAILLMClient``, a ``ToolSet`` of ``@Tool`` methods) traced by Koog's own
OpenTelemetry feature (``install(OpenTelemetry) { setServiceInfo(...); addSpanExporter(...) }``,
as its docs set it up): ``koog/``, built by ``make koog-agent`` (part of ``make test``) from
Maven Central (:mod:`tests.frameworks.jvm`).

What it emits (details: the recordings), every span of the instrumentation scope named after
the service: ``create_agent <agent id>`` (the trace's root) > ``invoke_agent <agent id>`` (GenAI:
``gen_ai.agent.id``, a random UUID unless the agent is given an id, ``gen_ai.conversation.id``;
at ``maxIterations`` status ERROR with ``error.type`` Koog's
``AIAgentMaxNumberOfIterationsReachedException``) > ``strategy single_run_sequential`` > one
``node <node id>`` span per step of the agent's graph (``koog.node.input``/``output``), and
beside them each model call ``chat <model>`` (GenAI: model, usage, finish reasons, the messages
as ``gen_ai.input.messages``/``output.messages`` and as events) and each tool call
``execute_tool <tool>`` (``gen_ai.tool.name``, ``call.id``, ``call.arguments``,
``call.result``). No span names the agent (the run is named after the service). Without
``setVerbose(true)`` (the scenarios ending ``_default``) every message, argument and result is
the placeholder ``HIDDEN:non-empty``.

The expectations are DESIGN §3's: one run per invocation named after the agent, iterations =
model calls, tool calls, errors, terminal state and reason, the answer's text; each case runs
live and from its committed recording. Known gaps, pinned below: the ``invoke_agent`` span's
``gen_ai.output.messages`` is the system prompt, not the answer (read as no answer there: the
run's answer is its last model call's); a tool's exception fails its span as ``AIAgentError:
Unknown error``, its own message on no span.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.frameworks import fakellm, jvm, scenarios
from tests.frameworks.fakellm import FakeLLM, Script
from tests.frameworks.harness import (
    Expect,
    check_recorded,
    check_runs,
    driver_env,
)
from tests.harness import RunningServer

DRIVER = "koog"
AGENT = "koog_researcher"  # the service's name: no span names the agent
LIMIT = "AIAgentMaxNumberOfIterationsReachedException"
SCRIPTS: dict[str, Script] = {
    **{name: scenarios.script(name) for name in ("three_tools", "limit", "tool_error")},
    "three_tools_default": scenarios.script("three_tools"),
    "two_runs": fakellm.steps(fakellm.call("lookup", key="a"), fakellm.answer("A."),
                              fakellm.call("lookup", key="b"), fakellm.answer("B.")),
}
EXPECTED: dict[str, list[Expect]] = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # nothing of the content on the spans (Koog's default): read the same, but the answer's text
    "three_tools_default": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # maxIterations(10) counts the graph's steps: 5 model calls and 4 tools, then Koog throws
    "limit": [Expect(AGENT, 5, 4, 0, "tool_limit_reached", False, LIMIT, None)],
    # Koog hands the exception to the model (`Tool with name 'lookup' failed to execute ...`)
    # and fails the tool's span: one call, one error, then the answer
    "tool_error": [Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
    # one agent run twice: a trace, and a run, each
    "two_runs": [Expect(AGENT, 2, 1, 0, "completed", True, None, None),
                 Expect(AGENT, 2, 1, 0, "completed", True, None, None)],
}
ANSWERS: dict[str, str | None] = {
    "three_tools": scenarios.ANSWER, "limit": None, "tool_error": scenarios.ERROR_ANSWER,
    # hidden: an answer came (the finish reason says so), its text is on no span
    "three_tools_default": None,
}


def drive(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> str:
    """Run the agent once on the scenario's script; its stdout."""
    model = llm.script(f"{DRIVER}-{scenario}", SCRIPTS[scenario])
    env = driver_env(sidecar, llm, DRIVER, scenario, model)
    return jvm.run_koog([scenario], env).stdout


def details_read(sidecar: RunningServer, scenario: str) -> None:
    """The answer's text (never the system prompt the agent span carries as its output); the
    hidden arguments (`HIDDEN:non-empty` on every call) no repeated call; the tool's error as
    Koog writes it (gap: its message is on no span)."""
    runs: list[dict[str, Any]] = [sidecar.get_json(f"/v1/runs/{run['id']}")
                                  for run in sidecar.get_json("/v1/runs?limit=10")["runs"]]
    if scenario in ANSWERS:
        assert runs[0]["final_output"] == ANSWERS[scenario], runs[0]["final_output"]
    signals = runs[0]["signals"]
    if scenario == "three_tools_default":
        assert (signals["repeated_tool_call"], signals["cycle_repeats"]) == (0, 0), signals
    if scenario == "tool_error":
        assert signals["last_error"] == "ai.koog.agents.core.feature.model.AIAgentError: " \
                                        "Unknown error", signals
    if scenario == "limit":
        assert "couldn't finish in given number of steps (10)" in signals["last_error"], signals


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    said = drive(sidecar, llm, scenario)
    check_runs(sidecar, EXPECTED[scenario])
    details_read(sidecar, scenario)
    if scenario == "limit":  # Koog's own limit stopped the loop, and said so
        assert "AIAgentMaxNumberOfIterationsReachedException" in said
        assert len(llm.requests(f"{DRIVER}-{scenario}")) == 5


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, EXPECTED[scenario])
    details_read(sidecar, scenario)
