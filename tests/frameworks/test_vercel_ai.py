"""The Vercel AI SDK (npm ``ai`` 6, ``@ai-sdk/openai-compatible``) with its own OpenTelemetry
spans (``experimental_telemetry: {isEnabled: true, functionId}``), exported by the OpenTelemetry
Node SDK over OTLP/HTTP protobuf: ``ts/vercel_ai.ts`` under node, installed by ``make test``
with ``npm ci`` from ``ts/package-lock.json``.

What the SDK emits (details: the recordings): ``ai.generateText`` / ``ai.streamText`` around the
whole call (every step of its tool loop), its ``ai.telemetry.functionId`` the function's name
(also in ``resource.name``), the last step's ``ai.response.finishReason`` and the call's
``ai.response.text``; ``ai.generateText.doGenerate`` / ``ai.streamText.doStream`` per model call
(``gen_ai.request.model``, ``gen_ai.usage.*``, ``gen_ai.response.finish_reasons``,
``ai.response.text``, ``ai.response.toolCalls``, ``ai.prompt.messages``); ``ai.toolCall`` per
tool execution (``ai.toolCall.name``/``id``/``args``/``result``), ERROR with an ``exception``
event when the tool throws (the SDK hands the error to the model as the result and goes on).
No span has a GenAI operation name: the span names say what each is.

The expectations are DESIGN §3's: one run per call, iterations = model calls, tool calls,
errors, terminal state, ``has_final_answer``, the agent (the ``functionId``), the answer's text.
Each case runs live (one node process) and from its committed recording.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.frameworks import cases, scenarios
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    RECORDINGS,
    TS_DIR,
    Expect,
    check_recorded,
    check_runs,
    replay,
    run_ts_driver,
)
from tests.harness import RunningServer, running_server, sidecar_config

BUDGET = 4
PACK = f"""\
apiVersion: agent-watchdog/v1
kind: RulePack
name: tools
budgets:
  - agents: [vercel_researcher]
    max_tool_calls: {BUDGET}
"""
DRIVER = "vercel_ai"
AGENT = "vercel_researcher"
SUB_AGENT = "vercel_sub"
EXPECTED: dict[str, tuple[Expect, str | None]] = {
    "three_tools": (Expect(AGENT, 4, 3, 0, "completed", True, None, None), scenarios.ANSWER),
    "three_tools_stream": (Expect(AGENT, 4, 3, 0, "completed", True, None, None),
                           scenarios.ANSWER),
    # stopWhen: stepCountIs(5): five model calls, each asking for a tool, each tool run; the
    # call ends after the fifth step's tool without asking the model again
    "limit": (Expect(AGENT, 5, 5, 0, "tool_limit_reached", False, "stop_when", None), None),
    # the same in a span of the application's, which then asks for a summary in a call of
    # its own (no tools, its own prompt): still stopped at the limit, the summary its answer
    "limit_summary": (Expect(AGENT, 6, 5, 0, "tool_limit_reached", True, "stop_when", None),
                      scenarios.SUMMARY),
    # the tool throws: its span ends ERROR, the SDK hands the error to the model, which answers
    "tool_error": (Expect(AGENT, 2, 1, 1, "completed", True, None, None),
                   scenarios.ERROR_ANSWER),
    # recordInputs/recordOutputs false: no text, arguments or results; the finish reasons,
    # usage and tool names are still recorded, so the runs read the same, without the answer's
    # text
    "three_tools_nocontent": (Expect(AGENT, 4, 3, 0, "completed", True, None, None), None),
    "limit_nocontent": (Expect(AGENT, 5, 5, 0, "tool_limit_reached", False, "stop_when", None),
                        None),
}
# the agent's tool `research` runs another generateText: a child run of the caller's (the
# call's own tool call counted by the caller, the sub-agent's model and tool calls by itself)
SUBAGENT = [Expect(AGENT, 2, 1, 0, "completed", True, None, None),
            Expect(SUB_AGENT, 2, 1, 0, "completed", True, None, AGENT)]


def node_modules_installed() -> None:
    if not (TS_DIR / "node_modules" / "ai" / "package.json").exists():
        raise AssertionError(f"{TS_DIR}/node_modules is missing: run `make "
                             f"tests/frameworks/ts/node_modules/.installed` (part of `make test`)")


def drive(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> dict[str, Any]:
    """Run the agent once on the scenario's script; its last stdout line."""
    node_modules_installed()
    model = f"{DRIVER}-{scenario}"
    if scenario == "subagent":
        cases.register(llm, model, cases.delegate("research", topic="a"))
    else:
        scenarios.scripted(llm, DRIVER, scenario)
    stdout = run_ts_driver("vercel_ai.ts", DRIVER, scenario, sidecar, llm, model)
    said: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return said


