"""The OpenAI Agents SDK traced by Pydantic Logfire (``logfire.instrument_openai_agents()``),
exported over OTLP to the sidecar only: the runs read as under OpenInference
(:mod:`tests.frameworks.test_openai_agents`), on Chat Completions and on the Responses API model
(``*_responses``: the SDK's default for a model given by name).

What it emits (details: the recordings): no GenAI operation name and no span kind of any
convention. Every span is named after Logfire's message template (``logfire.msg_template``),
its arguments its attributes: the root ``OpenAI Agents trace: {name}`` > ``Task: Agent
workflow`` > ``Agent run: {name!r}`` (``name`` the agent's) > ``Turn {turn} for agent <name>``
> ``Chat completion with {gen_ai.request.model!r}`` (or ``Responses API with …``: ``input`` and
``output`` the messages as JSON, ``gen_ai.request.model`` and ``gen_ai.usage.*``) and
``Function: {name}`` (``name``, ``input``, ``output``), a handoff ``Handoff: {from_agent} →
{to_agent}``. A failed span's error is the SDK's error dict as JSON in ``error`` (no status
description, no exception event): ``{"message": "Max turns exceeded", …}`` on the agent span
at ``max_turns``, ``{"message": "Error running tool (non-fatal)", …}`` on a failing tool's.

Before the Logfire entry of ``watchdog/core/spans/frameworks.py`` the sidecar read each
invocation as one run of loose model calls (a model and its usage type a span no entry knows):
no tool call, no answer, ``no_response``, the limit unseen, and a handoff's or sub-agent's
calls folded into one run. Each case runs live and from its committed recording.
"""

from __future__ import annotations

import pytest

from tests.frameworks import fakellm, scenarios
from tests.frameworks.fakellm import FakeLLM, Script
from tests.frameworks.harness import (
    Expect,
    check_recorded,
    drive_and_check,
    top_answers,
)
from tests.frameworks.test_openai_agents import AGENT, EXPECTED, SCRIPTS
from tests.harness import RunningServer

DRIVER = "openai_agents_logfire"
ANSWERS = {"three_tools": scenarios.ANSWER, "limit": None, "tool_error": scenarios.ERROR_ANSWER,
           "handoff": scenarios.ANSWER, "agent_as_tool": scenarios.ANSWER,
           "error_loop": scenarios.ERROR_ANSWER}
CASE_SCRIPTS: dict[str, dict[str, Script]] = {
    **SCRIPTS,
    # the tool fails five times in a row, then the model answers
    "error_loop": {"": fakellm.steps(*(fakellm.call("lookup", key="broken") for _ in range(5)),
                                     fakellm.answer(scenarios.ERROR_ANSWER))},
}
CASES: dict[str, list[Expect]] = {
    **EXPECTED,
    # the same failing call five times: the default pack's loop_detected, by tool-cycle (it
    # holds at the 4th round, before error-loop at the 5th error, however the spans are
    # batched); error_loop_read checks its signals
    "error_loop": [Expect(AGENT, 6, 5, 5, "loop_detected", True, "tool-cycle", None)],
    **{f"{name}_responses": EXPECTED[name] for name in ("three_tools", "limit", "tool_error")},
}


def error_loop_read(sidecar: RunningServer) -> None:
    """The error loop's signals: five errors in a row, the same one, the same call five times;
    the error the SDK reports (its tool's own message is redacted)."""
    run = sidecar.get_json(f"/v1/runs/{sidecar.get_json('/v1/runs')['runs'][0]['id']}")
    signals = run["signals"]
    assert (signals["consecutive_errors"], signals["repeated_error"],
            signals["repeated_tool_call"]) == (5, 5, 5), signals
    assert signals["last_error"] == "error: Error running tool (non-fatal)", signals


def answers_read(sidecar: RunningServer, scenario: str) -> None:
    assert top_answers(sidecar)[0] == ANSWERS[scenario.removesuffix("_responses")]
    if scenario == "error_loop":
        error_loop_read(sidecar)


@pytest.mark.parametrize("scenario", list(CASES))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, "openai_agents_logfire", DRIVER, scenario,
                    CASE_SCRIPTS[scenario.removesuffix("_responses")], CASES[scenario])
    answers_read(sidecar, scenario)


@pytest.mark.parametrize("scenario", list(CASES))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, CASES[scenario])
    answers_read(sidecar, scenario)
