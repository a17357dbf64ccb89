"""OpenAI Agents SDK (``OpenAIChatCompletionsModel`` on the fake server) traced by OpenInference
(openinference-instrumentation-openai-agents); the driver runs in the main venv.

What the SDK emits through OpenInference (details: the recordings and
``/work/findings/openai-agents.md``): one trace per ``Runner.run``, a root CHAIN span (the SDK's
trace, named after its workflow) > AGENT span ``<agent name>`` > LLM spans (``response``) +
TOOL spans ``<tool>``. ``max_turns=3`` raises ``MaxTurnsExceeded``: only the AGENT span's status
description says "Max turns exceeded", the root ends OK. A handoff shows as a second AGENT span
(a sibling under the root); an agent used as a tool runs its own AGENT span inside the TOOL span.

The expectations are DESIGN §3's: one run per invocation, child runs for the handoff target and
the agent-as-tool (with their parent), iterations = model calls, tool calls (a handoff's
``transfer_to_…`` call is a tool call of the parent), errors counted once, terminal state and
reason, ``has_final_answer``, the agent's name. Each case runs live and from its recording.
"""

from __future__ import annotations

import pytest

from tests.frameworks import cases
from tests.frameworks.cases import MAIN_VENV
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import RECORDINGS, Expect, check_runs, replay, run_driver
from tests.harness import RunningServer

DRIVER = "openai_agents_oi"
AGENT = "oa_researcher"
SCRIPTS = {
    "three_tools": cases.three_tools(),
    "limit": cases.limit(),
    "tool_error": cases.tool_error(),
    "handoff": cases.delegate("transfer_to_oa_researcher"),
    "agent_as_tool": cases.delegate("research", input="What is a?"),
}
EXPECTED: dict[str, list[Expect]] = {
    "three_tools": [Expect(agent=AGENT, iterations=4, tool_calls=3, errors=0,
                           terminal_state="completed", has_final_answer=True,
                           terminal_reason=None, parent_agent=None)],
    # max_turns=3: three model calls and three tool calls, then MaxTurnsExceeded (no answer;
    # a limit is not a failed call, so no error)
    "limit": [Expect(agent=AGENT, iterations=3, tool_calls=3, errors=0,
                     terminal_state="tool_limit_reached", terminal_reason="MaxTurnsExceeded",
                     has_final_answer=False, parent_agent=None)],
    # the SDK gives the tool's error text to the model, which answers: one error, an answer
    "tool_error": [Expect(agent=AGENT, iterations=2, tool_calls=1, errors=1,
                          terminal_state="completed", has_final_answer=True,
                          terminal_reason=None, parent_agent=None)],
    # oa_triage hands off (one model call, the transfer call) to oa_researcher, which answers
    "handoff": [Expect(agent="oa_triage", iterations=1, tool_calls=1, errors=0,
                       terminal_state="completed", has_final_answer=True,
                       terminal_reason=None, parent_agent=None),
                Expect(agent=AGENT, iterations=2, tool_calls=1, errors=0,
                       terminal_state="completed", has_final_answer=True,
                       terminal_reason=None, parent_agent="oa_triage")],
    "agent_as_tool": [Expect(agent="oa_manager", iterations=2, tool_calls=1, errors=0,
                             terminal_state="completed", has_final_answer=True,
                             terminal_reason=None, parent_agent=None),
                      Expect(agent=AGENT, iterations=2, tool_calls=1, errors=0,
                             terminal_state="completed", has_final_answer=True,
                             terminal_reason=None, parent_agent="oa_manager")],
}


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    model = cases.register(llm, f"{DRIVER}-{scenario}", SCRIPTS[scenario])
    run_driver(MAIN_VENV, DRIVER, scenario, sidecar, llm, model)
    check_runs(sidecar, EXPECTED[scenario])
    if scenario == "limit":
        assert len(llm.requests(model)) == 3  # the framework's own limit stopped the loop


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_replay(sidecar: RunningServer, scenario: str) -> None:
    replay(sidecar, RECORDINGS / DRIVER / f"{scenario}.jsonl")
    check_runs(sidecar, EXPECTED[scenario])
