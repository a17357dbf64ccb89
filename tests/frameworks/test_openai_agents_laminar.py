"""The OpenAI Agents SDK traced by Laminar (``Laminar.initialize()``: its own trace processor for
the SDK; driver ``openai_agents_laminar``, venv ``.venvs/openai_agents_laminar``), exported over
OTLP/HTTP to the standard ``OTEL_EXPORTER_OTLP_ENDPOINT``: the runs read as under OpenInference
(:mod:`tests.frameworks.test_openai_agents`).

What it emits (details: the recordings): scope ``lmnr.tracer``, no GenAI operation and no span
kind of another convention: ``lmnr.span.type`` ``LLM`` (``agents.generation``: GenAI's newest
message attributes, model and usage), ``TOOL`` (a span named after the tool, a handoff's too:
``lmnr.span.input`` its arguments, ``lmnr.span.output`` its result) or ``DEFAULT`` (the root
``Agent workflow``, ``agents.task``, each ``agents.turn`` with ``openai.agents.turn.agent_name``,
and the agent's span: named after the agent, its ``lmnr.span.input`` ``{"name": <agent>,
"tools": [...]}``, no output); ``lmnr.span.path`` lists the span's ancestors by name;
``service.name`` is the script's path. A failed span says its error in its status description
(``Max turns exceeded`` on the agent's span at ``max_turns``).

Before the Laminar entry of ``watchdog/core/spans/frameworks.py`` (data: the kind map on
``lmnr.span.type``, the agent named in its span's input JSON, a tool's input and output, on its
scope's spans alone) every run was named after the script's path (``service.name``), its
agent's span no invocation (a handoff's or an agent-as-tool's calls folded into one run), no
tool's arguments read. Each case runs live and from its committed recording.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.frameworks import scenarios
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import check_recorded, drive_and_check, top_answers
from tests.frameworks.test_openai_agents import EXPECTED, SCRIPTS
from tests.harness import RunningServer

ENV = DRIVER = "openai_agents_laminar"
ANSWERS = {"three_tools": scenarios.ANSWER, "limit": None, "tool_error": scenarios.ERROR_ANSWER,
           "handoff": scenarios.ANSWER, "agent_as_tool": scenarios.ANSWER}
SCENARIOS = sorted(ANSWERS)


def _read(sidecar: RunningServer, scenario: str) -> None:
    assert top_answers(sidecar) == [ANSWERS[scenario]]
    if scenario not in ("three_tools", "limit"):
        return
    (listed,) = sidecar.get_json("/v1/runs?limit=10")["runs"]
    run: dict[str, Any] = sidecar.get_json(f"/v1/runs/{listed['id']}")
    # each call's arguments from its span's input: the limit's k0, k1, k2 are no repeats
    assert run["signals"]["tools"] == {"lookup": 3}, run["signals"]
    assert run["signals"]["repeated_tool_call"] == 1, run["signals"]
    if scenario == "limit":
        assert run["signals"]["last_error"] == 'Max turns exceeded: {"max_turns":3}', \
            run["signals"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, ENV, DRIVER, scenario, SCRIPTS[scenario], EXPECTED[scenario])
    _read(sidecar, scenario)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, EXPECTED[scenario])
    _read(sidecar, scenario)
