"""The OpenAI Agents SDK traced by OpenLIT (``openlit.init()``, which instruments the SDK and the
OpenAI client it finds installed), in venv ``.venvs/openai_agents_openlit``: the same runs as
with OpenInference (:mod:`tests.frameworks.test_openai_agents`) must read the same.

What it emits (OTel GenAI only): a ``create_agent <name>`` span per agent, alone in its trace
(no run); per ``Runner.run`` a root ``invoke_workflow Agent workflow`` (``gen_ai.workflow.name``
is the SDK's trace name, not an agent's) > the SDK's task span > ``invoke_agent <name>``
(``gen_ai.agent.name``) > one turn span per turn > ``chat <model>`` (the OpenAI client's: finish
reasons, GenAI messages, usage; an httpx ``POST`` below it) and ``execute_tool <tool>``. The SDK's
task and turn spans have no type OpenLIT knows: it names them bare ``invoke_agent`` with the
agent operation and no agent name. A handoff is ``invoke_agent <to agent>`` with
``gen_ai.agent.source`` = the agent handing off, inside that agent's span; the agent handed to
is a sibling span after it. An agent used as a tool nests (task span and all) inside the
``execute_tool`` span that ran it. ``max_turns`` is the agent span's status description
(``Max turns exceeded``, also its ``error.type``); a tool's exception is an ``execute_tool`` with
status ERROR (``Error running tool (non-fatal)``) whose result is the text the model gets.

Read as DESIGN §3 wants: the bare ``invoke_agent`` spans and the handoff span are no agents (a
step of the run, a tool call); the run is named after its agent span, not the workflow around
it. Each case runs live and from its committed recording.
"""

from __future__ import annotations

import pytest

from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import check_recorded, drive_and_check
from tests.frameworks.test_openai_agents import EXPECTED, SCRIPTS
from tests.harness import RunningServer

DRIVER = "openai_agents_openlit"
ENV = "openai_agents_openlit"


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, ENV, DRIVER, scenario, SCRIPTS[scenario], EXPECTED[scenario])


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, EXPECTED[scenario])
