"""Mastra (npm ``@mastra/core``, its model router on an OpenAI-compatible URL) with Mastra's own
traces exported by ``@mastra/otel-exporter`` over OTLP/HTTP protobuf: ``ts/mastra/mastra.ts``
under node, installed by ``make test`` with ``npm ci --omit=optional`` from
``ts/mastra/package-lock.json`` (apart from ``ts/``: Mastra brings its own OpenTelemetry JS and
AI SDK versions).

What it emits (details: the recordings): GenAI operation names. ``invoke_agent <agent>``
(``gen_ai.agent.name``) > ``model_generation <model>`` (the whole tool loop) > one
``agent_step <agent>`` per step (``mastra.model_step.output``: the step's text and tool calls;
``mastra.model_step.is_continued``: whether the loop goes on after it) > ``chat <model>`` (the
model call: ``gen_ai.response.finish_reasons``, usage, ``gen_ai.output.messages``) and
``execute_tool <tool>`` (``gen_ai.tool.call.arguments``/``.result``/``.id``), with
``model_chunk`` spans (no kind) for streamed parts. A tool that throws fails its span
(``error.type`` ``unknown``, the exception event) and Mastra hands the error to the model.
``maxSteps`` ends the loop after the step that reached it, its tools run, without asking the
model again: nothing fails, the last step says ``is_continued`` false after asking for tools.
Mastra's default SensitiveDataFilter writes ``[REDACTED]`` for the value of every key it takes
for a secret, in tool arguments too: the tool's ``key`` argument is always ``[REDACTED]``. The
exporter sends in batches 5 s apart (its own setting: ``OTEL_BSP_SCHEDULE_DELAY`` does not
change it), so a run shorter than that arrives in one request when it has ended.

Before the Mastra entry of ``watchdog/core/spans/frameworks.py`` and the rule for hidden
argument values (``watchdog/core/spans/tool_calls.py``): the ``maxSteps`` stop read
``no_response``, not ``tool_limit_reached``; and every call of ``lookup`` had the same
arguments, ``{"key": "[REDACTED]"}``: three different calls counted as one call repeated three
times (a limit run's looping calls as a repeat loop). The expectations are DESIGN §3's: one run
per invocation, iterations = model calls, tool calls, errors, terminal state and reason, the
answer's text, an error loop's signals. Each case runs live (one node process) and from its
committed recording.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.frameworks import cases, fakellm, scenarios
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    TS_DIR,
    Expect,
    check_recorded,
    check_runs,
    run_ts_driver,
    top_answers,
)
from tests.harness import RunningServer

DRIVER = "mastra"
AGENT = "mastra-researcher"
EXPECTED: dict[str, tuple[list[Expect], str | None]] = {
    "three_tools": ([Expect(AGENT, 4, 3, 0, "completed", True, None, None)], scenarios.ANSWER),
    "three_tools_stream": ([Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
                           scenarios.ANSWER),
    # maxSteps 3: three steps, each asking for a tool that ran; no fourth model call
    "limit": ([Expect(AGENT, 3, 3, 0, "tool_limit_reached", False, "max_steps", None)], None),
    # Mastra hands the tool's error to the model, which answers
    "tool_error": ([Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
                   scenarios.ERROR_ANSWER),
    # the same failing call five times, then the answer: the run arrives whole when it has
    # ended (one export), read at its end by the default pack's error-loop (loop_detected); its
    # signals say the loop (error_loop_read)
    "error_loop": ([Expect(AGENT, 6, 5, 5, "loop_detected", True, "error-loop", None)],
                   scenarios.ERROR_ANSWER),
    "subagent": ([Expect(AGENT, 2, 1, 0, "completed", True, None, None),
                  Expect("mastra-sub", 2, 1, 0, "completed", True, None, AGENT)],
                 scenarios.ANSWER),
}


def drive(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> dict[str, Any]:
    """Run the agent once on the scenario's scripts; its last stdout line."""
    if not (TS_DIR / "mastra" / "node_modules" / "@mastra" / "core" / "package.json").exists():
        raise AssertionError(f"{TS_DIR}/mastra/node_modules is missing: run `make "
                             f"tests/frameworks/ts/mastra/node_modules/.installed` (part of "
                             f"`make test`)")
    model = f"{DRIVER}-{scenario}"
    if scenario == "subagent":
        cases.register(llm, model, cases.delegate("research", topic="a"))
    elif scenario == "error_loop":
        llm.script(model, fakellm.steps(*(fakellm.call("lookup", key="broken")
                                          for _ in range(5)),
                                        fakellm.answer(scenarios.ERROR_ANSWER)))
    else:
        scenarios.scripted(llm, DRIVER, scenario)
    stdout = run_ts_driver("mastra/mastra.ts", DRIVER, scenario, sidecar, llm, model)
    said: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return said


def error_loop_read(sidecar: RunningServer) -> None:
    """The error loop's signals: five errors in a row, the same one; the calls' arguments are
    redacted (``{"key": "[REDACTED]"}``), so they are no repeats of each other."""
    run = sidecar.get_json(f"/v1/runs/{sidecar.get_json('/v1/runs')['runs'][0]['id']}")
    signals = run["signals"]
    assert (signals["consecutive_errors"], signals["repeated_error"],
            signals["repeated_tool_call"]) == (5, 5, 0), signals
    assert signals["last_error"] == "unknown: backend unavailable for broken", signals


def read(sidecar: RunningServer, scenario: str) -> None:
    answer = EXPECTED[scenario][1]
    assert top_answers(sidecar)[0] == answer
    if scenario == "error_loop":
        error_loop_read(sidecar)
    if scenario.startswith("three_tools"):  # three different calls (their keys redacted)
        run = sidecar.get_json(f"/v1/runs/{sidecar.get_json('/v1/runs')['runs'][0]['id']}")
        assert run["signals"]["repeated_tool_call"] == 0, run["signals"]


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    said = drive(sidecar, llm, scenario)
    runs, answer = EXPECTED[scenario]
    check_runs(sidecar, runs)
    read(sidecar, scenario)
    assert said["error"] is None
    if scenario == "limit":  # Mastra's own step limit stopped the loop
        assert (said["output"], said["finish"]) == ("", "tool-calls")
        assert len(llm.requests(f"{DRIVER}-limit")) == 3
    else:
        assert said["output"] == answer
    if scenario == "error_loop":
        assert said["ran"] == ["broken"] * 5


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    runs, _ = EXPECTED[scenario]
    check_recorded(sidecar, DRIVER, scenario, runs)
    read(sidecar, scenario)
