"""pydantic-ai with its own instrumentation (``Agent.instrument_all()``): each agent run stamps
``gen_ai.agent.call.id`` on its spans; a sub-agent run inside a tool is a child run; a
structured output's ``final_result`` tool call is the answer, not a tool call.

Content capture off (``InstrumentationSettings(include_content=False)``, scenarios
``*_nocontent``): the model calls keep their finish reasons, usage and tool-call parts (names and
ids, no arguments), the tool spans their names; the agent span loses ``final_result``. The
structured answer was read from that attribute only, so the run read ``no_response``: now the
model's request for the output tool alone is the answer. The tools' arguments are gone, so
repeated calls cannot be told (none counts as a repeat)."""

from __future__ import annotations

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import Expect, check_recorded, drive_and_check
from tests.frameworks.scenarios import ANSWER, script
from tests.harness import RunningServer

AGENT = "pydantic-researcher"
SCRIPTS = {
    **{name: {"": script(name)} for name in ("three_tools", "limit", "tool_error")},
    "subagent": {"": fakellm.steps(fakellm.call("research", question="a, b and c?"),
                                   fakellm.answer(ANSWER)),
                 "-sub": script("three_tools")},
    "structured": {"": fakellm.steps(*(fakellm.call("lookup", key=k) for k in "abc"),
                                     fakellm.call("final_result", summary=ANSWER))},
}
EXPECTED = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # UsageLimits(request_limit=3): the 4th request is refused before it is sent
    "limit": [Expect(AGENT, 3, 3, 0, "tool_limit_reached", False, "UsageLimitExceeded", None)],
    # a tool exception that is not ModelRetry ends the run
    "tool_error": [Expect(AGENT, 1, 1, 1, "error", False, "RuntimeError", None)],
    "subagent": [Expect("pydantic-coordinator", 2, 1, 0, "completed", True, None, None),
                 Expect(AGENT, 4, 3, 0, "completed", True, None, "pydantic-coordinator")],
    # the 4th model call answers with the output tool final_result (pydantic-ai 2.x opens no
    # span for it): an answer, not a 4th tool call
    "structured": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
}
# ... and each again with message content off (include_content=False): the same runs
CASES = {**EXPECTED, **{f"{name}_nocontent": expected for name, expected in EXPECTED.items()}}


@pytest.mark.parametrize("scenario", list(CASES))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, "pydantic_ai", "pydantic_ai_agent", scenario,
                    SCRIPTS[scenario.removesuffix("_nocontent")], CASES[scenario])


@pytest.mark.parametrize("scenario", list(CASES))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, "pydantic_ai_agent", scenario, CASES[scenario])
