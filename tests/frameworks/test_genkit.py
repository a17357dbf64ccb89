"""Genkit (npm ``genkit``, ``@genkit-ai/compat-oai``'s OpenAI-compatible plugin) with Genkit's
own OpenTelemetry spans (``enableTelemetry`` from ``genkit/tracing``), exported over OTLP/HTTP
protobuf: ``ts/genkit/genkit.ts`` under node, installed by ``make test`` with ``npm ci
--omit=optional`` from ``ts/genkit/package-lock.json`` (apart from ``ts/``: Genkit pins
OpenTelemetry JS 1.x).

What it emits (details: the recordings): no GenAI or OpenInference attribute. Every action's
span carries ``genkit:type`` (``action``), ``genkit:metadata:subtype`` (``flow``, ``model``,
``tool``), ``genkit:name`` (the flow's, the model's, the tool's name), ``genkit:path``,
``genkit:input``/``genkit:output`` (JSON: a model call's output is Genkit's response, its
``finishReason``, ``message`` and ``usage``) and ``genkit:state``; a flow's root also
``genkit:isRoot``. ``generate`` spans (``genkit:type`` ``util``, no subtype) frame the tool loop's
turns, each nested in the one before. A tool that throws ends ERROR and Genkit ends the whole
call with it (no error handed to the model); ``maxTurns`` reached throws ``GenkitError``
``ABORTED: Exceeded maximum tool call iterations (3)``, every span up to the flow ERROR with it.
A flow run inside a tool is a flow span below the tool span.

Before the Genkit entry of ``watchdog/core/spans/frameworks.py`` the sidecar read no run at all
(no span of a kind it knew). The expectations are DESIGN §3's: one run per flow invocation (the
agent: the flow's name), iterations = model calls, tool calls, errors, terminal state and reason,
the answer's text, a flow run inside a tool a child run. Each case runs live (one node process)
and from its committed recording.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.frameworks import cases, scenarios
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

DRIVER = "genkit"
AGENT = "genkit_researcher"
EXPECTED: dict[str, tuple[list[Expect], str | None]] = {
    "three_tools": ([Expect(AGENT, 4, 3, 0, "completed", True, None, None)], scenarios.ANSWER),
    "three_tools_stream": ([Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
                           scenarios.ANSWER),
    # maxTurns 3: three rounds of tools, the fourth model call asks for more and Genkit throws
    "limit": ([Expect(AGENT, 4, 3, 0, "tool_limit_reached", False, "max_turns", None)], None),
    # the tool throws: Genkit fails the call (and the flow) with the tool's error
    "tool_error": ([Expect(AGENT, 1, 1, 1, "error", False, "Error", None)], None),
    "subagent": ([Expect(AGENT, 2, 1, 0, "completed", True, None, None),
                  Expect("genkit_sub", 2, 1, 0, "completed", True, None, AGENT)],
                 scenarios.ANSWER),
}


def drive(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> dict[str, Any]:
    """Run the agent once on the scenario's scripts; its last stdout line."""
    if not (TS_DIR / "genkit" / "node_modules" / "genkit" / "package.json").exists():
        raise AssertionError(f"{TS_DIR}/genkit/node_modules is missing: run `make "
                             f"tests/frameworks/ts/genkit/node_modules/.installed` (part of "
                             f"`make test`)")
    model = f"{DRIVER}-{scenario}"
    if scenario == "subagent":
        cases.register(llm, model, cases.delegate("research", topic="a"))
    else:
        scenarios.scripted(llm, DRIVER, scenario)
    stdout = run_ts_driver("genkit/genkit.ts", DRIVER, scenario, sidecar, llm, model)
    said: dict[str, Any] = json.loads(stdout.strip().splitlines()[-1])
    return said


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    said = drive(sidecar, llm, scenario)
    runs, answer = EXPECTED[scenario]
    check_runs(sidecar, runs)
    assert top_answers(sidecar)[0] == answer
    assert said["output"] == answer
    if scenario == "limit":  # Genkit's own turn limit stopped the loop
        assert said["error"] == "ABORTED: Exceeded maximum tool call iterations (3)"
        assert len(llm.requests(f"{DRIVER}-limit")) == 4
    elif scenario == "tool_error":
        assert said["error"] == "backend unavailable for broken"


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    runs, answer = EXPECTED[scenario]
    check_recorded(sidecar, DRIVER, scenario, runs)
    assert top_answers(sidecar)[0] == answer
