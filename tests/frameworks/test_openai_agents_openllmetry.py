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

Every scenario again with content off (``<scenario>_nocontent``: ``TRACELOOP_TRACE_CONTENT=false``
set by the driver, :data:`tests.frameworks.test_openai_agents.CASES`): the model calls lose
``gen_ai.input.messages``/``gen_ai.output.messages``/``gen_ai.tool.definitions``, the tool spans
``gen_ai.tool.call.arguments``/``gen_ai.tool.call.result``, and the SDK writes "Error details are
redacted." in a failed tool's status. What remains is enough: the spans' kinds and names, the
finish reasons and token counts of ``openai.chat``, ``gen_ai.tool.name``, the agent span's
``Max turns exceeded`` status, the handoff span. The runs read as with content, with nothing
to fix (three calls without arguments are no repeats; ``messages`` reads 0); no known gap.
"""

from __future__ import annotations

import pytest

from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import check_recorded, drive_and_check
from tests.frameworks.test_openai_agents import CASES, SCRIPTS
from tests.harness import RunningServer

DRIVER = "openai_agents_openllmetry"
# every scenario, and each again with content off (``<scenario>_nocontent``:
# TRACELOOP_TRACE_CONTENT=false, set by the driver): the same runs
EXPECTED = CASES


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, "openai_agents_olm", DRIVER, scenario,
                    SCRIPTS[scenario.removesuffix("_nocontent")], EXPECTED[scenario])


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, EXPECTED[scenario])
