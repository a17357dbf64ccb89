"""AutoGen AgentChat (autogen-agentchat 0.7) with its own OpenTelemetry spans, its model calls
traced by opentelemetry-instrumentation-openai-v2 (AutoGen's model client opens no span).

What AutoGen emits (details: the recordings): ``create_agent <name>`` when an agent is built
(a trace of its own: no run); ``invoke_agent <name>`` around ``run``/``run_stream`` (and around
each turn of an agent in a team), ``gen_ai.agent.name`` on it, no output; ``execute_tool
<tool>`` with ``gen_ai.tool.name`` and ``gen_ai.tool.call.id`` but no arguments and no result;
a tool's exception makes that span ERROR (``error.type``, an ``exception`` event) before the
workbench hands the text to the model. A team's runtime adds messaging spans (``autogen send``
/ ``publish`` / ``process`` / ``create`` / ``ack``) that start a new trace for every message
delivered, linked (span links) to the sender, unless the application runs the team inside a
span of its own, as AutoGen's tracing guide does (without it the watchdog, which does not follow
span links, sees one run per turn: a known gap, not tested here).

The expectations are DESIGN §3's: one run per ``run(task=...)``, iterations = model calls, tool
calls, errors, terminal state, ``has_final_answer``, the agent's name. Each case runs live and
from its committed recording.
"""

from __future__ import annotations

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import Expect, check_recorded, drive_and_check
from tests.frameworks.scenarios import ANSWER, script
from tests.harness import RunningServer

AGENT = "autogen_researcher"
WRITER = "autogen_writer"
TEAM = {"": script("three_tools"), "-sub": fakellm.steps(fakellm.answer("Report: " + ANSWER))}
SCRIPTS = {
    **{name: {"": script(name)} for name in ("three_tools", "limit", "tool_error")},
    "three_tools_stream": {"": script("three_tools")},
    "team": TEAM,
}
EXPECTED = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    "three_tools_stream": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # max_tool_iterations=3: the third model call's tool request is run, then AutoGen returns
    # the tool results (a ToolCallSummaryMessage) without another model call and without an
    # exception; no span says a limit was reached, so the run ended with no answer.
    "limit": [Expect(AGENT, 3, 3, 0, "no_response", False, None, None)],
    # the tool span ends ERROR; the workbench gives the error text to the model, which answers
    "tool_error": [Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
    # The team inside the application's span (AutoGen's tracing guide): one trace; the first
    # agent to speak is the run's own, the writer's turn a child run (as a handoff is).
    "team": [Expect(AGENT, 4, 3, 0, "completed", True, None, None),
             Expect(WRITER, 1, 0, 0, "completed", True, None, AGENT)],
}


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, "autogen", "autogen_native", scenario, SCRIPTS[scenario],
                    EXPECTED[scenario])
    if scenario == "limit":  # AutoGen's own cap stopped the loop
        assert len(llm.requests("autogen_native-limit")) == 3


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, "autogen_native", scenario, EXPECTED[scenario])
