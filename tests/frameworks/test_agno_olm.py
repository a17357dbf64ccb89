"""Agno (agno 3.x, ``OpenAIChat`` on the fake server) traced by OpenLLMetry as
``Traceloop.init()`` sets it up (opentelemetry-instrumentation-agno and -openai), in venv
``.venvs/agno_olm``.

What it emits (details: the recordings): ``<agent>.agent`` (``traceloop.span.kind`` agent,
``gen_ai.agent.name``, the answer in ``traceloop.entity.output``) > ``openai.chat`` per model
call and ``<tool>.tool`` per tool run (``traceloop.entity.input`` = the JSON arguments,
``traceloop.entity.output`` = the Python repr of Agno's ``FunctionExecutionResult``, on a span
that ends OK even when the tool failed). A team: a root ``<team>.team`` with
``traceloop.span.kind`` workflow (no agent name), the leader's ``openai.chat`` calls and its
``delegate_task_to_member.tool`` directly below it, and the member's ``.agent`` span *beside*
the tool span, starting after it ended (the tool returns a generator, run later).

The expectations are DESIGN §3's and those of Agno under OpenInference
(tests/frameworks/test_agno.py): one run per invocation (the team's run, named by
``agno.team.name``, and the member's, a child run), iterations = model calls, tool calls,
errors (a failed tool call told only by that repr), terminal state and reason, the agent's
name. Each case runs live and from its committed recording.
"""

from __future__ import annotations

import pytest

from tests.frameworks.fakellm import FakeLLM, Script
from tests.frameworks.harness import Expect, check_recorded, drive_and_check, top_answers
from tests.frameworks.scenarios import ANSWER, ERROR_ANSWER, SUMMARY, script
from tests.frameworks.test_agno import TEAM, TEAM_SCRIPTS, until_refused
from tests.harness import RunningServer

DRIVER = "agno_olm"
AGENT = "agno_researcher"
SCRIPTS: dict[str, dict[str, Script]] = {
    "three_tools": {"": script("three_tools")},
    "limit": {"": until_refused},
    "tool_error": {"": script("tool_error")},
    "team": TEAM_SCRIPTS,
}
EXPECTED = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # tool_call_limit=3: the 4th call refused (no tool span), the 5th model call answers
    "limit": [Expect(AGENT, 5, 3, 0, "tool_limit_reached", True, "tool_call_limit", None)],
    # the tool raised: its span ends OK, Agno's repr of the result says status='failure'
    "tool_error": [Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
    # the team's workflow span made model calls of its own (the leader's): the team's run,
    # the member a child run of it, though its agent span hangs beside the delegation
    "team": [Expect(TEAM, 2, 1, 0, "completed", True, None, None),
             Expect(AGENT, 4, 3, 0, "completed", True, None, TEAM)],
}
ANSWERS = {"three_tools": ANSWER, "limit": SUMMARY, "tool_error": ERROR_ANSWER,
           "team": "Report: " + ANSWER}


def answer_read(sidecar: RunningServer, scenario: str) -> None:
    answers = top_answers(sidecar)
    assert answers == [ANSWERS[scenario]], answers


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, "agno_olm", DRIVER, scenario, SCRIPTS[scenario],
                    EXPECTED[scenario])
    answer_read(sidecar, scenario)


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, EXPECTED[scenario])
    answer_read(sidecar, scenario)
