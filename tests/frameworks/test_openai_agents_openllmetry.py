"""The OpenAI Agents SDK traced by Traceloop's OpenLLMetry (opentelemetry-instrumentation-
openai-agents, with -openai for the model calls): the same runs as with OpenInference
(:mod:`tests.frameworks.test_openai_agents`) must read the same.

What it emits: a root ``Agent Workflow`` (``traceloop.span.kind`` = workflow), an agent span
``<name>.agent`` (``traceloop.span.kind`` = agent, ``gen_ai.operation.name`` = invoke_agent,
``gen_ai.agent.name``), model calls ``openai.response``/``chat``, tools ``<name>.tool``
(``traceloop.span.kind`` = tool, GenAI tool attributes) and handoffs ``<from> → <to>.handoff``
(``traceloop.span.kind`` = handoff: the model's ``transfer_to_<agent>`` call, a tool call). Each
model call is two nested spans: the SDK's ``openai.response`` (no output, no usage) and, inside
it, the OpenAI client's ``openai.chat`` (one model call). ``max_turns`` is the agent span's
status description, the repr of the SDK's error dict (``{'message': 'Max turns exceeded', …}``).
Every agent span hangs from the ``Agent Workflow`` root, never from the span that ran it.

An agent used as a tool (``agent_as_tool``) is not nested in the tool span that ran it: it hangs
from the root like its caller and ends first. It was read as the top run and its caller as its
child; the times tell (it ran inside its caller's tool call), so it is the caller's child run.
"""

from __future__ import annotations

import pytest

from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import check_recorded, drive_and_check
from tests.frameworks.test_openai_agents import EXPECTED, SCRIPTS
from tests.harness import RunningServer

DRIVER = "openai_agents_openllmetry"
CASES = list(EXPECTED)


@pytest.mark.parametrize("scenario", CASES)
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, "openai_agents_olm", DRIVER, scenario, SCRIPTS[scenario],
                    EXPECTED[scenario])


@pytest.mark.parametrize("scenario", CASES)
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, EXPECTED[scenario])
