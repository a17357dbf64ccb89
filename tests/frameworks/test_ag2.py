"""AG2 1.x (the ``ag2`` package: an ``Agent`` with a tool on its ``OpenAIConfig``) traced by its
own ``TelemetryMiddleware`` (``ag2[tracing]``), exporting through the global tracer provider
(driver ``ag2_native``, venv ``.venvs/ag2``).

What it emits (details: the recordings): per ``ask``, ``invoke_agent <name>`` (the middleware's
``agent_name``; ``unknown`` without it) with, below it, ``chat <model>`` per model call (model,
usage, finish reasons, input and output messages), ``execute_tool <tool>`` per tool call (call
id, arguments, result; status ERROR with the exception for a tool that raised) and, after each
model call, ``record_usage model_call`` (``ag2.usage.kind``): the same call's model and token
usage again, no operation name. Every span carries ``ag2.span.type``. No session, but for the
application's own attributes, which the middleware stamps on every span (``span_attributes``:
``session.id`` here, in ``_session``).

Read wrong before the AG2 entry: each ``record_usage`` span, a model and its usage with no
operation, was a model call of its own by the GenAI marks (twice the iterations, twice the
tokens; ``records`` now); the middleware given no ``agent_name`` names every agent ``unknown``,
which was the run's agent (every unnamed AG2 agent of every service one agent, its budgets and
metrics shared; ``agent_name_placeholders`` now: the service's name). AG2's loop has no cap of
its own (the model endpoint's budget stops it: ``test_model_endpoint_frameworks``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.frameworks import fakellm, scenarios
from tests.frameworks.fakellm import FakeLLM, Script
from tests.frameworks.harness import (
    RECORDINGS,
    UNCHECKED,
    Expect,
    check_recorded,
    drive_and_check,
    recorded_spans,
)
from tests.harness import RunningServer

ENV, DRIVER = "ag2", "ag2_native"
AGENT = "ag2-researcher"
SCRIPTS: dict[str, Script] = {
    "three_tools": scenarios.script("three_tools"),
    "three_tools_bare": scenarios.script("three_tools"),
    "three_tools_session": scenarios.script("three_tools"),
    "tool_error": scenarios.script("tool_error"),
    "repeat": fakellm.steps(*[fakellm.call("lookup", key="a") for _ in range(5)],
                            fakellm.answer(scenarios.SUMMARY)),
    "two_asks": fakellm.steps(fakellm.call("lookup", key="a"), fakellm.answer("A."),
                              fakellm.call("lookup", key="b"), fakellm.answer("B.")),
}
CASES: dict[str, list[Expect]] = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # the middleware given no name writes AG2's stand-in (`unknown`), which names no agent:
    # the run is named after the service, as a run no span names
    "three_tools_bare": [Expect("ag2-app", 4, 3, 0, "completed", True, None, None)],
    "three_tools_session": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # the tool's exception fails its span and goes to the model, which answers
    "tool_error": [Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
    # the same call five times, then an answer: the default pack's tool-cycle rule ends the
    # run when it sees the fourth before the agent's span ends, which the batching decides
    "repeat": [Expect(AGENT, 6, 5, 0, UNCHECKED, True, UNCHECKED, None)],
    # two asks of one agent: two invocations, two traces, two runs
    "two_asks": [Expect(AGENT, 2, 1, 0, "completed", True, None, None),
                 Expect(AGENT, 2, 1, 0, "completed", True, None, None)],
}


def _chat_tokens(scenario: str) -> int:
    """The tokens the recording's model-call spans (``chat``) carry, added up."""
    total = 0
    for span in recorded_spans(RECORDINGS / DRIVER / f"{scenario}.jsonl"):
        attrs = {a["key"]: a["value"] for a in span.get("attributes", [])}
        if attrs.get("gen_ai.operation.name") == {"stringValue": "chat"}:
            total += sum(int(attrs[key]["intValue"]) for key in (
                "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"))
    return total


def _read(sidecar: RunningServer, scenario: str, recorded: bool) -> None:
    listed: list[dict[str, Any]] = sidecar.get_json("/v1/runs?limit=10")["runs"]
    runs = [sidecar.get_json(f"/v1/runs/{run['id']}") for run in listed]
    # AG2 names none; the application's, stamped by the middleware, is read
    assert [run["session"] for run in runs] == [
        "session-42" if scenario.endswith("_session") else None] * len(runs), runs
    assert sum(run["signals"]["tools"]["lookup"] for run in runs) == sum(
        expect.tool_calls for expect in CASES[scenario])
    if recorded:  # each model call's usage counted once (not again from record_usage)
        assert sum(run["total_tokens"] for run in runs) == _chat_tokens(scenario), runs
    if scenario == "tool_error":
        assert runs[0]["signals"]["last_error"].startswith("RuntimeError"), runs[0]["signals"]
    if scenario == "repeat":
        (run,) = runs
        assert run["signals"]["repeated_tool_call"] == 5, run["signals"]
        assert (run["terminal_state"], run["terminal_reason"]) == (
            "loop_detected", "tool-cycle"), json.dumps(run)


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, ENV, DRIVER, scenario, {"": SCRIPTS[scenario]},
                    CASES[scenario])
    _read(sidecar, scenario, recorded=False)
    assert len(llm.requests(f"{DRIVER}-{scenario}")) == sum(
        expect.iterations for expect in CASES[scenario])


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, CASES[scenario])
    _read(sidecar, scenario, recorded=True)


def test_usage_records_are_in_the_recordings() -> None:
    """What the AG2 entry is for: each model call's ``record_usage`` span is there, with a model
    and token usage and no operation (what the GenAI marks read as a model call)."""
    spans = recorded_spans(RECORDINGS / DRIVER / "three_tools.jsonl")
    records = [span for span in spans if span["name"] == "record_usage model_call"]
    assert len(records) == 4
    for span in records:
        keys = {a["key"] for a in span["attributes"]}
        assert {"gen_ai.response.model", "gen_ai.usage.input_tokens"} <= keys
        assert "gen_ai.operation.name" not in keys
