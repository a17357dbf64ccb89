"""smolagents (OpenAIServerModel on the fake server) traced by OpenInference
(openinference-instrumentation-smolagents), in venv ``.venvs/smolagents``.

What smolagents emits (details: the recordings and ``/work/findings/smolagents.md``): one trace
per ``agent.run``, an AGENT span ``<AgentClass>.run`` > ``Step N`` CHAIN spans > an LLM span
(``OpenAIServerModel.generate``) and a TOOL span per tool called. The answer is the
``final_answer`` tool. ``max_steps`` stops the loop silently (no exception): smolagents then
asks the model, without tools, for a final answer and returns it. A tool's exception is caught
and shown to the model (``AgentToolExecutionError`` in the step); the run goes on. A managed
agent is called as a tool named after it and runs its own AGENT span inside that TOOL span.

The expectations are DESIGN §3's: one run per invocation, a child run for the managed agent
(with its parent), iterations = model calls, tool calls without ``final_answer``, an error
counted once, terminal state and reason (a ``max_steps`` stop is ``tool_limit_reached`` with
reason ``max_steps``, with the answer smolagents asked for), the agent's name. Each case runs
live and from its committed recording.
"""

from __future__ import annotations

import pytest

from tests.frameworks import cases, fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import RECORDINGS, Expect, check_runs, replay, run_driver
from tests.harness import RunningServer

DRIVER = "smolagents_oi"
ENV = "smolagents"
AGENT = "smol_researcher"
CODE = "Thought: look them up.\n<code>\n{}\n</code>"
SCRIPTS = {
    "three_tools": cases.three_tools("final_answer"),
    "limit": cases.limit(),
    "tool_error": cases.tool_error("final_answer"),
    "code_three_tools": fakellm.steps(
        *(fakellm.answer(CODE.format(f'print(lookup(key="{key}"))')) for key in "abc"),
        fakellm.answer(CODE.format(f'final_answer("{cases.ANSWER}")'))),
    "managed": {"": fakellm.steps(fakellm.call("smol_researcher", task="What is a?"),
                                  fakellm.call("final_answer", answer=cases.ANSWER)),
                "-sub": fakellm.steps(fakellm.call("lookup", key="a"),
                                      fakellm.call("final_answer", answer=cases.SUB_ANSWER))},
}
EXPECTED: dict[str, list[Expect]] = {
    # 4 model calls; the 4th calls final_answer: the answer, not a tool call
    "three_tools": [Expect(agent=AGENT, iterations=4, tool_calls=3, errors=0,
                           terminal_state="completed", has_final_answer=True,
                           terminal_reason=None, parent_agent=None)],
    # max_steps=3: three tool-calling model calls and three tool calls, then the final-answer
    # request without tools (a 4th model call) whose text is returned: stopped by the
    # framework's limit, with an answer
    "limit": [Expect(agent=AGENT, iterations=4, tool_calls=3, errors=0,
                     terminal_state="tool_limit_reached", terminal_reason="max_steps",
                     has_final_answer=True, parent_agent=None)],
    # the tool's RuntimeError is shown to the model, which answers: one error, an answer
    "tool_error": [Expect(agent=AGENT, iterations=2, tool_calls=1, errors=1,
                          terminal_state="completed", has_final_answer=True,
                          terminal_reason=None, parent_agent=None)],
    # CodeAgent: each model call writes code calling lookup; the 4th calls final_answer
    "code_three_tools": [Expect(agent="smol_coder", iterations=4, tool_calls=3, errors=0,
                                terminal_state="completed", has_final_answer=True,
                                terminal_reason=None, parent_agent=None)],
    # the managed agent runs as the manager's tool smol_researcher: a child run
    # smolagents runs a managed agent with no tool span: the delegation is the child run, not
    # a tool execution of the manager (an OpenAI Agents handoff has a span, and counts)
    "managed": [Expect(agent="smol_manager", iterations=2, tool_calls=0, errors=0,
                       terminal_state="completed", has_final_answer=True,
                       terminal_reason=None, parent_agent=None),
                Expect(agent=AGENT, iterations=2, tool_calls=1, errors=0,
                       terminal_state="completed", has_final_answer=True,
                       terminal_reason=None, parent_agent="smol_manager")],
}


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    model = cases.register(llm, f"{DRIVER}-{scenario}", SCRIPTS[scenario])
    run_driver(ENV, DRIVER, scenario, sidecar, llm, model)
    check_runs(sidecar, EXPECTED[scenario])
    if scenario == "limit":
        assert len(llm.requests(model)) == 4  # max_steps tool-calling requests + the summary


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_replay(sidecar: RunningServer, scenario: str) -> None:
    replay(sidecar, RECORDINGS / DRIVER / f"{scenario}.jsonl")
    check_runs(sidecar, EXPECTED[scenario])
