"""The OpenAI Agents SDK traced by OpenInference: a workflow root (ending OK) above the agent
span, whose status carries ``Max turns exceeded``; a handoff is a child run, and so is an agent
used as a tool (its spans nest in the tool span).

Content hidden (``OPENINFERENCE_HIDE_INPUTS``/``_OUTPUTS``/``_INPUT_MESSAGES``/
``_OUTPUT_MESSAGES``, scenarios ``*_nocontent``): every ``input.value``/``output.value`` is
``__REDACTED__`` and the flattened messages are dropped; the model calls keep their token counts
only (no finish reason, with content or without). A model call whose output is hidden reads as
an answer until a tool call after it says otherwise (as a stream without a finish reason does):
the runs read as with content. Every tool call's arguments were the same placeholder, so three
different calls counted as one call repeated three times (and a cycle): now hidden arguments are
none (no repeats). The conversation length is unknown (``messages`` 0)."""

from __future__ import annotations

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import Expect, check_recorded, drive_and_check
from tests.frameworks.scenarios import ANSWER, script
from tests.harness import RunningServer

AGENT = "agents-researcher"
SCRIPTS = {
    **{name: {"": script(name)} for name in ("three_tools", "limit", "tool_error")},
    "handoff": {"": fakellm.steps(fakellm.call("transfer_to_agents_researcher"),
                                  fakellm.answer("handed off")),
                "-billing": script("three_tools")},
    "agent_as_tool": {"": fakellm.steps(fakellm.call("research", input="a, b and c?"),
                                        fakellm.answer(ANSWER)),
                      "-sub": script("three_tools")},
}
EXPECTED = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # max_turns=3: three model calls (each ran its tool), then MaxTurnsExceeded
    "limit": [Expect(AGENT, 3, 3, 0, "tool_limit_reached", False, "MaxTurnsExceeded", None)],
    # the SDK hands a tool's exception to the model as its result: the model then answers
    "tool_error": [Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
    # the handoff is the triage agent's tool call; the researcher's answer is the run's
    "handoff": [Expect("agents-triage", 1, 1, 0, "completed", True, None, None),
                Expect(AGENT, 4, 3, 0, "completed", True, None, "agents-triage")],
    # the manager's tool call research runs the researcher: its calls are the child's, not the
    # manager's (one model call asking for research, one answering)
    "agent_as_tool": [Expect("agents-manager", 2, 1, 0, "completed", True, None, None),
                      Expect(AGENT, 4, 3, 0, "completed", True, None, "agents-manager")],
}
# ... and each again with message content hidden (OPENINFERENCE_HIDE_INPUTS/OUTPUTS/
# ..._MESSAGES): the same runs (EXPECTED, SCRIPTS: the content-on scenarios other tracers share)
CASES = {**EXPECTED, **{f"{name}_nocontent": expected for name, expected in EXPECTED.items()}}


@pytest.mark.parametrize("scenario", list(CASES))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, "openai_agents", "openai_agents_sdk", scenario,
                    SCRIPTS[scenario.removesuffix("_nocontent")], CASES[scenario])


@pytest.mark.parametrize("scenario", list(CASES))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, "openai_agents_sdk", scenario, CASES[scenario])
