"""pydantic-ai (its OpenAI chat model on the fake server) with its native instrumentation,
``Agent.instrument_all()``; the driver runs in the main venv.

What pydantic-ai emits (details: the recordings and ``/work/findings/pydantic-ai.md``): one trace
per top-level run, ``invoke_agent <name>`` > ``chat <model>`` + ``execute_tool <tool>``; the
structured output is the ``final_result`` tool. ``UsageLimits(request_limit=3)`` raises
``UsageLimitExceeded`` before the 4th model request; a tool's exception ends the run. A tool
that runs another agent nests that agent's ``invoke_agent`` span under its ``execute_tool``.

The expectations are DESIGN §3's: one run per invocation, a child run for the delegated agent
(with its parent), iterations = model calls, tool calls without ``final_result``, an error
counted once, terminal state and reason, ``has_final_answer``, the agent's name. Each case runs
live and from its committed recording.
"""

from __future__ import annotations

import pytest

from tests.frameworks import cases
from tests.frameworks.cases import MAIN_VENV
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import RECORDINGS, Expect, check_runs, replay, run_driver
from tests.harness import RunningServer

DRIVER = "pydantic_ai_native"
AGENT = "pa_researcher"
SCRIPTS = {
    "three_tools": cases.three_tools(),
    "structured": cases.three_tools("final_result", summary=cases.ANSWER),
    "limit": cases.limit(),
    "tool_error": cases.tool_error(),
    "delegate": cases.delegate("research", question="What is a?"),
}
EXPECTED: dict[str, list[Expect]] = {
    "three_tools": [Expect(agent=AGENT, iterations=4, tool_calls=3, errors=0,
                           terminal_state="completed", has_final_answer=True,
                           terminal_reason=None, parent_agent=None)],
    # the answer is the output tool final_result: an answer, not a tool call
    "structured": [Expect(agent=AGENT, iterations=4, tool_calls=3, errors=0,
                          terminal_state="completed", has_final_answer=True,
                          terminal_reason=None, parent_agent=None)],
    # request_limit=3: three model calls and three tool calls, then UsageLimitExceeded before
    # the 4th request (no answer; a limit is not a failed call, so no error)
    "limit": [Expect(agent=AGENT, iterations=3, tool_calls=3, errors=0,
                     terminal_state="tool_limit_reached", terminal_reason="UsageLimitExceeded",
                     has_final_answer=False, parent_agent=None)],
    # the tool's RuntimeError ends the run: one model call, one failed tool call, one error
    "tool_error": [Expect(agent=AGENT, iterations=1, tool_calls=1, errors=1,
                          terminal_state="error", terminal_reason="RuntimeError",
                          has_final_answer=False, parent_agent=None)],
    # the manager's tool research runs pa_researcher: a child run, not counted in the parent
    "delegate": [Expect(agent="pa_manager", iterations=2, tool_calls=1, errors=0,
                        terminal_state="completed", has_final_answer=True,
                        terminal_reason=None, parent_agent=None),
                 Expect(agent=AGENT, iterations=2, tool_calls=1, errors=0,
                        terminal_state="completed", has_final_answer=True,
                        terminal_reason=None, parent_agent="pa_manager")],
}


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    model = cases.register(llm, f"{DRIVER}-{scenario}", SCRIPTS[scenario])
    run_driver(MAIN_VENV, DRIVER, scenario, sidecar, llm, model)
    check_runs(sidecar, EXPECTED[scenario])
    if scenario == "limit":
        assert len(llm.requests(model)) == 3  # the framework's own limit stopped the loop


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_replay(sidecar: RunningServer, scenario: str) -> None:
    replay(sidecar, RECORDINGS / DRIVER / f"{scenario}.jsonl")
    check_runs(sidecar, EXPECTED[scenario])
