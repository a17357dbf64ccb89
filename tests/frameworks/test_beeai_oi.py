"""BeeAI Framework (beeai-framework 0.1, ``RequirementAgent`` on ``OpenAIChatModel``, LiteLLM
under it) traced by OpenInference (openinference-instrumentation-beeai), in venv
``.venvs/beeai``.

What BeeAI emits (details: the recordings): one trace per ``run``; an AGENT span named after
the agent (``agent.name``, the answer in ``output.value``, every step in
``metadata.steps.N.*``) > an LLM span ``OpenAIChatModel`` per model call (the tool calls in
``llm.output_messages.0.message.tool_calls.*``, token counts, ``tool_choice`` in
``llm.invocation_parameters``; no finish reason, an empty ``output.value``) and a TOOL span per
tool run, named after the tool (``input.value`` = ``{"input": {args}, "options": null}``).
BeeAI's agent answers through its own tool ``final_answer``: a TOOL span, plus an AGENT span
``final_answer`` with nothing below it. A model call whose output failed BeeAI's validation
(text where a tool call was required) is an ERROR LLM span (``ChatModelToolCallError``) with an
LLM-kind child ``error``, its retries inside it. A handoff (``HandoffTool``) is a TOOL span with
the sub-agent's AGENT span inside it: a child run.

The expectations are DESIGN §3's: one run per ``run``, iterations = model calls (BeeAI's
``final_answer`` call counts as the tool call it is not: its span is the answer), tool calls,
errors, terminal state, the agent's name, the sub-agent a child run; ``max_iterations`` (BeeAI
fails the agent span with ``AgentError`` "Agent was not able to resolve the task in N
iterations.") is that limit, not an error. Each case runs live and from its committed recording.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.frameworks import fakellm
from tests.frameworks.fakellm import FakeLLM, Script, Step, answer, call
from tests.frameworks.harness import Expect, check_recorded, drive_and_check, top_answers
from tests.frameworks.scenarios import ANSWER, ERROR_ANSWER, script
from tests.harness import RunningServer

DRIVER = "beeai_oi"
AGENT = "bee_researcher"
MANAGER = "bee_manager"


def json_tool_calls(_index: int, body: dict[str, Any]) -> Step:
    """A model that answers a request's ``response_format`` JSON schema as it asks (BeeAI's
    tool calls without native tool calling): ``{"name", "parameters"}``, wrapped as ``item``
    when the schema offers several tools; ``lookup`` a, b, c (by the tool results so far),
    then ``final_answer``. A request without that schema gets the answer as text."""
    done = sum(1 for message in body.get("messages", ()) if message.get("role") == "tool")
    schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
    if not schema:
        return answer(ANSWER)
    call_: dict[str, Any] = ({"name": "lookup", "parameters": {"key": "abc"[done]}} if done < 3
                             else {"name": "final_answer", "parameters": {"response": ANSWER}})
    wrapped = "item" in (schema.get("properties") or {})
    return answer(json.dumps({"item": call_} if wrapped else call_))


SCRIPTS: dict[str, dict[str, Script]] = {
    # tool_choice "required": the model answers by calling BeeAI's final_answer tool
    "three_tools": {"": fakellm.steps(*(call("lookup", key=key) for key in "abc"),
                                      call("final_answer", response=ANSWER))},
    "tool_error": {"": fakellm.steps(call("lookup", key="broken"),
                                     call("final_answer", response=ERROR_ANSWER))},
    # the model answers in text though a tool call is required: BeeAI retries inside the call
    "three_tools_text": {"": script("three_tools")},
    "three_tools_json": {"": json_tool_calls},
    "limit": {"": script("limit")},
    "managed": {"": fakellm.steps(call("bee_researcher", task="Look up a."),
                                  call("final_answer", response="a is known.")),
                "-sub": fakellm.steps(call("lookup", key="a"),
                                      call("final_answer", response="value of a"))},
}
EXPECTED = {
    "three_tools": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    "three_tools_json": [Expect(AGENT, 4, 3, 0, "completed", True, None, None)],
    # 7 HTTP requests (the last step's 4 inside one chat-model call, failed, then retried):
    # the agent's 4 steps, the failed validation an error
    "three_tools_text": [Expect(AGENT, 4, 3, 1, "completed", True, None, None)],
    "tool_error": [Expect(AGENT, 2, 1, 1, "completed", True, None, None)],
    # max_iterations=3: three steps, each a lookup, then BeeAI's AgentError
    "limit": [Expect(AGENT, 3, 3, 0, "tool_limit_reached", False, "max_iterations", None)],
    "managed": [Expect(MANAGER, 2, 1, 0, "completed", True, None, None),
                Expect(AGENT, 2, 1, 0, "completed", True, None, MANAGER)],
}
ANSWERS = {"three_tools": ANSWER, "three_tools_json": ANSWER, "three_tools_text": ANSWER,
           "tool_error": ERROR_ANSWER, "limit": None, "managed": "a is known."}


def answer_read(sidecar: RunningServer, scenario: str) -> None:
    answers = top_answers(sidecar)
    assert answers == [ANSWERS[scenario]], answers


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_live(sidecar: RunningServer, llm: FakeLLM, scenario: str) -> None:
    drive_and_check(sidecar, llm, "beeai", DRIVER, scenario, SCRIPTS[scenario],
                    EXPECTED[scenario])
    answer_read(sidecar, scenario)


@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded(sidecar: RunningServer, scenario: str) -> None:
    check_recorded(sidecar, DRIVER, scenario, EXPECTED[scenario])
    answer_read(sidecar, scenario)
