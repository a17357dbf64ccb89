"""pydantic-ai traced by Pydantic Logfire, its tool function also traced by OpenInference's own
tracer (driver ``pydantic_ai_logfire``, venv ``.venvs/pydantic_ai_logfire``).

What it emits: one trace per run, pydantic-ai's ``invoke_agent pydantic-researcher`` > a
``chat <model>`` span per model call and an ``execute_tool lookup`` span per tool call
(``gen_ai.*``, the call id), and inside each, OpenInference's ``lookup`` TOOL span: every tool
execution traced twice, one span directly inside the other. When the tool raises, both record
the one exception (its type and message), and it leaves the run.

The expectations are DESIGN §3's and the same as pydantic-ai's alone (``test_pydantic_ai``):
each tool execution counted once, its failure one error (issue 28, mechanism 5: the exception
echoed on the span around it is no second call or error); the request limit is
``tool_limit_reached``. Each scenario runs live and from its committed recording
(``recordings/pydantic_ai_logfire/``).
"""

from __future__ import annotations

import pytest

from tests.frameworks import scenarios
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import Expect, check_recorded, drive_and_check
from tests.harness import RunningServer

ENV = DRIVER = "pydantic_ai_logfire"
AGENT = "pydantic-researcher"

CASES = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    "limit": [Expect(AGENT, 3, 3, 0, "tool_limit_reached", False, "UsageLimitExceeded", None)],
    "tool_error": [Expect(AGENT, 1, 1, 1, "error", False, "RuntimeError", None)],
}


def _tools_read(sidecar: RunningServer, scenario: str) -> None:
    (listed,) = sidecar.get_json("/v1/runs?limit=10")["runs"]
    signals = sidecar.get_json(f"/v1/runs/{listed['id']}")["signals"]
    assert signals["tools"] == {"lookup": CASES[scenario][0].tool_calls}
    if scenario == "tool_error":
        assert signals["last_error"].startswith("RuntimeError"), signals["last_error"]


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, ENV, DRIVER, scenario, {"": scenarios.script(scenario)},
                    CASES[scenario])
    _tools_read(sidecar, scenario)


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, CASES[scenario])
    _tools_read(sidecar, scenario)
