"""pydantic-ai traced as Langfuse's docs set it up (driver ``pydantic_ai_langfuse``, venv
``.venvs/pydantic_ai_langfuse``): ``Agent.instrument_all()`` under the Langfuse Python SDK (v5),
the application's observation around the run and the trace's attributes set with
``propagate_attributes``.

What it emits: pydantic-ai's own GenAI spans (``invoke_agent pydantic-researcher`` > ``chat
<model>`` and ``execute_tool lookup``, each with ``gen_ai.agent.call.id`` and the
``gen_ai.conversation.id`` pydantic-ai mints for the run) below the application's Langfuse
observation (``research``, ``langfuse.observation.type`` span); every span of the trace carries
the attributes ``propagate_attributes`` set: ``session.id``, ``user.id``,
``langfuse.trace.name``. Without the observation and attributes (``_bare``), pydantic-ai's spans
alone.

The expectations are DESIGN §3's and the same as pydantic-ai's alone (``test_pydantic_ai``).
Known gap, pinned: the run's session is the conversation id pydantic-ai minted for it (DESIGN
§3 reads ``gen_ai.conversation.id`` before ``session.id``), not the session the application set
(``session.id``). Each scenario runs live and from its committed recording.
"""

from __future__ import annotations

import re

import pytest

from tests.frameworks import scenarios
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import Expect, check_recorded, drive_and_check
from tests.harness import RunningServer

ENV = DRIVER = "pydantic_ai_langfuse"
AGENT = "pydantic-researcher"

CASES = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    "three_tools_bare": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    "limit": [Expect(AGENT, 3, 3, 0, "tool_limit_reached", False, "UsageLimitExceeded", None)],
    "tool_error": [Expect(AGENT, 1, 1, 1, "error", False, "RuntimeError", None)],
}


def _read(sidecar: RunningServer, scenario: str) -> None:
    (listed,) = sidecar.get_json("/v1/runs?limit=10")["runs"]
    run = sidecar.get_json(f"/v1/runs/{listed['id']}")
    assert run["signals"]["tools"] == {"lookup": CASES[scenario][0].tool_calls}
    # known gap, pinned: the session is the conversation id pydantic-ai mints for the run
    # (`gen_ai.conversation.id`, before `session.id` by DESIGN §3), not the one the
    # application set with propagate_attributes (`session.id`, on the same spans)
    assert re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", run["session"]), run
    if scenario == "tool_error":
        assert run["signals"]["last_error"].startswith("RuntimeError"), run["signals"]


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, ENV, DRIVER, scenario, {"": scenarios.script(scenario)},
                    CASES[scenario])
    _read(sidecar, scenario)


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, CASES[scenario])
    _read(sidecar, scenario)
