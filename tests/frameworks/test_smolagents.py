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

Every scenario again with message content hidden (``<scenario>_nocontent``:
``OPENINFERENCE_HIDE_INPUTS``/``_OUTPUTS``/``_INPUT_MESSAGES``/``_OUTPUT_MESSAGES``): every
``input.value`` and ``output.value`` is ``__REDACTED__``, no LLM span carries messages or a
finish reason; tool names (``final_answer`` too), token counts, statuses and the agent span's
``smolagents.max_steps`` remain. The runs read the same: the answer is the ``final_answer``
tool, errors are statuses. ``max_steps`` was read only from smolagents' system prompt of its
request for an answer after the cap (a run stopped by it read ``completed``); that request is
the only model call outside a ``Step N`` span, hanging from the agent span itself
(``test_nocontent_max_steps_is_the_model_call_outside_every_step``): a run whose last model call
hangs from an agent span naming ``smolagents.max_steps`` was stopped by it, and one that
answered in its last step allowed (``answer_at_cap``) was not.
"""

from __future__ import annotations

import pytest

from tests.frameworks import cases, fakellm
from tests.frameworks.fakellm import FakeLLM
from tests.frameworks.harness import (
    RECORDINGS,
    Expect,
    check_runs,
    recorded_spans,
    replay,
    run_driver,
)
from tests.harness import RunningServer

DRIVER = "smolagents_oi"
ENV = "smolagents"
AGENT = "smol_researcher"
CODE = "Thought: look them up.\n<code>\n{}\n</code>"
SCRIPTS = {
    "three_tools": cases.three_tools("final_answer"),
    "limit": cases.limit(),
    "tool_error": cases.tool_error("final_answer"),
    "answer_at_cap": fakellm.steps(fakellm.call("lookup", key="a"), fakellm.call("lookup", key="b"),
                                   fakellm.call("final_answer", answer=cases.ANSWER)),
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
    # max_steps=3 too, but final_answer called in the third step: no stop at the cap
    "answer_at_cap": [Expect(agent=AGENT, iterations=3, tool_calls=2, errors=0,
                             terminal_state="completed", has_final_answer=True,
                             terminal_reason=None, parent_agent=None)],
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
# Every scenario again with message content hidden (``<scenario>_nocontent``)
NOCONTENT = ("three_tools", "limit", "answer_at_cap", "tool_error", "code_three_tools",
             "managed")
SCRIPTS.update({f"{scenario}_nocontent": SCRIPTS[scenario] for scenario in NOCONTENT})
EXPECTED.update({f"{scenario}_nocontent": EXPECTED[scenario] for scenario in NOCONTENT})


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    model = cases.register(llm, f"{DRIVER}-{scenario}", SCRIPTS[scenario])
    run_driver(ENV, DRIVER, scenario, sidecar, llm, model)
    check_runs(sidecar, EXPECTED[scenario])
    if scenario.startswith("limit"):
        assert len(llm.requests(model)) == 4  # max_steps tool-calling requests + the summary


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_replay(sidecar: RunningServer, scenario: str) -> None:
    replay(sidecar, RECORDINGS / DRIVER / f"{scenario}.jsonl")
    check_runs(sidecar, EXPECTED[scenario])


def test_nocontent_max_steps_is_the_model_call_outside_every_step() -> None:
    """With content hidden, what says a run stopped at ``max_steps``: every model call but
    smolagents' request for an answer after the cap runs in a ``Step N`` span; that one hangs
    from the agent span (which names the cap). A run that answered in its last step allowed has
    as many steps, and no such call."""
    for scenario, capped in (("limit_nocontent", True), ("answer_at_cap_nocontent", False)):
        spans = recorded_spans(RECORDINGS / DRIVER / f"{scenario}.jsonl")
        values = {item["value"].get("stringValue") for span in spans
                  for item in span.get("attributes", ())
                  if item["key"] in ("input.value", "output.value")}
        assert values == {"__REDACTED__"}
        assert not any(item["key"].startswith(("llm.input_messages", "llm.output_messages"))
                       or item["key"] == "llm.finish_reason"
                       for span in spans for item in span.get("attributes", ()))
        (agent,) = [span for span in spans if span["name"] == f"{AGENT}.run"]
        assert {"key": "smolagents.max_steps", "value": {"intValue": "3"}} in agent["attributes"]
        steps = {span["spanId"] for span in spans if span["name"].startswith("Step ")}
        assert len(steps) == 3
        models = sorted((span for span in spans if span["name"] == "OpenAIModel.generate"),
                        key=lambda span: int(span["endTimeUnixNano"]))
        outside = [span for span in models if span["parentSpanId"] not in steps]
        if capped:
            assert outside == [models[-1]] and models[-1]["parentSpanId"] == agent["spanId"]
        else:
            assert outside == []
