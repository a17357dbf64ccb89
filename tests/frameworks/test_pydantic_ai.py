"""pydantic-ai with its own instrumentation (``Agent.instrument_all()``): each agent run stamps
``gen_ai.agent.call.id`` on its spans; a sub-agent run inside a tool is a child run."""

from __future__ import annotations

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import RECORDINGS, Expect, check_runs, replay, run_driver
from tests.harness import RunningServer

AGENT = "pydantic-researcher"
ANSWER = "a, b and c are known."


def three_tools() -> fakellm.Script:
    return fakellm.tools_then_answer("lookup", [{"key": k} for k in "abc"], ANSWER)


SCRIPTS = {
    "three_tools": {"": three_tools()},
    "limit": {"": fakellm.looping("lookup", lambda i: {"key": f"k{i}"})},
    "tool_error": {"": fakellm.steps(fakellm.call("lookup", key="broken"),
                                     fakellm.answer("it is broken"))},
    "subagent": {"": fakellm.steps(fakellm.call("research", question="a, b and c?"),
                                   fakellm.answer(ANSWER)),
                 "-sub": three_tools()},
}
EXPECTED = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # UsageLimits(request_limit=3): the 4th request is refused before it is sent
    "limit": [Expect(AGENT, 3, 3, 0, "tool_limit_reached", False, "UsageLimitExceeded", None)],
    # a tool exception that is not ModelRetry ends the run
    "tool_error": [Expect(AGENT, 1, 1, 1, "error", False, "RuntimeError", None)],
    "subagent": [Expect("pydantic-coordinator", 2, 1, 0, "completed", True, None, None),
                 Expect(AGENT, 4, 3, 0, "completed", True, None, "pydantic-coordinator")],
}


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    model = f"pydantic-ai-{scenario}"
    for suffix, script in SCRIPTS[scenario].items():
        llm.script(model + suffix, script)
    run_driver("pydantic_ai", "pydantic_ai_agent", scenario, sidecar, llm, model)
    check_runs(sidecar, EXPECTED[scenario])


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    replay(sidecar, RECORDINGS / "pydantic_ai_agent" / f"{scenario}.jsonl")
    check_runs(sidecar, EXPECTED[scenario])
