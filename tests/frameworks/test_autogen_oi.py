"""AutoGen AgentChat (autogen-agentchat 0.7) traced by OpenInference as Arize's guide sets it up
(openinference-instrumentation-autogen-agentchat for the agents and tools,
openinference-instrumentation-openai for the model calls), in venv ``.venvs/autogen_oi``; on the
global tracer provider, so autogen-core's own GenAI spans come too.

What it emits (details: the recordings): autogen-core's ``create_agent <name>`` (a trace of its
own: no run), ``invoke_agent <name>`` around each turn and ``execute_tool <tool>``; OpenInference's
AGENT span ``<agent>.on_messages_stream`` inside ``invoke_agent`` (no ``agent.name``:
``graph.node.id`` is the agent), LLM ``OpenAIChatCompletionClient.create`` around the OpenAI
instrumentor's ``ChatCompletion`` (one call, twice), TOOL ``<agent>.<tool>`` around
``execute_tool``. A team (``RoundRobinGroupChat``): a root CHAIN ``RoundRobinGroupChat.run_stream``
(``participant_names``; ``output.value`` = the whole TaskResult), each member's ``invoke_agent``
(the OpenInference AGENT inside) below the runtime's messaging spans, the members side by side.

The expectations are DESIGN §3's, as for AutoGen's own spans (tests/frameworks/test_autogen.py):
one run per ``run(task=...)``, iterations = model calls, tool calls, errors, terminal state,
``has_final_answer``, the agent's name; a team's run with each member's turn a child run of it.
Each case runs live and from its committed recording.
"""

from __future__ import annotations

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM, Script
from tests.frameworks.harness import Expect, check_recorded, drive_and_check, top_answers
from tests.frameworks.scenarios import ANSWER, ERROR_ANSWER, script
from tests.harness import RunningServer

DRIVER = "autogen_oi"
AGENT = "autogen_researcher"
WRITER = "autogen_writer"
TEAM = "autogen-oi-service"  # nothing names the team: its run is the service's
WRITE_UP = "Write-up: a, b and c are known."
SCRIPTS: dict[str, dict[str, Script]] = {
    **{name: {"": script(name)} for name in ("three_tools", "limit", "tool_error")},
    # the researcher looks a, b and c up and answers; then the writer answers
    "team": {"": script("three_tools"), "-sub": fakellm.steps(fakellm.answer(WRITE_UP))},
}
EXPECTED = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # max_tool_iterations=3: AutoGen returns the tool results without another model call and
    # without an exception; no span says a limit was reached (as with AutoGen's own spans)
    "limit": [Expect(AGENT, 3, 3, 0, "no_response", False, None, None)],
    "tool_error": [Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
    # RoundRobinGroupChat, MaxMessageTermination(3): the team's root lists its participants;
    # the members are peers, each a child run of the team's run (each turn's invoke_agent and
    # on_messages_stream one agent); the team answers with the writer's answer
    "team": [Expect(TEAM, 0, 0, 0, "completed", True, None, None),
             Expect(AGENT, 4, 3, 0, "completed", True, None, TEAM),
             Expect(WRITER, 1, 0, 0, "completed", True, None, TEAM)],
}
ANSWERS = {"three_tools": ANSWER, "limit": None, "tool_error": ERROR_ANSWER, "team": WRITE_UP}


def answer_read(sidecar: RunningServer, scenario: str) -> None:
    answers = top_answers(sidecar)
    assert answers == [ANSWERS[scenario]], answers


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, "autogen_oi", DRIVER, scenario, SCRIPTS[scenario],
                    EXPECTED[scenario])
    answer_read(sidecar, scenario)
    if scenario == "limit":  # AutoGen's own cap stopped the loop
        assert len(llm.requests(f"{DRIVER}-limit")) == 3


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, EXPECTED[scenario])
    answer_read(sidecar, scenario)
