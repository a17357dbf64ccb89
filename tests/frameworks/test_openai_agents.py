"""The OpenAI Agents SDK traced by OpenInference: a workflow root (ending OK) above the agent
span, whose status carries ``Max turns exceeded``; a handoff is a child run."""

from __future__ import annotations

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import RECORDINGS, Expect, check_runs, replay, run_driver
from tests.harness import RunningServer

AGENT = "agents-researcher"
ANSWER = "a, b and c are known."


def three_tools() -> fakellm.Script:
    return fakellm.tools_then_answer("lookup", [{"key": k} for k in "abc"], ANSWER)


SCRIPTS = {
    "three_tools": {"": three_tools()},
    "limit": {"": fakellm.looping("lookup", lambda i: {"key": f"k{i}"})},
    "tool_error": {"": fakellm.steps(fakellm.call("lookup", key="broken"),
                                     fakellm.answer("it is broken"))},
    "handoff": {"": fakellm.steps(fakellm.call("transfer_to_agents_researcher"),
                                  fakellm.answer("handed off")),
                "-billing": three_tools()},
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
}


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    model = f"openai-agents-{scenario}"
    for suffix, script in SCRIPTS[scenario].items():
        llm.script(model + suffix, script)
    run_driver("openai_agents", "openai_agents_sdk", scenario, sidecar, llm, model)
    check_runs(sidecar, EXPECTED[scenario])


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    replay(sidecar, RECORDINGS / "openai_agents_sdk" / f"{scenario}.jsonl")
    check_runs(sidecar, EXPECTED[scenario])
