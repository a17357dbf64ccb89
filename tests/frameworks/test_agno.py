"""Agno (agno 3.x, ``OpenAIChat`` on the fake server) traced by OpenInference
(openinference-instrumentation-agno, Agno's documented OpenTelemetry route), in venv
``.venvs/agno``.

What Agno emits (details: the recordings): one trace per ``run``/``arun``, an AGENT span
``<name>.run`` (``agent.name``, ``session.id``, ``agno.run.id``, the answer in ``output.value``;
a ``Team`` alike, with ``agno.team``) > an LLM span ``OpenAIChat.invoke`` (streamed:
``invoke_stream``) per model call, with no finish reason (the flattened
``llm.output_messages.*`` and ``output.value`` say whether it asked for tools), its request in
``input.value`` as Agno's own message dicts (each message's ``role`` written after its
``content``) > a TOOL span per tool run (``tool.name``, ``input.value``, ``output.value``). A
tool's exception makes its span ERROR with the message as the status description (no
``exception`` event, no type: typed ``error``); Agno hands the text to the model. A team member
runs as an AGENT span of its own, hanging from the team's AGENT span (not from the
``delegate_task_to_member`` TOOL span; ``graph.node.parent_id`` names the team's node): a child
run. ``tool_call_limit`` raises nothing and ends no loop: a call past it is not run (no TOOL
span) but answered by Agno's tool message "Tool call limit reached. Tool call <tool> not
executed. Don't try to execute it again.", and the model is asked again with its tools; the
limit shows only as the last input message of that next model call. A model that keeps asking
is refused again and again (Agno's loop has no cap of its own): such a run ends only when the
model answers — not tested here.

The expectations are DESIGN §3's: one run per invocation, the member a child run with its
parent, iterations = model calls, tool calls, errors, terminal state and reason (the cap is
``tool_limit_reached``, reason ``tool_call_limit``, with the answer the model gave after the
refusal), the agent's name. Each case runs live and from its committed recording.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM, Step
from tests.frameworks.harness import Expect, check_recorded, drive_and_check
from tests.frameworks.scenarios import ANSWER, SUMMARY, script
from tests.harness import RunningServer

DRIVER = "agno_oi"
AGENT = "agno_researcher"
TEAM = "agno_team"
TEAM_SCRIPTS = {"": fakellm.steps(fakellm.call("delegate_task_to_member",
                                               member_id="agno-researcher",
                                               task="Look up a, b and c."),
                                  fakellm.answer("Report: " + ANSWER)),
                "-sub": script("three_tools")}
LIMIT_TEXT = "Tool call limit reached"  # Agno's tool message for a call past tool_call_limit


def until_refused(index: int, body: dict[str, Any]) -> Step:
    """``lookup`` on every request until Agno says the limit is reached; then an answer (a
    model that keeps asking is refused again and again: Agno's loop has no cap of its own)."""
    last = (body.get("messages") or [{}])[-1]
    if last.get("role") == "tool" and LIMIT_TEXT in str(last.get("content")):
        return fakellm.answer(SUMMARY)
    return fakellm.call("lookup", key=f"k{index}")


SCRIPTS = {
    **{name: {"": script(name)} for name in ("three_tools", "tool_error")},
    **{name: {"": script("three_tools")} for name in ("three_tools_stream",
                                                     "three_tools_async")},
    "limit": {"": until_refused},
    "limit_stream": {"": until_refused},
    "team": TEAM_SCRIPTS,
    "team_stream": TEAM_SCRIPTS,
    "team_async": TEAM_SCRIPTS,
}
EXPECTED = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    "three_tools_stream": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    "three_tools_async": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # tool_call_limit=3: three calls run, the 4th is refused (no tool span), the 5th model call
    # answers: stopped by the framework's limit, with an answer
    "limit": [Expect(AGENT, 5, 3, 0, "tool_limit_reached", True, "tool_call_limit", None)],
    "limit_stream": [Expect(AGENT, 5, 3, 0, "tool_limit_reached", True, "tool_call_limit",
                            None)],
    "tool_error": [Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
    "team": [Expect(TEAM, 2, 1, 0, "completed", True, None, None),
             Expect(AGENT, 4, 3, 0, "completed", True, None, TEAM)],
    "team_stream": [Expect(TEAM, 2, 1, 0, "completed", True, None, None),
                    Expect(AGENT, 4, 3, 0, "completed", True, None, TEAM)],
    "team_async": [Expect(TEAM, 2, 1, 0, "completed", True, None, None),
                   Expect(AGENT, 4, 3, 0, "completed", True, None, TEAM)],
}


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, "agno", DRIVER, scenario, SCRIPTS[scenario],
                    EXPECTED[scenario])
    if scenario.startswith("limit"):  # Agno's cap refused the 4th call; the model answered
        assert len(llm.requests(f"{DRIVER}-{scenario}")) == 5


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, EXPECTED[scenario])