def answer_read(sidecar: RunningServer, scenario: str) -> None:
    runs = [sidecar.get_json(f"/v1/runs/{run['id']}")
            for run in sidecar.get_json("/v1/runs?limit=10")["runs"]]
    assert runs[0]["final_output"] == EXPECTED[scenario][1], runs[0]["final_output"]
    if scenario in ("three_tools", "three_tools_stream"):
        # the model calls' usage, not the call's sum of it again
        signals = runs[0]["signals"]
        assert (signals["input_tokens"], signals["output_tokens"]) == (544, 33), signals


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    said = drive(sidecar, llm, scenario)
    check_runs(sidecar, [EXPECTED[scenario][0]])
    answer_read(sidecar, scenario)
    limited = scenario.startswith("limit")
    ran = [f"k{index}" for index in range(5)] if limited else \
        ["broken"] if scenario == "tool_error" else ["a", "b", "c"]
    assert said["ran"] == ran
    if limited:  # the SDK's own step limit stopped the loop
        assert len(llm.requests(f"{DRIVER}-{scenario}")) == (
            6 if scenario == "limit_summary" else 5)


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, [EXPECTED[scenario][0]])
    answer_read(sidecar, scenario)


def test_subagent_live(sidecar: RunningServer, llm: FakeLLM) -> None:
    said = drive(sidecar, llm, "subagent")
    check_runs(sidecar, SUBAGENT)
    assert said == {"ran": ["a"], "output": scenarios.ANSWER}


def test_subagent_recorded(sidecar: RunningServer) -> None:
    check_recorded(sidecar, DRIVER, "subagent", SUBAGENT)


@pytest.fixture
def budgeted(tmp_path: Path) -> Iterator[RunningServer]:
    pack = tmp_path / "tools.yaml"
    pack.write_text(PACK)
    config = sidecar_config(tmp_path / "state", rules=(str(pack),), eval_interval=0.2)
    with running_server(config) as server:
        yield server


def test_a_tool_call_budget_counts_the_sdks_tool_calls(budgeted: RunningServer) -> None:
    """The default pack's budget rules on a budget of 4 tool calls: the step-limited call's
    ai.toolCall spans, each handled before the next arrives, count it down (3, 2 left: a
    countdown; 1: the last call) and the fourth uses it up (abort); the run ends on it."""
    replay(budgeted, RECORDINGS / DRIVER / "limit.jsonl", after_each=budgeted.flush)
    runs = check_runs(budgeted, [Expect(AGENT, 5, 5, 0, "tool_limit_reached", False,
                                        "budget-exhausted", None)])
    run = runs[0]
    assert run["budget"]["max_tool_calls"] == BUDGET
    assert run["budget"]["remaining_tool_calls"] == 0
    said = [(directive["action"], directive["rule"]) for directive in run["directives"]]
    assert said == [("wind_down", "budget-countdown"), ("wind_down", "budget-countdown"),
                    ("wind_down", "budget-last-call"), ("abort", "budget-exhausted")], said


def without(*keys: str) -> Callable[[list[dict[str, Any]]], None]:
    """A recording's edit (:func:`replay`): these attributes taken out of every span."""
    def edit(spans: list[dict[str, Any]]) -> None:
        for span in spans:
            span["attributes"] = [attribute for attribute in span["attributes"]
                                  if attribute["key"] not in keys]
    return edit


def test_without_a_function_id_the_agent_is_the_service(sidecar: RunningServer) -> None:
    """A call given no ``functionId`` names no agent on any span: its run is the service's."""
    replay(sidecar, RECORDINGS / DRIVER / "three_tools.jsonl",
           edit=without("ai.telemetry.functionId", "resource.name"))
    check_runs(sidecar, [Expect("vercel-ai-service", 4, 3, 0, "completed", True, None, None)])


def test_an_emitter_no_entry_knows_reads_as_loose_model_calls(sidecar: RunningServer) -> None:
    """The recording with what says what each span is taken out (``ai.operationId``,
    ``operation.name``), as from a toolkit no conventions entry knows: its model calls, each a
    model name and token usage (``gen_ai.request.model``, ``gen_ai.usage.*``), read as a run of
    loose calls — four calls, the last one's answer — rather than as nothing."""
    replay(sidecar, RECORDINGS / DRIVER / "three_tools.jsonl",
           edit=without("ai.operationId", "operation.name"))
    (run,) = check_runs(sidecar, [Expect("vercel_researcher", 4, 0, 0, "completed", True)])
    assert sidecar.get_json(f"/v1/runs/{run['id']}")["final_output"] == scenarios.ANSWER
