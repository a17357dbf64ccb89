"""Agno (an ``Agent`` with the tool ``lookup`` on ``OpenAIChat``) traced by Langtrace
(``langtrace.init()``: its own instrumentation of Agno and of the OpenAI client; driver and venv
``agno_langtrace``), its spans handed to the OTLP/HTTP exporter.

What it emits (details: the recordings): one trace per ``agent.run``: a root ``Agent.run``
(scope ``langtrace_python_sdk.instrumentation.agno…``: ``langtrace.service.type`` ``framework``,
``agno.agent.name``, ``agno.agent.tools``, ``agno.agent.inputs``; no output) and below it a
``openai.chat.completions.create`` per model call (``langtrace.service.type`` ``llm``, GenAI's
model, operation and usage, no finish reason), its messages only in two span events:
``gen_ai.content.prompt`` (``gen_ai.prompt``, the request's messages as JSON) and
``gen_ai.content.completion`` (``gen_ai.completion``: ``[{"role": "assistant", "content": …}]``,
the content the text or the list of tool calls). No span for a tool: Langtrace's Agno
instrumentation wraps no tool execution of Agno 3.x; ``service.name`` is the script's path.

Before the Langtrace entry of ``watchdog/core/spans/frameworks.py`` (data: ``agno.agent.name``
the agent, the events' messages) every run was named after the script's path and read
``no_response``, Agno's ``tool_call_limit`` unseen. Known gaps, pinned: no tool call is seen
(the model's requests for tools are in its output messages alone), so neither a tool's error
nor a rule pack's tool budget; the model endpoint sees them (test_model_endpoint_frameworks).
"""

from __future__ import annotations

from typing import Any

from tests.frameworks import scenarios
from tests.frameworks.harness import Expect, scenario_tests
from tests.frameworks.test_agno import AGENT, SCRIPTS
from tests.harness import RunningServer

ENV = DRIVER = "agno_langtrace"
CASES: dict[str, Expect] = {
    # no tool span: four model calls, no tool call (a known gap), the answer from the events
    "three_tools": Expect(AGENT, 4, 0, 0, "completed", True, None, None),
    # tool_call_limit=3: the fifth request carries Agno's refusal (read from the prompt event)
    "limit": Expect(AGENT, 5, 0, 0, "tool_limit_reached", True, "tool_call_limit", None),
    # the tool's exception reaches the model as a tool message, on no span: no error seen
    "tool_error": Expect(AGENT, 2, 0, 0, "completed", True, None, None),
}
ANSWERS = {"three_tools": scenarios.ANSWER, "limit": scenarios.SUMMARY,
           "tool_error": scenarios.ERROR_ANSWER}


def _read(sidecar: RunningServer, scenario: str) -> None:
    (listed,) = sidecar.get_json("/v1/runs?limit=10")["runs"]
    run: dict[str, Any] = sidecar.get_json(f"/v1/runs/{listed['id']}")
    assert run["final_output"] == ANSWERS[scenario], run
    assert run["signals"]["tools"] == {}, run["signals"]
    assert run["signals"]["last_error"] == "", run["signals"]


test_live, test_recorded = scenario_tests(ENV, DRIVER, SCRIPTS, CASES, _read)
