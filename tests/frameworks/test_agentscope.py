"""AgentScope 2 (``agentscope.agent.Agent``, its reasoning-acting loop with ``max_iters``; a
``Toolkit`` of one ``FunctionTool`` on its ``OpenAIChatModel``) traced by its own
``TracingMiddleware`` (driver ``agentscope_agent``, venv ``.venvs/agentscope``).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.frameworks import scenarios
from tests.frameworks.fakellm import FakeLLM, Script
from tests.frameworks.harness import Expect, check_recorded, drive_and_check
from tests.harness import RunningServer

ENV, DRIVER = "agentscope", "agentscope_agent"
AGENT = "researcher"
SCRIPTS: dict[str, Script] = {
    name: scenarios.script(name) for name in ("three_tools", "limit", "tool_error")}
CASES: dict[str, list[Expect]] = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    "limit": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    "tool_error": [Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
}


def _read(sidecar: RunningServer, scenario: str) -> None:
    (listed,) = sidecar.get_json("/v1/runs?limit=10")["runs"]
    run: dict[str, Any] = sidecar.get_json(f"/v1/runs/{listed['id']}")
    assert run["signals"]["tools"] == {"lookup": CASES[scenario][0].tool_calls}, run["signals"]


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, ENV, DRIVER, scenario, {"": SCRIPTS[scenario]},
                    CASES[scenario])
    _read(sidecar, scenario)
    assert len(llm.requests(f"{DRIVER}-{scenario}")) == CASES[scenario][0].iterations


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, CASES[scenario])
    _read(sidecar, scenario)
