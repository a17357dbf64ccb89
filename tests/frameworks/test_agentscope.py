"""AgentScope 2 (``agentscope.agent.Agent``, its reasoning-acting loop with
``ReActConfig(max_iters=3)``; a ``Toolkit`` of one ``FunctionTool`` on its ``OpenAIChatModel``)
traced by its own ``TracingMiddleware`` on the global tracer provider (driver
``agentscope_agent``, venv ``.venvs/agentscope``). AgentScope 2 has no ``init(tracing_url=...)``
(1.x's): the middleware traces when an SDK tracer provider is set, exporting where it does.

What it emits, per ``Agent.reply``: an ``invoke_agent <name>`` span (the trace's root;
``gen_ai.agent.name``, the session as ``gen_ai.conversation.id``, the reply's input and output
messages), below it one ``chat <model>`` span per model call (GenAI: provider, model, usage,
finish reasons, ``gen_ai.response.id``, input and output messages, the tools offered) and one
``execute_tool <tool>`` per tool call (its call id, arguments and result: the ToolResponse as
JSON, with its ``state``).

How it is read: by the GenAI conventions, plus AgentScope's entry for a tool's failure: a tool
that raised ends its span OK, its result's ``state`` ``error`` (the message its text), which
fails the call. Known gaps, pinned: ``max_iters`` asks the model once more with
``tool_choice`` none and a hint the spans leave out of the input messages, and the reply's
``exceed_max_iters`` is on no span: the run reads ``completed`` with that answer, no limit
(when that last call asks for a tool anyway, AgentScope runs it and ends the reply with its own
"The maximum reasoning-acting iterations are exceeded.": its entry's limit answer, read
``tool_limit_reached``, ``max_iters``); a
tool given no permission decision parks the reply at its first call ("I'm waiting for your
permission…", ``agentscope.agent.hitl_pending_tools`` on the agent span): the run reads
``completed`` with that text as its answer. (The model endpoint sees the limit's last request
withdraw the tools: test_model_endpoint_frameworks, test_model_endpoint_agentscope.)
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.frameworks import fakellm, scenarios
from tests.frameworks.fakellm import FakeLLM, Script
from tests.frameworks.harness import Expect, check_recorded, drive_and_check
from tests.harness import RunningServer

ENV, DRIVER = "agentscope", "agentscope_agent"
AGENT = "researcher"
SCRIPTS: dict[str, Script] = {
    **{name: scenarios.script(name) for name in (
        "three_tools", "three_tools_stream", "limit", "tool_error", "tool_error_stream")},
    "permission": scenarios.script("three_tools"),
    "two_replies": fakellm.steps(fakellm.call("lookup", key="a"), fakellm.answer("a is known."),
                                 fakellm.call("lookup", key="b"), fakellm.answer("b is known.")),
    # a model that calls the tool even at tool_choice none
    "limit_disobeyed": fakellm.looping("lookup", lambda index: {"key": f"k{index}"},
                                       scenarios.SUMMARY, obeys_tool_choice=False)}
PARKED = "I'm waiting for your permission or the external execution to finish."
CASES: dict[str, list[Expect]] = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    "three_tools_stream": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # known gap, pinned: max_iters (3 tool rounds, then one request with tool_choice none) is
    # on no span: completed with the summary, no limit
    "limit": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # ... whose forced last call asks for a tool anyway: AgentScope runs it, then ends the reply
    # with its own text in place of an answer, which says the limit
    "limit_disobeyed": [Expect(AGENT, 4, 4, 0, "tool_limit_reached", False, "max_iters", None)],
    # the tool's exception is only in its result's state (the span ends OK): the call failed
    "tool_error": [Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
    "tool_error_stream": [Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
    # each Agent.reply a trace, a run of its own, the agent's session on both
    "two_replies": [Expect(AGENT, 2, 1, 0, "completed", True, None, None)] * 2,
    # known gap, pinned: the reply parked for the user's permission reads completed, its
    # waiting text the answer, the asked-for tool not run
    "permission": [Expect(AGENT, 1, 0, 0, "completed", True, None, None)],
}


def _read(sidecar: RunningServer, scenario: str) -> None:
    if scenario == "two_replies":
        runs = [sidecar.get_json(f"/v1/runs/{listed['id']}")
                for listed in sidecar.get_json("/v1/runs?limit=10")["runs"]]
        assert sorted(run["final_output"] for run in runs) == ["a is known.", "b is known."]
        assert len({run["session"] for run in runs}) == 1, runs
        return
    (listed,) = sidecar.get_json("/v1/runs?limit=10")["runs"]
    run: dict[str, Any] = sidecar.get_json(f"/v1/runs/{listed['id']}")
    tools = CASES[scenario][0].tool_calls
    assert run["signals"]["tools"] == ({"lookup": tools} if tools else {}), run["signals"]
    assert run["agent"] == AGENT and run["session"], run
    assert run["final_output"] == {"three_tools": scenarios.ANSWER,
                                   "three_tools_stream": scenarios.ANSWER,
                                   "tool_error_stream": scenarios.ERROR_ANSWER,
                                   "limit": scenarios.SUMMARY,
                                   "tool_error": scenarios.ERROR_ANSWER,
                                   "limit_disobeyed": None,  # (its text is no answer)
                                   "permission": PARKED}[scenario], run
    if scenario.startswith("tool_error"):  # the result's text, no exception type
        assert run["signals"]["last_error"] == "tool_error: backend unavailable for broken", \
            run["signals"]


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, ENV, DRIVER, scenario, {"": SCRIPTS[scenario]},
                    CASES[scenario])
    _read(sidecar, scenario)
    assert len(llm.requests(f"{DRIVER}-{scenario}")) == sum(
        expect.iterations for expect in CASES[scenario])


@pytest.mark.parametrize("scenario", sorted(CASES))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, CASES[scenario])
    _read(sidecar, scenario)
