"""Apache Burr (an agent as a state machine: ``ask_model``, an action per tool named after it,
``answer``; the graph's own cap of 5 model calls, ``give_up``) traced as Burr's docs set it up:
its ``OpenTelemetryBridge`` hook and ``init_instruments("openai")`` (OpenLLMetry's
opentelemetry-instrumentation-openai) (driver ``burr_agent``, venv ``.venvs/burr``).

What it emits: per ``Application.run``, a ``run`` span (the trace's root) and below it one span
per action, named after the action, with no attribute at all; each model call's ``openai.chat``
(GenAI: model, usage, messages, the tool calls asked for, finish reasons) inside its
``ask_model`` span. Nothing names an agent (the run is named after the service) or a session.

How it is read, by rules no entry of Burr's: the root of no kind frames one run of the model
calls below it; the tool action's span, of no kind, is the tool call the model call before it
asked for because it is named after that tool (the rule that reads a hand-written loop's plain
tool spans). Known gaps, pinned: a tool action named otherwise (one ``run_tool`` for every tool)
is no tool call; a tool's span carries no arguments (the same call made again is no repeat);
the graph's cap is the application's own transition, on no span (the run reads unanswered);
an action's exception fails the action's span, but Burr ends the ``run`` span OK (its wrapper
hands the hook no exception) and records no exception event: the run reads unanswered with the
failed call, not ``error``. (The model endpoint sees all of it: test_model_endpoint_frameworks.)
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.frameworks import fakellm, scenarios
from tests.frameworks.fakellm import FakeLLM, Script
from tests.frameworks.harness import Expect, check_recorded, drive_and_check
from tests.harness import RunningServer

ENV, DRIVER = "burr", "burr_agent"
AGENT = "burr-agent"  # the service's name: no span names an agent
SCRIPTS: dict[str, Script] = {
    **{name: scenarios.script(name) for name in ("three_tools", "limit", "tool_error")},
    "repeat": fakellm.steps(*[fakellm.call("lookup", key="a") for _ in range(4)],
                            fakellm.answer(scenarios.SUMMARY)),
}
CASES: dict[str, list[Expect]] = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # known gap, pinned: the graph's cap (5 model calls, then give_up) is told by no span
    "limit": [Expect(AGENT, 5, 4, 0, "no_response", False, None, None)],
    # known gap, pinned: the run span ends OK though the tool's action raised
    "tool_error": [Expect(AGENT, 1, 1, 1, "no_response", False, None, None)],
    # the same call four times, then an answer (within the cap); known gap, pinned: the tool's
    # span carries no arguments, so the calls cannot be told apart (no repeats: no tool-cycle)
    "repeat": [Expect(AGENT, 5, 4, 0, "completed", True, None, None)],
}


def _read(sidecar: RunningServer, scenario: str) -> None:
    (listed,) = sidecar.get_json("/v1/runs?limit=10")["runs"]
    run: dict[str, Any] = sidecar.get_json(f"/v1/runs/{listed['id']}")
    assert run["session"] is None, run
    assert run["signals"]["tools"] == {"lookup": CASES[scenario][0].tool_calls}, run["signals"]
    if scenario == "three_tools":
        assert run["final_output"] == scenarios.ANSWER, run
    if scenario == "repeat":  # (the model asked for lookup("a") four times)
        assert run["signals"]["repeated_tool_call"] == 0, run["signals"]
    if scenario == "tool_error":  # the failed action's status description, no type
        assert "backend unavailable for broken" in run["signals"]["last_error"], run["signals"]


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
