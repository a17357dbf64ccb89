"""pydantic-ai (``Agent.instrument_all()``) traced by OpenInference
(openinference-instrumentation-pydantic-ai's ``OpenInferenceSpanProcessor``), in venv
``.venvs/pydantic_ai_oi``.

The expectations are those of pydantic-ai's own spans (tests/frameworks/test_pydantic_ai.py):
one run per agent run, the sub-agent's a child run, iterations = model calls, tool calls,
errors, terminal state and reason, the agent's name and its answer. Each case runs live and
from its committed recording.
"""

from __future__ import annotations

import pytest

from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import Expect, check_recorded, drive_and_check, top_answers
from tests.frameworks.scenarios import ANSWER
from tests.frameworks.test_pydantic_ai import SCRIPTS as BASE_SCRIPTS
from tests.harness import RunningServer

DRIVER = "pydantic_ai_oi"
AGENT = "pydantic-researcher"
COORDINATOR = "pydantic-coordinator"
SCRIPTS = {name: BASE_SCRIPTS[name] for name in ("three_tools", "limit", "tool_error",
                                                  "subagent")}
EXPECTED = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # UsageLimits(request_limit=3): the 4th request is refused before it is sent
    "limit": [Expect(AGENT, 3, 3, 0, "tool_limit_reached", False, "UsageLimitExceeded", None)],
    # a tool exception that is not ModelRetry ends the run
    "tool_error": [Expect(AGENT, 1, 1, 1, "error", False, "RuntimeError", None)],
    "subagent": [Expect(COORDINATOR, 2, 1, 0, "completed", True, None, None),
                 Expect(AGENT, 4, 3, 0, "completed", True, None, COORDINATOR)],
}
ANSWERS = {"three_tools": [ANSWER], "limit": [None], "tool_error": [None],
           "subagent": [ANSWER]}


def answer_read(sidecar: RunningServer, scenario: str) -> None:
    answers = top_answers(sidecar)
    assert answers == ANSWERS[scenario], answers


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, "pydantic_ai_oi", DRIVER, scenario, SCRIPTS[scenario],
                    EXPECTED[scenario])
    answer_read(sidecar, scenario)


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, EXPECTED[scenario])
    answer_read(sidecar, scenario)
